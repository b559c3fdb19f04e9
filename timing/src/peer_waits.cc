// SPDX-License-Identifier: Apache-2.0
#include "ranklens/peer_waits.h"

#include <algorithm>
#include <map>

#include "ranklens/events.h"
#include "ranklens/job_collectives.h"
#include "ranklens/recording.h"

namespace ranklens {
namespace timing {

std::vector<PeerPace> peerPace(const std::vector<const trace::Recording*>& ranks, size_t me) {
  const JobCollectives job(ranks, /*withGroups=*/false);
  // The other ranks' largest gap per collective, and how many knew theirs.
  std::map<JobCollectives::Key, std::pair<int64_t, int>> latestPeer;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (r == me) continue;
    for (const auto& rc : ranks[r]->calls()) {
      if (!job.pairs(rc) || rc.gapNs == -1) continue;
      auto [it, fresh] = latestPeer.try_emplace(job.keyOf(r, rc), rc.gapNs, 0);
      it->second.first = std::max(it->second.first, rc.gapNs);
      it->second.second++;
    }
  }
  const trace::Recording& mine = *ranks[me];
  std::vector<PeerPace> out(mine.calls().size());
  const int everyone = static_cast<int>(ranks.size());
  for (const auto& rc : mine.calls()) {
    const JobCollectives::Instance* in = job.find(me, rc);
    if (in == nullptr || in->timedBy != everyone) continue;
    const auto gap = latestPeer.find(job.keyOf(me, rc));
    if (gap == latestPeer.end() || gap->second.second != everyone - 1) continue;
    out[rc.order] = {true, in->shortestNs, gap->second.first};
  }
  return out;
}

std::vector<RankWaits> peerWaits(const std::vector<const trace::Recording*>& ranks) {
  const JobCollectives job(ranks, /*withGroups=*/false);
  std::vector<RankWaits> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const trace::Recording& rec = *ranks[r];
    RankWaits w;
    w.directory = rec.directory();
    w.rank = rec.manifest().rank;
    const std::vector<events::Stage> markers = events::stepMarkers(rec.stages()).marks;
    for (size_t i = 0; i + 1 < markers.size(); ++i)
      w.steps.push_back({markers[i].step, markers[i + 1].timeNs - markers[i].timeNs, 0});
    for (const auto& rc : rec.calls()) {
      const JobCollectives::Instance* in = job.find(r, rc);
      if (in == nullptr || in->timedBy < 2) continue;
      const int64_t wait = rc.durationNs - in->shortestNs;
      w.collectives++;
      w.lastToArrive += wait == 0;
      w.waitNs += wait;
      // The step whose marker precedes the call's submission (the last marker closes the last step).
      const ptrdiff_t step = events::markerBefore(markers, rc.call.timeNs);
      if (step >= 0 && static_cast<size_t>(step) + 1 < markers.size())
        w.steps[static_cast<size_t>(step)].waitNs += wait;
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace timing
}  // namespace ranklens

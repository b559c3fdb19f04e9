// SPDX-License-Identifier: Apache-2.0
#include "ranklens/peer_waits.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/recording.h"

namespace ranklens {
namespace timing {

namespace {

using InstanceKey = std::tuple<std::string, uint64_t>;  // communicator's job name, sequence

bool paired(const trace::RecordedCall& rc) {
  return rc.durationNs > 0 && rc.call.groupId == 0 && rc.call.nranks > 1 &&
         !events::isP2p(static_cast<events::Op>(rc.call.op));
}

struct Instance {
  int64_t shortestNs = INT64_MAX;  // the duration of the rank that arrived last
  int timedBy = 0;
};

// Every collective instance of the job, and each rank's communicator names (jobCommunicatorNames).
std::map<InstanceKey, Instance> pairCollectives(const std::vector<const trace::Recording*>& ranks,
                                                std::vector<std::map<uint64_t, std::string>>* names) {
  std::map<InstanceKey, Instance> instances;
  for (const trace::Recording* rec : ranks) {
    names->push_back(jobCommunicatorNames(*rec));
    for (const auto& rc : rec->calls()) {
      if (!paired(rc)) continue;
      Instance& in = instances[InstanceKey{names->back()[rc.call.commId], rc.call.seq}];
      in.shortestNs = std::min(in.shortestNs, rc.durationNs);
      in.timedBy++;
    }
  }
  return instances;
}

}  // namespace

std::vector<PeerPace> peerPace(const std::vector<const trace::Recording*>& ranks, size_t me) {
  std::vector<std::map<uint64_t, std::string>> names;
  const auto instances = pairCollectives(ranks, &names);
  std::map<InstanceKey, std::pair<int64_t, int>> latestPeer;  // the other ranks' largest gap, how many knew theirs
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (r == me) continue;
    for (const auto& rc : ranks[r]->calls()) {
      if (!paired(rc) || rc.gapNs == -1) continue;
      auto [it, fresh] = latestPeer.try_emplace(InstanceKey{names[r][rc.call.commId], rc.call.seq}, rc.gapNs, 0);
      it->second.first = std::max(it->second.first, rc.gapNs);
      it->second.second++;
    }
  }
  const trace::Recording& mine = *ranks[me];
  std::vector<PeerPace> out(mine.calls().size());
  const int everyone = static_cast<int>(ranks.size());
  for (const auto& rc : mine.calls()) {
    if (!paired(rc)) continue;
    const InstanceKey key{names[me][rc.call.commId], rc.call.seq};
    const auto in = instances.find(key);
    if (in == instances.end() || in->second.timedBy != everyone) continue;
    const auto gap = latestPeer.find(key);
    if (gap == latestPeer.end() || gap->second.second != everyone - 1) continue;
    out[rc.order] = {true, in->second.shortestNs, gap->second.first};
  }
  return out;
}

std::vector<RankWaits> peerWaits(const std::vector<const trace::Recording*>& ranks) {
  std::vector<std::map<uint64_t, std::string>> names;
  const auto instances = pairCollectives(ranks, &names);
  std::vector<RankWaits> out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const trace::Recording& rec = *ranks[r];
    RankWaits w;
    w.directory = rec.directory();
    w.rank = rec.manifest().rank;
    std::vector<events::Stage> markers;
    for (const char* name : {"step", "optimizer"}) {  // the Python adapter marks the end of each optimizer step
      for (const auto& s : rec.stages())
        if (s.name == name) markers.push_back(s);
      if (!markers.empty()) break;
    }
    std::sort(markers.begin(), markers.end(),
              [](const events::Stage& a, const events::Stage& b) { return a.timeNs < b.timeNs; });
    for (size_t i = 0; i + 1 < markers.size(); ++i)
      w.steps.push_back({markers[i].step, markers[i + 1].timeNs - markers[i].timeNs, 0});
    for (const auto& rc : rec.calls()) {
      if (!paired(rc)) continue;
      const Instance& in = instances.at(InstanceKey{names[r][rc.call.commId], rc.call.seq});
      if (in.timedBy < 2) continue;
      const int64_t wait = rc.durationNs - in.shortestNs;
      w.collectives++;
      w.lastToArrive += wait == 0;
      w.waitNs += wait;
      // The step whose marker precedes the call's submission.
      auto next = std::upper_bound(markers.begin(), markers.end(), rc.call.timeNs,
                                   [](int64_t t, const events::Stage& s) { return t < s.timeNs; });
      const size_t index = static_cast<size_t>(next - markers.begin());
      if (index > 0 && index < markers.size()) w.steps[index - 1].waitNs += wait;
    }
    out.push_back(std::move(w));
  }
  return out;
}

}  // namespace timing
}  // namespace ranklens

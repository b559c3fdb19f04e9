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

}  // namespace

std::vector<RankWaits> peerWaits(const std::vector<const trace::Recording*>& ranks) {
  struct Instance {
    int64_t shortestNs = INT64_MAX;
    int timedBy = 0;
  };
  std::map<InstanceKey, Instance> instances;
  std::vector<std::map<uint64_t, std::string>> names;
  for (const trace::Recording* rec : ranks) {
    names.push_back(jobCommunicatorNames(*rec));
    for (const auto& rc : rec->calls()) {
      if (!paired(rc)) continue;
      Instance& in = instances[InstanceKey{names.back()[rc.call.commId], rc.call.seq}];
      in.shortestNs = std::min(in.shortestNs, rc.durationNs);
      in.timedBy++;
    }
  }
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
      const Instance& in = instances[InstanceKey{names[r][rc.call.commId], rc.call.seq}];
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

// SPDX-License-Identifier: Apache-2.0
#include "ranklens/job_collectives.h"

#include <algorithm>

#include "ranklens/events.h"
#include "ranklens/recording.h"

namespace ranklens {
namespace timing {

std::map<uint64_t, std::string> jobCommunicatorNames(const trace::Recording& recording) {
  std::map<std::string, int> seen;
  std::map<uint64_t, std::string> names;
  for (const auto& c : recording.comms()) {
    const std::string shape = c.how + "/" + std::to_string(c.nranks) + "/" + std::to_string(c.color);
    names[c.commId] = shape + "/" + std::to_string(seen[shape]++);
  }
  return names;
}

JobCollectives::JobCollectives(const std::vector<const trace::Recording*>& ranks, bool withGroups)
    : withGroups_(withGroups) {
  for (size_t r = 0; r < ranks.size(); ++r) {
    names_.push_back(jobCommunicatorNames(*ranks[r]));
    for (const auto& rc : ranks[r]->calls()) {
      if (!pairs(rc)) continue;
      Instance& in = instances_[keyOf(r, rc)];
      in.shortestNs = std::min(in.shortestNs, rc.durationNs);
      in.timedBy++;
    }
  }
}

bool JobCollectives::pairs(const trace::RecordedCall& rc) const {
  return rc.durationNs > 0 && (withGroups_ || rc.call.groupId == 0) && rc.call.nranks > 1 &&
         !events::isP2p(static_cast<events::Op>(rc.call.op));
}

JobCollectives::Key JobCollectives::keyOf(size_t rank, const trace::RecordedCall& rc) const {
  const auto& names = names_.at(rank);
  const auto name = names.find(rc.call.commId);
  return Key{name == names.end() ? std::string() : name->second, rc.call.seq};
}

const JobCollectives::Instance* JobCollectives::find(size_t rank, const trace::RecordedCall& rc) const {
  if (!pairs(rc)) return nullptr;
  const auto it = instances_.find(keyOf(rank, rc));
  return it == instances_.end() ? nullptr : &it->second;
}

}  // namespace timing
}  // namespace ranklens

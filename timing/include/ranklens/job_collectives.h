// SPDX-License-Identifier: Apache-2.0
// The collectives of one recorded job, paired across its ranks: a communicator's id is per process, so every rank
// names it by its creation call, size, color and order among such communicators, and a collective by that name and
// its sequence. For each collective, the shortest duration over the ranks that timed it (the last to arrive waits
// for nobody: its duration is the transfer) and how many ranks timed it. The estimator's transfer times, the peer
// waits and peer pacing all read it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace ranklens {
namespace trace {
class Recording;
struct RecordedCall;
}  // namespace trace
namespace timing {

// A name every rank of a job gives the same communicator, e.g. "init/2/-1/0".
std::map<uint64_t, std::string> jobCommunicatorNames(const trace::Recording& recording);

class JobCollectives {
 public:
  struct Instance {
    int64_t shortestNs = INT64_MAX;
    int timedBy = 0;
  };
  // Timed collectives of communicators of several ranks; with `withGroups`, also the first call of a group on each
  // stream (timed for the group), else none in a group.
  JobCollectives(const std::vector<const trace::Recording*>& ranks, bool withGroups);
  // Whether a call is one of the paired collectives.
  bool pairs(const trace::RecordedCall& call) const;
  // The call's collective across the job; nullptr when the call is not paired.
  const Instance* find(size_t rank, const trace::RecordedCall& call) const;
  using Key = std::tuple<std::string, uint64_t>;  // communicator's job name, sequence
  Key keyOf(size_t rank, const trace::RecordedCall& call) const;

 private:
  bool withGroups_;
  std::vector<std::map<uint64_t, std::string>> names_;  // per rank
  std::map<Key, Instance> instances_;
};

}  // namespace timing
}  // namespace ranklens

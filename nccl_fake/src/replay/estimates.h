// SPDX-License-Identifier: Apache-2.0
// Durations for calls the recording does not time, or for every call under timing: estimated (estimates.cc): the
// duration history (history, else the replayed recording's own timed calls), the estimator over it, and the step
// places of the estimator's same-place rule. noteStage and simulatedMicroseconds (replay.h) are here. May call the
// estimator and history of ranklens_timing and the logger.
#pragma once

#include <cstdint>
#include <memory>

#include "nccl_fake/enqueue.h"
#include "ranklens/config.h"
#include "ranklens/estimator.h"
#include "ranklens/recording.h"
#include "ranklens/status.h"

namespace nccl_fake {
namespace replay {

struct Session;
struct Counters;

struct Estimates {
  ranklens::timing::History history;
  std::unique_ptr<ranklens::timing::Estimator> estimator;
  bool all = false;                // timing: estimated
  int localWorldSize = -1;         // the recorded job's, for the estimator's locality (read once)
  bool historySpansNodes = false;  // some history sample's communicator spanned nodes
  bool warnedLocality = false;     // the WARN that no sample did, for a communicator that does, was given
  // For the estimator's same-place rule: calls outside groups, and groups on a stream (by their first call's op and
  // their calls' bytes on it), counted from the program's "step" markers.
  ranklens::timing::StepOccurrences stepOccurrences;
};

// The history (the setting's file, else the recording's timed calls) and the estimator over it. Fails when the
// history cannot be read, or timing: estimated has none. `recording` is null without replay_trace.
ranklens::Status loadEstimates(Estimates* e, const ranklens::config::Settings& st,
                               const ranklens::trace::Recording* recording);

// Counts what an estimate that is held came from (under the session's lock).
void countEstimate(Counters& c, const ranklens::timing::Estimate& e);
// A duration for a call outside a group that is held for an estimate (under the session's lock).
int64_t estimateNs(Session* s, const CallInfo& info, uint64_t bytes);
// The estimate for a group's calls on one stream: its first call's op, the stream's bytes, its step place.
ranklens::timing::Estimate estimateGroup(const Session& s, const CallInfo& first, uint64_t bytes, int occurrence);

}  // namespace replay
}  // namespace nccl_fake

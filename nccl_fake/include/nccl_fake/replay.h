// SPDX-License-Identifier: Apache-2.0
// Replay of a recorded trace (config replay_trace): replayed communicators are matched to recorded ones, every call
// to its recording by sequence and signature; the call then gets the recorded duration as a hold on its stream
// (fidelity timing and value) and the recorded payload in its receive buffer (value). Calls the recording does not
// cover follow on_mismatch: error, warn (replayed without hold or payload) or estimate (a fitted duration).
#pragma once

#include <cstdint>

#include "nccl_fake/comm.h"
#include "nccl_fake/enqueue.h"
#include "ranklens/events.h"

namespace nccl_fake {
namespace replay {

// A recorded trace is being replayed (replay mode with replay_trace set).
bool active();
// A stage marker (ranklensMarkStage) at host time `timeNs` (monotonic): a "step" starts the count of each op and
// size's calls in the step, which the estimator's same-place rule matches against the history
// (HistorySample::stepOccurrence), and the clock of their phase in it (over the previous step's length).
void noteStage(const char* name, int64_t timeNs);
// Matches a new communicator to a recorded one (at creation). ncclInvalidUsage when it cannot be matched and
// on_mismatch is error (the WARN says why and what to change).
ncclResult_t onCommCreated(ncclComm* comm);
// The recorded child of a ncclCommSplit: its size, rank and members come from the recording when the replayed parent
// is matched. False when the recording has no such child (the split table in the config decides then).
bool recordedSplitChild(const ncclComm* parent, int color, int key, int* nranks, int* rank,
                        std::vector<int>* worldRanks);
// Matches one call (its event already sequenced) and decides its hold and payload, stored in `info`.
ncclResult_t planCall(CallInfo* info, const ranklens::events::Call& event);
// Value fidelity: copies the recorded payload into the receive buffer. False when there is none to restore (the
// caller applies the fill semantics).
bool restorePayload(const CallInfo& info, ncclResult_t* result);
// Marks the stream's arrival at the call (each stream's first call in a group), before its effects: the hold then
// ends the recorded duration after the mark, so the receive buffer's copy or fill runs within the duration rather
// than before it. No mark (0) where nothing is held.
ncclResult_t markArrival(CallInfo* info);
ncclResult_t markArrivals(std::vector<CallInfo>* calls);
// Holds the call's stream for its planned duration (outside a group), or each stream of a group for the group's
// recorded duration on that stream.
ncclResult_t holdCall(const CallInfo& info);
ncclResult_t holdGroup(const std::vector<CallInfo>& calls);
// Ends a call or group that marked: enqueues what its marks left deferred on the device (StreamDevice::settle),
// after an error too, so that nothing is carried into the next call. Returns `ret`, or the settle's error.
ncclResult_t settle(ncclResult_t ret);
// host_time: replay. Keeps the calling thread until `startNs` + the recorded call's (or group's) host time.
void holdHost(int64_t startNs, const CallInfo& info);
void holdHostGroup(int64_t startNs, const std::vector<CallInfo>& calls);
// ncclGroupSimulateEnd in a replay: the estimator's duration of the call in microseconds (the session's history,
// else the replayed recording's own timed calls). False without a replay session.
bool simulatedMicroseconds(const CallInfo& info, float* us);
// Counters into the trace's manifest and a summary line; runs before the trace is closed at exit.
void finish();

}  // namespace replay
}  // namespace nccl_fake

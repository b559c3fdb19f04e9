// SPDX-License-Identifier: Apache-2.0
// The call pipeline every collective and point-to-point call takes, in record and in replay alike:
//   wrapper (collectives.cc: one per API function, builds the CallInfo)
//   -> submitCall: record or replay backend
//   -> argument check (replay: NCCL's checks here; record: the real NCCL's own)
//   -> sequencing (CommState::sequence) -> Call event (callEvent) -> backend:
//      replay: plan against the recording (replay.h), effects now or at the outermost ncclGroupEnd, holds;
//      record: the real NCCL, then the observers (GPU timing, payload capture) in record_call.cc.
// Group state is one thread-local GroupState for both, as in NCCL: calls inside ncclGroupStart/End are checked and
// sequenced when made, and take effect at the outermost ncclGroupEnd.
#pragma once

#include <cstddef>
#include <vector>

#include "nccl_fake/comm.h"
#include "ranklens/events.h"

namespace ranklens::trace {
struct RecordedCall;
}

namespace nccl_fake {

struct CallInfo {
  ranklens::events::Op op;
  const char* opName;  // NCCL's spelling in messages: "AllReduce", "Send", ...
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t redop;  // ncclSum for ops without a reduction (unused)
  int root;           // root, peer for Send/Recv, -1 when not applicable
  ncclComm* comm;
  cudaStream_t stream;
  ranklens::device::Scalar premulScalar{};  // redop is a user (PreMulSum) operator: its scalar, taken at the call
  int api = -1;  // the exported function (real::ApiId): record forwards exactly this one (ncclBcast stays ncclBcast)
  const void* selfSendbuff = nullptr;  // Recv from self: the matching Send's buffer (paired at ncclGroupEnd)
  // Replay of a recording (replay.h): the matched recorded call and the planned hold.
  const ranklens::trace::RecordedCall* recorded = nullptr;
  uint64_t seq = 0;
  int64_t durationNs = -1;  // recorded or estimated duration of the call, -1 none
  bool estimated = false;
  int stepOccurrence = -1;  // which call of its op and size in the current step (replay; -1 outside marked steps)
  double stepPhase = -1;    // where in the step it was made, over the previous step's length (replay; -1 unknown)
  uint64_t arrival = 0;     // mark of the stream's arrival at the call, before its effects (replay::markArrival)
  bool captured = false;    // its stream is capturing a CUDA graph (replay, asked once by planCall)
  // What replay::restorePayload copied into the receive buffer, and from where (its hold subtracts the copy's
  // calibrated cost when it counts from its own start). Set while the call's effects are applied.
  mutable uint64_t restoredBytes = 0;
  mutable bool restoredFromDevice = false;
};

// NCCL pairs a Send to self with a Recv from self in the same group, in call order; an unpaired one fails the group.
// Used at the outermost ncclGroupEnd (outside a group, enqueueCheck refuses a self P2P call directly).
ncclResult_t pairSelfP2p(std::vector<CallInfo>* calls);

size_t datatypeSize(ncclDataType_t datatype);  // 0 for invalid types

// The Call event of a call numbered `seq` on `comm` (the one builder record and replay share); timeNs is now.
// `comm` is the shared state: in record mode info.comm is the real NCCL's handle and is not read.
ranklens::events::Call callEvent(const CommState& comm, const CallInfo& info, uint64_t seq, uint64_t groupId);

// Every collective and P2P wrapper ends here: record mode's backend (record::recordCall) or replay's enqueueCheck.
ncclResult_t submitCall(CallInfo info);

// Replay's backend: validates, sequences, records the event and applies (or, inside a group, defers) the effects.
ncclResult_t enqueueCheck(CallInfo info);

// The calling thread's group (group.cc), shared by record and replay. Record changes depth only when the real
// NCCL accepted ncclGroupStart/End; replay answers them itself.
struct GroupState {
  int depth = 0;
  uint64_t id = 0;                   // GroupBegin's id while depth > 0
  uint32_t calls = 0;                // calls recorded in it (GroupEnd's count)
  ncclResult_t error = ncclSuccess;  // replay: the last failed call's code, which the group end returns
  std::vector<CallInfo> pending;     // replay: effects deferred to the outermost end
};
GroupState& groupState();
inline int groupDepth() { return groupState().depth; }
inline uint64_t currentGroupId() { return groupState().depth > 0 ? groupState().id : 0; }
void groupAppend(const CallInfo& info);  // replay: defer effects to the outermost ncclGroupEnd
void groupRecordError(ncclResult_t result);

// Effects of one call on its receive buffer according to the configured fill semantics (effects.cc).
ncclResult_t applyEffects(const CallInfo& info);

// ncclGroupSimulateEnd's estimate (microseconds): the replay's estimator, or without a replayed recording a fixed
// latency/bandwidth model.
float estimateMicroseconds(const CallInfo& info);

}  // namespace nccl_fake

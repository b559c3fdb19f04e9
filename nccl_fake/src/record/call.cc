// SPDX-License-Identifier: Apache-2.0
// Record mode's backend for one collective or P2P call (enqueue.h's pipeline): the real NCCL checks the arguments;
// RankLens sequences the call, builds its Call event with the builder replay uses, forwards it, and commits the
// sequence only if the real NCCL accepted it. Then the observers: the call's GPU duration (CUDA events around it,
// or NCCL's own kernel timestamps through the kernel clock) and, per policy.cc, a copy of what it received. Inside
// a group, each stream's calls are timed as one span from the first call to the outermost ncclGroupEnd.
#include <algorithm>

#include "record_state.h"

namespace nccl_fake {
namespace record {

using ranklens::events::Op;
using ranklens::timing::CallRecorder;
using ranklens::timing::KernelClock;
using ranklens::timing::PayloadRequest;
using ranklens::trace::RecordType;
using real::ApiId;

namespace {

// One stream's share of the current group: timed as a unit from the first call to the group's end, by the kernel
// clock while every call on it can be (kspan), else by events (span).
struct StreamSpan {
  cudaStream_t stream = nullptr;
  ranklens::trace::Timing identity;  // of its first call
  CallRecorder::Span* span = nullptr;
  KernelClock::Span* kspan = nullptr;
  std::shared_ptr<RecComm> comm;  // of the first call (non-blocking groups finish when it reports success)
  std::vector<PayloadRequest> payloads;
};

// The spans of the calling thread's group (groupState() holds its depth, id and call count).
std::vector<StreamSpan>& groupSpans() {
  static thread_local std::vector<StreamSpan> spans;
  return spans;
}

// The exported function the program called, with its own arguments: ncclBcast stays ncclBcast.
ncclResult_t forwardToReal(const CallInfo& c) {
  switch (static_cast<ApiId>(c.api)) {
    case ApiId::ncclAllReduce:
      return REAL(ncclAllReduce)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.redop, c.comm, c.stream);
    case ApiId::ncclBroadcast:
      return REAL(ncclBroadcast)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    case ApiId::ncclBcast:
      return REAL(ncclBcast)(c.recvbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    case ApiId::ncclReduce:
      return REAL(ncclReduce)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.redop, c.root, c.comm, c.stream);
    case ApiId::ncclAllGather:
      return REAL(ncclAllGather)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.comm, c.stream);
    case ApiId::ncclReduceScatter:
      return REAL(ncclReduceScatter)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.redop, c.comm, c.stream);
    case ApiId::ncclAlltoAll:
      return REAL(ncclAlltoAll)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.comm, c.stream);
    case ApiId::ncclGather:
      return REAL(ncclGather)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    case ApiId::ncclScatter:
      return REAL(ncclScatter)(c.sendbuff, c.recvbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    case ApiId::ncclSend:
      return REAL(ncclSend)(c.sendbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    case ApiId::ncclRecv:
      return REAL(ncclRecv)(c.recvbuff, c.count, c.datatype, c.root, c.comm, c.stream);
    default:
      break;
  }
  WARN("record: internal error: call %s submitted without its API function", c.opName);
  return ncclInternalError;
}

// How one call is observed: the kernel clock times a call NCCL runs as one task of its own kernel on a blocking
// communicator of several ranks; every other call is bracketed by CUDA events. A payload the kernel clock's call
// stores goes through a span of the call recorder that times nothing (beginPayloads).
struct Observation {
  ranklens::trace::Timing identity;
  bool wantsPayload = false;
  KernelClock* clock = nullptr;
  bool kernelTimed = false;
  KernelClock::Task task;
};

Observation observe(const RecComm& comm, const CallInfo& a, const ranklens::events::Call& event) {
  Observation o;
  o.identity = ranklens::trace::timingOf(event);
  o.wantsPayload = wantPayload(comm, a.op, event.seq, event.bytes);
  o.clock = state().kernelClock.get();
  const char* func = o.clock != nullptr ? ranklens::timing::kernelClockFunc(event.op) : nullptr;
  o.kernelTimed = func != nullptr && comm.blocking && event.nranks > 1 && a.count > 0;
  if (o.kernelTimed) {
    const bool p2p = ranklens::events::isP2p(a.op);
    o.task.func = func;
    o.task.bytes = a.count * ranklens::events::datatypeBytes(a.datatype);
    o.task.root = p2p || a.op == Op::kBroadcast || a.op == Op::kReduce ? a.root : -1;
    o.task.buffer = a.op == Op::kSend ? a.sendbuff : a.recvbuff;
  }
  return o;
}

PayloadRequest payloadRequest(const RecComm& comm, const CallInfo& a, const ranklens::events::Call& event,
                              const Observation& o) {
  PayloadRequest request;
  request.ref.commId = event.commId;
  request.ref.seq = event.seq;
  request.ref.op = event.op;
  request.ref.datatype = event.datatype;
  request.ref.count = event.bytes / std::max<size_t>(ranklens::events::datatypeBytes(a.datatype), 1);
  request.ref.peer = o.identity.peer;
  request.src = a.recvbuff;
  request.bytes = event.bytes;
  request.oneRank = comm.nRanks == 1;
  return request;
}

// Finishes a span now, or when its non-blocking communicator reports success.
void finish(CallRecorder* rec, ncclResult_t result, const std::shared_ptr<RecComm>& comm, CallRecorder::Span* span,
            std::vector<PayloadRequest> payloads) {
  if (span == nullptr) {
    if (!payloads.empty()) rec->countCapturedPayloads(payloads.size());
    return;
  }
  if (result == ncclInProgress && comm) {
    std::lock_guard<std::mutex> lock(comm->mu);
    // Its kernels are enqueued once the communicator reports success.
    comm->whenComplete.push_back([rec, span, payloads = std::move(payloads)] { rec->end(span, payloads); });
    return;
  }
  rec->end(span, payloads);
}

// Outside a group the call is launched now: its spans open before the real call.
struct CallSpans {
  CallRecorder::Span* span = nullptr;
  KernelClock::Span* kspan = nullptr;
};

CallSpans openCallSpans(CallRecorder* rec, const RecComm& comm, const CallInfo& a, const Observation& o, int rank) {
  CallSpans s;
  if (!o.kernelTimed) {
    s.span = rec->begin(comm.cudaDev, a.stream, o.identity);
  } else if (!rec->reportCaptured(a.stream, o.identity)) {
    s.kspan = o.clock->open(o.identity);
    o.clock->expect(s.kspan, comm.id, rank, o.task);
    if (o.wantsPayload) s.span = rec->beginPayloads(comm.cudaDev, a.stream, o.identity);
    o.clock->beginLaunch();
  }
  return s;
}

// Inside a group the launch happens at the outermost ncclGroupEnd: the call joins its stream's span.
void joinGroupSpan(CallRecorder* rec, const std::shared_ptr<RecComm>& comm, const CallInfo& a, const Observation& o,
                   int rank, std::vector<PayloadRequest> payloads) {
  std::vector<StreamSpan>& spans = groupSpans();
  auto it = std::find_if(spans.begin(), spans.end(), [&](const StreamSpan& s) { return s.stream == a.stream; });
  if (it == spans.end()) {
    StreamSpan s;
    s.stream = a.stream;
    s.comm = comm;
    s.identity = o.identity;
    if (!o.kernelTimed)
      s.span = rec->begin(comm->cudaDev, a.stream, o.identity);
    else if (!rec->reportCaptured(a.stream, o.identity))
      s.kspan = o.clock->open(o.identity);
    spans.push_back(std::move(s));
    it = std::prev(spans.end());
  } else if (it->kspan != nullptr && !o.kernelTimed) {
    // A call the kernel clock cannot time joined this stream: its whole share of the group moves to events (no GPU
    // work of the group is enqueued before its end, so the start event still precedes all of it), which also carry
    // its payloads.
    o.clock->cancel(it->kspan);
    it->kspan = nullptr;
    rec->abandon(it->span);
    it->span = rec->begin(comm->cudaDev, a.stream, it->identity);
  }
  if (it->kspan != nullptr) o.clock->expect(it->kspan, comm->id, rank, o.task);
  if (it->kspan != nullptr && it->span == nullptr && !payloads.empty())
    it->span = rec->beginPayloads(comm->cudaDev, a.stream, it->identity);
  for (auto& p : payloads) it->payloads.push_back(p);
}

// A call on a communicator RankLens did not see created (or already destroyed): forwarded unrecorded, and the
// real NCCL judges the handle.
ncclResult_t forwardUnknownComm(const CallInfo& info) {
  static std::once_flag warned;
  std::call_once(warned, [&] {
    INFO(kSubColl | kSubRanklens,
         "record: a call on communicator %p, which RankLens did not see created, is "
         "forwarded without being recorded",
         static_cast<void*>(info.comm));
  });
  return forwardToReal(info);
}

}  // namespace

ncclResult_t recordCall(const CallInfo& info) {
  // A call from inside the real library (its own exported API, resolved through the global scope): not the job's.
  if (real::insideRealCall()) return forwardToReal(info);
  GroupState& g = groupState();
  std::shared_ptr<RecComm> comm = findComm(info.comm);
  if (!comm) return forwardUnknownComm(info);
  CallRecorder* rec = recorder();

  // Sequencing: the number is read now and committed only if the real NCCL accepts the call (seqMu held across it).
  std::unique_lock<std::mutex> issue(comm->seqMu);
  ranklens::events::Call event;
  {
    std::lock_guard<std::mutex> lock(comm->mu);  // size and rank are set when announced
    announceLocked(*comm);
    event = callEvent(*comm, info, comm->sequence(info.op, info.root), g.depth > 0 ? g.id : 0);
  }
  const Observation o = observe(*comm, info, event);
  const CallSpans spans = g.depth == 0 ? openCallSpans(rec, *comm, info, o, event.rank) : CallSpans{};

  const ncclResult_t result = forwardToReal(info);
  if (spans.kspan != nullptr) o.clock->endLaunch(accepted(result));
  if (!accepted(result)) {
    rec->abandon(spans.span);
    return result;
  }
  event.hostNs = monotonicNs() - event.timeNs;
  comm->sequence(info.op, info.root)++;
  issue.unlock();
  Runtime::get().emit(RecordType::kCall, event);

  std::vector<PayloadRequest> payloads;
  if (o.wantsPayload) payloads.push_back(payloadRequest(*comm, info, event, o));
  if (g.depth == 0) {
    finish(rec, result, comm->blocking ? nullptr : comm, spans.span, std::move(payloads));
    return result;
  }
  g.calls++;
  joinGroupSpan(rec, comm, info, o, event.rank, std::move(payloads));
  return result;
}

void closeGroup(ncclResult_t result, bool launched, int64_t hostNs) {
  GroupState& g = groupState();
  CallRecorder* rec = state().recorder.get();
  for (StreamSpan& s : groupSpans()) {
    if (rec == nullptr) break;
    if (launched && accepted(result)) {
      finish(rec, result, s.comm && !s.comm->blocking ? s.comm : nullptr, s.span, std::move(s.payloads));
    } else {
      rec->abandon(s.span);
    }
  }
  Runtime::get().endGroup(g.id, g.calls, result, hostNs);
  groupSpans().clear();
  g.calls = 0;
  g.id = 0;
}

}  // namespace record
}  // namespace nccl_fake

// SPDX-License-Identifier: Apache-2.0
// Record mode's entry points. Every exported NCCL function forwards to the real NCCL with identical semantics (same
// arguments, same handles, same results); forwarding is one indirect call. Collectives and P2P go through the shared
// wrappers (collectives.cc) to call.cc; communicator lifecycle and groups are written out below; every other
// function is a generated forwarder.
#include "record_state.h"

namespace nccl_fake {
namespace record {

using ranklens::timing::KernelClock;
using ranklens::trace::RecordType;
using real::ApiId;

namespace {

constexpr const char* kApiNames[] = {
#define NCCL_FAKE_API(ret, name, params, args, prof) #name,
#include "nccl_api.def"
#undef NCCL_FAKE_API
};

}  // namespace

void warnUnavailable(ApiId id, const real::Library& lib) {
  const char* name = kApiNames[static_cast<int>(id)];
  if (!lib.ok) {
    static std::once_flag warned;
    std::call_once(warned, [&] { WARN("%s", lib.error.c_str()); });
    WARN("%s : %s", name, lib.error.c_str());
  } else {
    WARN(
        "%s : not exported by the real NCCL %s (version %d), which this job loads; use an NCCL that has it "
        "(RankLens implements the 2.28.9 API)",
        name, lib.path.c_str(), lib.version);
  }
}

bool active() {
  static const bool on = [] {
    const bool record = Runtime::get().recordMode();
    if (record) {
      installWriterSetup();
      installKernelClock();
    }
    return record;
  }();
  return on;
}

void noteStage(int64_t step) { state().step.store(step, std::memory_order_relaxed); }

namespace capture {
#define NCCL_FAKE_API(ret, name, params, args, prof) ret name params;
#include "nccl_api.def"
#undef NCCL_FAKE_API

namespace {
// A recording whose trace cannot be written would be lost whole: a communicator is refused instead, before the real
// NCCL creates it, with the reason in ncclGetLastError. (`ranklens record` checks its directory before starting.)
ranklens::Status refuseWithoutTrace(int rankHint) {
  recorder();  // first: its device describes the GPU in the manifest written when the trace opens
  if (Runtime::get().traceWritable(rankHint)) return ranklens::Status::ok();
  return ranklens::Status::invalidUsage(std::string("record: ") + lastErrorText() +
                                        "; no communicator is created, so that the job does not run unrecorded: "
                                        "point RANKLENS_TRACE_DIR (trace_dir) at a new directory");
}
}  // namespace

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  NCCLCHECK(toNcclResult(refuseWithoutTrace(rank)));
  ncclResult_t ret = REAL(ncclCommInitRank)(comm, nranks, commId, rank);
  if (accepted(ret) && comm) registerComm(*comm, nranks, rank, currentDevice(), {"init"}, nullptr, ret);
  return ret;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  NCCLCHECK(toNcclResult(refuseWithoutTrace(rank)));
  ncclResult_t ret = REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
  if (accepted(ret) && comm) registerComm(*comm, nranks, rank, currentDevice(), {"init"}, config, ret);
  return ret;
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  NCCLCHECK(toNcclResult(refuseWithoutTrace(myrank)));
  ncclResult_t ret = REAL(ncclCommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config);
  if (accepted(ret) && newcomm) registerComm(*newcomm, nranks, myrank, currentDevice(), {"initScalable"}, config, ret);
  return ret;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  NCCLCHECK(toNcclResult(refuseWithoutTrace(0)));
  ncclResult_t ret = REAL(ncclCommInitAll)(comms, ndev, devlist);
  if (accepted(ret) && comms)
    for (int i = 0; i < ndev; ++i) registerComm(comms[i], ndev, i, devlist ? devlist[i] : i, {"initAll"}, nullptr, ret);
  return ret;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t ret = REAL(ncclCommSplit)(comm, color, key, newcomm, config);
  if (accepted(ret) && newcomm && *newcomm) {
    auto parent = findComm(comm);
    registerComm(*newcomm, -1, -1, parent ? parent->cudaDev : currentDevice(), {"split", parent.get(), color, key},
                 config, ret);
  }
  return ret;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  ncclResult_t ret = REAL(ncclCommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  if (accepted(ret) && newcomm && *newcomm) {
    auto parent = findComm(comm);
    registerComm(*newcomm, -1, -1, parent ? parent->cudaDev : currentDevice(), {"shrink", parent.get()}, config, ret);
  }
  return ret;
}

namespace {
// Destroy, abort, finalize, revoke: durations still in flight are collected first (the GPU work is still valid).
template <typename RealEnd>
ncclResult_t endComm(ncclComm_t comm, const char* how, bool forget, RealEnd&& realEnd) {
  auto rc = findComm(comm);
  if (rc) flush();
  ncclResult_t ret = realEnd();
  if (rc && accepted(ret)) {
    ranklens::events::CommEnd event;
    event.commId = rc->id;
    event.how = how;
    event.timeNs = monotonicNs();
    Runtime::get().emit(RecordType::kCommEnd, event);
    if (forget) forgetComm(comm);  // the handle may be reused by a later communicator
  }
  return ret;
}
}  // namespace

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return endComm(comm, "finalize", false, [&] { return REAL(ncclCommFinalize)(comm); });
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return endComm(comm, "destroy", true, [&] { return REAL(ncclCommDestroy)(comm); });
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return endComm(comm, "abort", true, [&] { return REAL(ncclCommAbort)(comm); });
}
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return endComm(comm, "revoke", false, [&] { return REAL(ncclCommRevoke)(comm, revokeFlags); });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  ncclResult_t ret = REAL(ncclCommGetAsyncError)(comm, asyncError);
  if (ret == ncclSuccess && asyncError && *asyncError == ncclSuccess)
    if (auto rc = findComm(comm); rc && !rc->blocking) completed(rc);
  return ret;
}

// Groups: the shared GroupState (enqueue.h) changes only when the real NCCL accepted the start or end.
ncclResult_t ncclGroupStart() {
  ncclResult_t ret = REAL(ncclGroupStart)();
  if (ret != ncclSuccess) return ret;
  GroupState& g = groupState();
  if (g.depth++ == 0) g.id = Runtime::get().beginGroup();
  return ret;
}

ncclResult_t ncclGroupEnd() {
  const int64_t start = monotonicNs();
  GroupState& g = groupState();
  // The outermost end launches.
  KernelClock* clock = g.depth == 1 ? state().kernelClock.get() : nullptr;
  if (clock != nullptr) clock->beginLaunch();
  ncclResult_t ret = REAL(ncclGroupEnd)();
  if (clock != nullptr) clock->endLaunch(accepted(ret));
  if (g.depth > 0 && --g.depth == 0) closeGroup(ret, true, monotonicNs() - start);
  return ret;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const int64_t start = monotonicNs();
  ncclResult_t ret = REAL(ncclGroupSimulateEnd)(simInfo);
  GroupState& g = groupState();
  if (g.depth == 1)
    if (KernelClock* clock = state().kernelClock.get()) clock->endLaunch(false);  // nothing was launched
  if (g.depth > 0 && --g.depth == 0) closeGroup(ret, false, monotonicNs() - start);
  return ret;
}

const char* ncclGetLastError(ncclComm_t comm) {
  // RankLens's own failures (no real NCCL, a missing function) are reported in RankLens's log; otherwise NCCL's.
  const real::Library& lib = library();
  if (!lib.ok || lib.functions[static_cast<int>(ApiId::ncclGetLastError)] == nullptr)
    return impl::ncclGetLastError(comm);
  const char* text = REAL(ncclGetLastError)(comm);
  return text != nullptr && *text != '\0' ? text : impl::ncclGetLastError(comm);
}

const char* ncclGetErrorString(ncclResult_t result) {
  const real::Library& lib = library();
  if (!lib.ok || lib.functions[static_cast<int>(ApiId::ncclGetErrorString)] == nullptr)
    return impl::ncclGetErrorString(result);
  return REAL(ncclGetErrorString)(result);
}
}  // namespace capture

// The exported functions' record-mode bodies: lifecycle and group functions go to capture::, the rest straight to
// the real NCCL. (Collectives and P2P never come here: exports.cc sends them to their one shared wrapper, which
// submits to call.cc; their bodies below only keep record:: complete.) A call made from inside the real library
// (its own exported API, resolved through the global scope) is forwarded uncaptured.
#define NCCL_FAKE_API(ret, name, params, args, prof)            \
  ret name params {                                             \
    if constexpr (pipelined(ApiId::name)) {                     \
      return impl::name args;                                   \
    } else {                                                    \
      if constexpr (captured(ApiId::name)) {                    \
        if (!real::insideRealCall()) return capture::name args; \
      }                                                         \
      return callReal<ApiId::name, ret(*) params> args;         \
    }                                                           \
  }
#include "nccl_api.def"
#undef NCCL_FAKE_API

}  // namespace record
}  // namespace nccl_fake

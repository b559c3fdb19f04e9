// SPDX-License-Identifier: Apache-2.0
// Record mode's process state, shared by its parts (internal to nccl_fake/src/record/):
//   record.cc    entry points: communicator lifecycle, groups, the generated forwarders
//   comms.cc     the registry: real NCCL handle -> CommState (identity, sequences), CommInit records
//   call.cc      one call: sequence, Call event, the real call, then timing and payload capture (the observers)
//   policy.cc    which calls' payloads to capture (payload_* settings)
//   recorder.cc  the recorder's setup (device, staging, kernel clock, writer options), flush and counters
// The handles the job sees are the real NCCL's own (nothing is wrapped): record mode maps each real handle to its
// CommState, so that device-API, window, async-error, split/shrink and abort calls reach the real NCCL untouched.
// May call: real_nccl.h, Runtime, timing's CallRecorder/KernelClock/RecordDevice, the shared pipeline (enqueue.h).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nccl_fake/comm.h"
#include "nccl_fake/enqueue.h"
#include "nccl_fake/real_nccl.h"
#include "nccl_fake/record.h"
#include "nccl_fake/runtime.h"
#include "ranklens/call_recorder.h"
#include "ranklens/kernel_clock.h"
#include "ranklens/record_device.h"

namespace nccl_fake {
namespace record {

const real::Library& library();

// What a function returns when the real NCCL (or this function in it) is unavailable: NCCL's error code for
// ncclResult_t functions, a neutral value otherwise. The reason goes to the log and ncclGetLastError.
void warnUnavailable(real::ApiId id, const real::Library& lib);
template <typename R>
R unavailable(real::ApiId id, const real::Library& lib) {
  warnUnavailable(id, lib);
  if constexpr (std::is_same_v<R, ncclResult_t>)
    return lib.ok ? ncclInvalidUsage : ncclSystemError;
  else if constexpr (std::is_same_v<R, const char*>)
    return "real NCCL unavailable (see the log)";
  else if constexpr (!std::is_void_v<R>)
    return R{};
}

// Calls the real function, marking this thread as inside the real library (its own calls back into exported
// names come through RankLens uncaptured).
template <real::ApiId id, typename Fn, typename... A>
auto callReal(A... args) -> decltype(std::declval<Fn>()(args...)) {
  using R = decltype(std::declval<Fn>()(args...));
  const real::Library& lib = library();
  auto fn = reinterpret_cast<Fn>(lib.functions[static_cast<int>(id)]);
  if (!lib.ok || fn == nullptr) return unavailable<R>(id, lib);
  real::RealCallScope scope;
  return fn(args...);
}
#define REAL(name) callReal<real::ApiId::name, decltype(&::name)>

inline bool accepted(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// A communicator the real NCCL created: the shared state plus what record mode needs until it is announced.
struct RecComm : CommState {
  ncclComm_t handle = nullptr;  // the real NCCL's
  std::mutex mu;                // guards everything below
  bool announced = false;
  std::vector<std::function<void()>> whenComplete;  // non-blocking: finish once the communicator reports success
};

struct State {
  std::once_flag recorderOnce;
  std::unique_ptr<ranklens::device::RecordDevice> device;
  std::unique_ptr<ranklens::timing::CallRecorder> recorder;
  // timing_clock: kernel, once NCCL_PROFILER_PLUGIN points here
  std::unique_ptr<ranklens::timing::KernelClock> kernelClock;
  std::shared_mutex commsMu;
  std::unordered_map<ncclComm_t, std::shared_ptr<RecComm>> comms;
  std::atomic<int64_t> step{-1};
  uint32_t opMask = 0;  // payload_ops as a bit set (0: all)
};
State& state();

// ---- recorder.cc
// Created with the first communicator: by then the job has chosen its GPU, and a delay is harmless.
ranklens::timing::CallRecorder* recorder();
int localRanks();
void installWriterSetup();
void installKernelClock();

// ---- comms.cc
std::shared_ptr<RecComm> findComm(ncclComm_t handle);
void forgetComm(ncclComm_t handle);
// Writes the CommInit record once the communicator's size and rank are known. Caller holds comm.mu.
void announceLocked(RecComm& comm);
// Registers a communicator the real NCCL accepted. `nranks` < 0: ask the real NCCL once it is ready.
struct Lineage {
  const char* how;
  const RecComm* parent = nullptr;
  int64_t color = -1, key = -1;
};
void registerComm(ncclComm_t handle, int nranks, int rank, int cudaDev, const Lineage& lineage,
                  const ncclConfig_t* config, ncclResult_t result);
int currentDevice();
// The real NCCL reported a non-blocking communicator ready: announce it and finish its deferred calls.
void completed(const std::shared_ptr<RecComm>& comm);

// ---- policy.cc
// Builds the policy's lookup tables from the settings (once, with the recorder).
void preparePolicy();
// The call's received data is to be stored (payloads, payload_max_bytes/ops/comms/steps/seqs).
bool wantPayload(const RecComm& comm, ranklens::events::Op op, uint64_t seq, uint64_t bytes);

// ---- call.cc
// The outermost group end (or simulation) returned `result`: finish or drop every stream's span.
void closeGroup(ncclResult_t result, bool launched, int64_t hostNs);

}  // namespace record
}  // namespace nccl_fake

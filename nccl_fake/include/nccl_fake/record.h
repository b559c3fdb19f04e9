// SPDX-License-Identifier: Apache-2.0
// Record mode: every exported NCCL function forwards to the real NCCL with identical semantics (same arguments,
// same handles, same results); the calls that make communication are also captured into the trace: communicator
// lifecycle with split lineage, every call's event, group boundaries, each call's GPU duration and, per policy,
// what it received.
#pragma once

#include <cstdint>

#include "nccl_fake/core.h"
#include "nccl_fake/enqueue.h"
#include "nccl_fake/real_nccl.h"

namespace nccl_fake {
namespace record {

// X-macro lists keep their own layout: clang-format 14 does not settle on one.
// clang-format off
// The functions with lifecycle or group code in record.cc (capture::).
#define RANKLENS_CAPTURED(X)                                                                                        \
  X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable) X(ncclCommInitAll) X(ncclCommSplit)     \
  X(ncclCommShrink) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommRevoke)                       \
  X(ncclCommGetAsyncError) X(ncclGroupStart) X(ncclGroupEnd) X(ncclGroupSimulateEnd) X(ncclGetLastError)            \
  X(ncclGetErrorString)
// The collectives and P2P calls: one wrapper each in collectives.cc, shared with replay (enqueue.h).
#define RANKLENS_PIPELINED(X)                                                                                       \
  X(ncclAllReduce) X(ncclBroadcast) X(ncclBcast) X(ncclReduce) X(ncclAllGather) X(ncclReduceScatter)                \
  X(ncclAlltoAll) X(ncclGather) X(ncclScatter) X(ncclSend) X(ncclRecv)
// clang-format on

constexpr bool captured(real::ApiId id) {
  switch (id) {
#define RANKLENS_CASE(name) case real::ApiId::name:
    RANKLENS_CAPTURED(RANKLENS_CASE)
    return true;
    default:
      return false;
  }
}

constexpr bool pipelined(real::ApiId id) {
  switch (id) {
    RANKLENS_PIPELINED(RANKLENS_CASE)
#undef RANKLENS_CASE
    return true;
    default:
      return false;
  }
}

// Record mode is configured (and the configuration is valid): the exported functions dispatch here.
bool active();

// One function per exported symbol, like impl:: (collectives and P2P go on to impl::'s shared wrappers).
#define NCCL_FAKE_API(ret, name, params, args, prof) ret name params;
#include "nccl_api.def"
#undef NCCL_FAKE_API

// The backend of one collective or P2P call (enqueue.h's pipeline, through submitCall): forwards it to the real
// NCCL, records it and observes it (GPU timing, payload capture).
ncclResult_t recordCall(const CallInfo& info);

// The adapter's stage markers: the step number filters payloads (payload_steps).
void noteStage(int64_t step);
// Waits (bounded) for durations still being measured on the GPU, then flushes the trace.
void flush();

}  // namespace record
}  // namespace nccl_fake

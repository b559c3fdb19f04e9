// SPDX-License-Identifier: Apache-2.0
// Record mode: every exported NCCL function forwards to the real NCCL with identical semantics (same arguments,
// same handles, same results); the calls that make communication are also captured into the trace: communicator
// lifecycle with split lineage, every call's event, group boundaries, each call's GPU duration and, per policy,
// what it received.
#pragma once

#include <cstdint>

#include "nccl_fake/core.h"
#include "nccl_fake/enqueue.h"

namespace nccl_fake {
namespace record {

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

// SPDX-License-Identifier: Apache-2.0
// Record mode: every exported NCCL function forwards to the real NCCL with identical semantics (same arguments,
// same handles, same results); the calls that make communication are also captured into the trace: communicator
// lifecycle with split lineage, every call's event, group boundaries, each call's GPU duration and, per policy,
// what it received.
#pragma once

#include <cstdint>

#include "nccl_fake/core.h"

namespace nccl_fake {
namespace record {

// Record mode is configured (and the configuration is valid): the exported functions dispatch here.
bool active();

// One function per exported symbol, like impl::.
#define NCCL_FAKE_API(ret, name, params, args, prof) ret name params;
#include "nccl_api.def"
#undef NCCL_FAKE_API

// The adapter's stage markers: the step number filters payloads (payload_steps).
void noteStage(int64_t step);
// Waits (bounded) for durations still being measured on the GPU, then flushes the trace.
void flush();

}  // namespace record
}  // namespace nccl_fake

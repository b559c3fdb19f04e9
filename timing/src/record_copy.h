// SPDX-License-Identifier: Apache-2.0
// The record device's payload copy kernel (record_copy.cu), for copies small enough that a copy engine's latency,
// not bandwidth, is their cost.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace ranklens {
namespace device {

// Copies from device memory to mapped pinned host memory (its device address) on `stream`.
cudaError_t launchRecordCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream);
// Loads the kernel on the current device now: with lazy module loading its first launch could synchronise.
cudaError_t loadRecordCopy();

}  // namespace device
}  // namespace ranklens

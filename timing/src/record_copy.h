// SPDX-License-Identifier: Apache-2.0
// The record device's payload copy kernel (record_copy.cu), for copies small enough that a copy engine's latency,
// not bandwidth, is their cost.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace ranklens {
namespace device {

// Copies from device memory to mapped pinned host memory (device addresses of both) on `stream`, one block, then
// writes `token` to `done` once every byte is visible to the host. The runtime's launch: no launch priority (the
// record device launches through the driver where it can).
cudaError_t launchRecordCopy(void* dst, const void* src, size_t bytes, uint64_t* done, uint64_t token,
                             cudaStream_t stream, unsigned threads);
// Loads the kernel on the current device now (with lazy module loading its first launch could synchronise), and
// gives its handle there (a CUfunction), to launch it through the driver.
cudaError_t loadRecordCopy(cudaFunction_t* function);

}  // namespace device
}  // namespace ranklens

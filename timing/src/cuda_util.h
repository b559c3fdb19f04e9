// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CUDA implementations of the stream device (replay) and the record device.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ranklens {
namespace device {

// Name and UUID (nvidia-smi's "GPU-xxxxxxxx-..." form) of the current CUDA device; unchanged on failure.
void describeCurrentCudaDevice(std::string* name, std::string* uuid);
// Whether `stream` is being captured into a CUDA graph, through the runtime; a failed query counts as capturing (then
// nothing may be enqueued on it that a capture would not allow).
bool streamCapturing(cudaStream_t stream);

}  // namespace device
}  // namespace ranklens

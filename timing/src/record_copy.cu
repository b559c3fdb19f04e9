// SPDX-License-Identifier: Apache-2.0
// Record mode's copy of a small received buffer into mapped pinned memory by a kernel on the call's stream
// (cuda_record_device.cc): the GPU writes the bytes across the bus itself, so the job's stream waits only for a
// small kernel, not for a copy engine's round trip (a 4-byte D2H cudaMemcpyAsync stalled the stream about 10 us on
// H200, bench/results/record/record_gpu_overhead_payload_stream-*.jsonl).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "record_copy.h"

namespace {

// Grid-stride copy, 16 bytes at a time when both ends allow it. The fence makes the writes to host memory visible
// to the host by the time the event after this kernel completes.
extern "C" __global__ void ranklens_RecordPayload(unsigned char* dst, const unsigned char* src, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  size_t done = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vectors = bytes / 16;
    for (size_t i = first; i < vectors; i += stride)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = vectors * 16;
  }
  for (size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
  __threadfence_system();
}

}  // namespace

namespace ranklens {
namespace device {

cudaError_t launchRecordCopy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  constexpr unsigned kThreads = 256;
  const size_t units = std::max<size_t>(1, bytes / 16);
  const unsigned blocks = static_cast<unsigned>(std::min<size_t>(32, (units + kThreads - 1) / kThreads));
  ranklens_RecordPayload<<<blocks, kThreads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                          static_cast<const unsigned char*>(src), bytes);
  return cudaGetLastError();
}

cudaError_t loadRecordCopy() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, ranklens_RecordPayload);
}

}  // namespace device
}  // namespace ranklens

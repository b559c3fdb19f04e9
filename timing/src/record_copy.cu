// SPDX-License-Identifier: Apache-2.0
// Record mode's copy of a small received buffer into mapped pinned memory by a kernel on the call's stream
// (cuda_record_device.cc): the GPU writes the bytes across the bus itself, so the job's stream waits only for a
// small kernel, not for a copy engine's round trip (a 4-byte D2H cudaMemcpyAsync stalled the stream about 10 us on
// H200, measured with bench/record_host_overhead --gpu-bound).
#include <cuda_runtime.h>

#include <cstdint>

#include "record_copy.h"

namespace {

// One block: 16 bytes at a time when both ends allow it. Every thread's writes are fenced at system scope before
// the block's barrier; then one thread writes the token, which the host reads as "the bytes are in place" (no event
// needed after the copy: one CUDA call fewer on the job's thread, and about 1.2 us less GPU time on its stream).
extern "C" __global__ void ranklens_RecordPayload(unsigned char* dst, const unsigned char* src, size_t bytes,
                                                  volatile unsigned long long* done, unsigned long long token) {
  size_t copied = 0;
  if (((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0) {
    const size_t vectors = bytes / 16;
    for (size_t i = threadIdx.x; i < vectors; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    copied = vectors * 16;
  }
  for (size_t i = copied + threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) *done = token;
}

}  // namespace

namespace ranklens {
namespace device {

cudaError_t launchRecordCopy(void* dst, const void* src, size_t bytes, uint64_t* done, uint64_t token,
                             cudaStream_t stream, unsigned threads) {
  ranklens_RecordPayload<<<1, threads, 0, stream>>>(static_cast<unsigned char*>(dst),
                                                    static_cast<const unsigned char*>(src), bytes,
                                                    reinterpret_cast<volatile unsigned long long*>(done), token);
  return cudaGetLastError();
}

cudaError_t loadRecordCopy(cudaFunction_t* function) {
  cudaFuncAttributes attributes;
  if (cudaError_t err = cudaFuncGetAttributes(&attributes, ranklens_RecordPayload); err != cudaSuccess) return err;
  return cudaGetFuncBySymbol(function, reinterpret_cast<const void*>(ranklens_RecordPayload));
}

}  // namespace device
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// The job's compute for bench/record_host_overhead --contended: kernels whose blocks spin on the GPU's global timer,
// enough of them to fill every SM, as a GPU-bound step's matrix products do while a communication stream runs.
#include <cuda_runtime.h>

#include "busy_sms.h"

namespace {

extern "C" __global__ void ranklens_bench_Busy(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

}  // namespace

cudaError_t loadSpin() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, ranklens_bench_Busy);
}

cudaError_t launchSpin(cudaStream_t stream, unsigned long long ns, unsigned threads) {
  ranklens_bench_Busy<<<1, threads, 0, stream>>>(ns);
  return cudaGetLastError();
}

cudaError_t BusySms::init(Shape shape, unsigned long long blockNs, int waves) {
  blockNs_ = blockNs;
  int device = 0, sms = 0;
  if (cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  if (cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device); err != cudaSuccess)
    return err;
  if (shape == Shape::kThreads) {
    // Every thread slot of every SM (2 x 1024 on H200): nothing else fits until a block ends.
    threads_ = 1024;
    sharedBytes_ = 0;
  } else {
    // One block per SM held by its shared memory, as a large matrix-product tile is: threads and registers are left
    // over for a small kernel beside it.
    threads_ = 256;
    int optin = 0;
    if (cudaError_t err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
        err != cudaSuccess)
      return err;
    sharedBytes_ = static_cast<size_t>(optin);
    if (cudaError_t err = cudaFuncSetAttribute(ranklens_bench_Busy, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
        err != cudaSuccess)
      return err;
  }
  int perSm = 0;
  if (cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, ranklens_bench_Busy,
                                                                      static_cast<int>(threads_), sharedBytes_);
      err != cudaSuccess)
    return err;
  blocksPerSm_ = perSm;
  grid_ = static_cast<unsigned>(perSm * sms * waves);
  return cudaSuccess;
}

cudaError_t BusySms::launch(cudaStream_t stream) const {
  ranklens_bench_Busy<<<grid_, threads_, sharedBytes_, stream>>>(blockNs_);
  return cudaGetLastError();
}

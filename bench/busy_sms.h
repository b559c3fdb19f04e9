// SPDX-License-Identifier: Apache-2.0
// Kernels that keep every SM of the current device busy (busy_sms.cu): bench/record_host_overhead --contended.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

// One block spinning `ns` ns on `stream`: what a call of several ranks launches (NCCL's kernel), which a 1-rank call
// does not.
cudaError_t launchSpin(cudaStream_t stream, unsigned long long ns, unsigned threads);
// Loads the kernel now: with lazy module loading its first launch may synchronise the device, which deadlocks behind
// a stream held at a gate that the host opens only after that launch.
cudaError_t loadSpin();

class BusySms {
 public:
  enum class Shape {
    kThreads,  // every thread slot taken: nothing else fits on an SM until one of its blocks ends
    kShared,   // one block per SM held by its shared memory: room for a small kernel beside it
  };
  // Each kernel: `waves` rounds of blocks on every SM, each block spinning `blockNs` ns.
  cudaError_t init(Shape shape, unsigned long long blockNs, int waves);
  cudaError_t launch(cudaStream_t stream) const;
  int blocksPerSm() const { return blocksPerSm_; }

 private:
  unsigned long long blockNs_ = 0;
  unsigned threads_ = 0, grid_ = 0;
  size_t sharedBytes_ = 0;
  int blocksPerSm_ = 0;
};

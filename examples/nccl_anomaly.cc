// SPDX-License-Identifier: Apache-2.0
// nccl_anomaly: data-parallel SGD on a vector of parameters, written against plain NCCL, in which one rank may put
// NaNs into its gradient at one step. The NaNs reach every rank through the gradient all-reduce, as a bad batch or a
// flaky GPU would in a real job. It is RankLens's demo (scripts/demo.sh): the recorded job's rank 0 replayed alone,
// at value fidelity, gets its peer's NaNs from the recording and ends with parameters identical to the real ones.
//
// Each step, every rank computes its gradient on the host from its parameters, rank and step, all-reduces it (sum,
// in place, on the GPU, or in host memory under RankLens's host device when there is no GPU), and applies the mean
// on the host. So the local computation is the same on any machine, and what a rank's parameters become depends on
// its peers only through the all-reduce.
//
// Usage:  RANK=r WORLD_SIZE=n nccl_anomaly [--steps N] [--params P] [--nan-rank R] [--nan-step S] [--id-file PATH]
//   --steps N       SGD steps (default 8)
//   --params P      parameters per rank (default 4096)
//   --nan-rank R    the rank whose gradient gets NaNs (default -1: none)
//   --nan-step S    the step at which it does (default 4)
//   --id-file PATH  exchange the communicator's ncclUniqueId through PATH (under torchrun: a default from
//                   TORCHELASTIC_RUN_ID), as in nccl_minitrain
// Output: one line per step (`step s: k of P parameters non-finite`), then `RESULT {json}` with the rank, the first
// step after which a parameter was non-finite (-1: none), how many were then, and a digest of the final parameters,
// and the digest again as `RANKLENS_DIGEST params fnv1a64:<hex>`.
// Recording the shipped trace (examples/traces/anomaly-2ranks) on one GPU:
//   ranklens record --share-gpu --payloads all --trace T -- torchrun --standalone --nproc-per-node 2 --no-python
//       nccl_anomaly --nan-rank 1 --nan-step 4
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "nccl_example_util.h"

int main(int argc, char** argv) {
  using namespace nccl_example;
  const int worldSize = envInt("WORLD_SIZE", 1, 1, INT_MAX);
  const int rank = envInt("RANK", 0, 0, worldSize - 1);
  int steps = 8, params = 4096, nanRank = -1, nanStep = 4;
  std::string idFile = defaultIdFile("nccl_anomaly");
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      printf(
          "usage: RANK=r WORLD_SIZE=n nccl_anomaly [--steps N] [--params P] [--nan-rank R] [--nan-step S] "
          "[--id-file PATH]\n");
      return 0;
    }
    if (i + 1 >= argc) usageError("nccl_anomaly", arg + ": missing value, or an unknown argument");
    const char* value = argv[++i];
    if (arg == "--steps")
      steps = parseInt(value, 0, 1 << 20, "--steps " + std::string(value));
    else if (arg == "--params")
      params = parseInt(value, 1, 1 << 26, "--params " + std::string(value));
    else if (arg == "--nan-rank")
      nanRank = parseInt(value, -1, INT_MAX, "--nan-rank " + std::string(value));
    else if (arg == "--nan-step")
      nanStep = parseInt(value, 0, INT_MAX, "--nan-step " + std::string(value));
    else if (arg == "--id-file")
      idFile = value;
    else
      usageError("nccl_anomaly", "unknown argument '" + arg + "'");
  }

  const bool gpu = deviceCountOrZero() > 0;
  cudaStream_t stream = nullptr;
  if (gpu) {
    CUDA_CHECK(cudaSetDevice(envInt("LOCAL_RANK", 0, 0, INT_MAX) % deviceCountOrZero()));
    CUDA_CHECK(cudaStreamCreate(&stream));
  }
  ncclComm_t comm = initWorld(idFile, rank, worldSize);

  std::vector<float> w(params), grad(params);
  for (int i = 0; i < params; ++i) w[i] = 0.5f * std::sin(0.001f * static_cast<float>(i));  // the same on every rank
  const size_t bytes = static_cast<size_t>(params) * sizeof(float);
  void* buffer = nullptr;  // the all-reduce's buffer: device memory, or host memory for RankLens's host device
  if (gpu)
    CUDA_CHECK(cudaMalloc(&buffer, bytes));
  else
    buffer = malloc(bytes);

  using MarkStage = int (*)(const char*, int64_t);
  const auto markStage = reinterpret_cast<MarkStage>(dlsym(RTLD_DEFAULT, "ranklensMarkStage"));
  int firstNonFinite = -1, nonFiniteThen = 0;
  for (int step = 0; step < steps; ++step) {
    if (markStage != nullptr) markStage("step", step);
    for (int i = 0; i < params; ++i)
      grad[i] = 0.01f * std::sin(w[i] * static_cast<float>(rank + 1) + 0.1f * static_cast<float>(step));
    if (rank == nanRank && step == nanStep)
      for (int i = 7; i < params; i += 997) grad[i] = std::nanf("");  // a bad batch on this rank
    if (gpu)
      CUDA_CHECK(cudaMemcpy(buffer, grad.data(), bytes, cudaMemcpyHostToDevice));
    else
      memcpy(buffer, grad.data(), bytes);
    NCCL_CHECK(ncclAllReduce(buffer, buffer, params, ncclFloat32, ncclSum, comm, stream));
    if (gpu) {
      CUDA_CHECK(cudaStreamSynchronize(stream));
      CUDA_CHECK(cudaMemcpy(grad.data(), buffer, bytes, cudaMemcpyDeviceToHost));
    } else {
      memcpy(grad.data(), buffer, bytes);
    }
    int nonFinite = 0;
    for (int i = 0; i < params; ++i) {
      w[i] -= 0.1f * grad[i] / static_cast<float>(worldSize);
      nonFinite += !std::isfinite(w[i]);
    }
    if (nonFinite > 0 && firstNonFinite < 0) {
      firstNonFinite = step;
      nonFiniteThen = nonFinite;
    }
    printf("nccl_anomaly: rank %d step %d: %d of %d parameters non-finite\n", rank, step, nonFinite, params);
    fflush(stdout);
  }
  if (markStage != nullptr) markStage("step", steps);
  const unsigned long long digest = fnv1a64(w.data(), bytes);
  printf(
      "RESULT {\"rank\": %d, \"first_nonfinite_step\": %d, \"nonfinite\": %d, \"digest\": \"params "
      "fnv1a64:%016llx\"}\nRANKLENS_DIGEST params fnv1a64:%016llx\n",
      rank, firstNonFinite, nonFiniteThen, digest, digest);
  fflush(stdout);
  NCCL_CHECK(ncclCommDestroy(comm));
  if (gpu) {
    CUDA_CHECK(cudaFree(buffer));
    CUDA_CHECK(cudaStreamDestroy(stream));
  } else {
    free(buffer);
  }
  return 0;
}

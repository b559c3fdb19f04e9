// SPDX-License-Identifier: Apache-2.0
// What the plain-NCCL examples (nccl_minitrain, nccl_anomaly) share: checked calls, the rank from the environment,
// strict integer arguments, and the world communicator of several processes (rank 0's unique id handed over through
// a file), which a rank replayed alone under RankLens creates by itself.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#define NCCL_CHECK(call)                                                                                \
  do {                                                                                                  \
    ncclResult_t res_ = (call);                                                                         \
    if (res_ != ncclSuccess) {                                                                          \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n  ncclGetLastError: %s\n", __FILE__, __LINE__, #call, \
              ncclGetErrorString(res_), static_cast<int>(res_), ncclGetLastError(nullptr));             \
      exit(1);                                                                                          \
    }                                                                                                   \
  } while (0)

#define CUDA_CHECK(call)                                                                                  \
  do {                                                                                                    \
    cudaError_t err_ = (call);                                                                            \
    if (err_ != cudaSuccess) {                                                                            \
      fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_), \
              static_cast<int>(err_));                                                                    \
      exit(1);                                                                                            \
    }                                                                                                     \
  } while (0)

namespace nccl_example {

constexpr int kExitUsage = 64;  // EX_USAGE

[[noreturn]] inline void usageError(const char* program, const std::string& message) {
  fprintf(stderr, "%s: %s (--help for the usage)\n", program, message.c_str());
  exit(kExitUsage);
}

// A whole decimal integer in [lo, hi]; `what` names the source in the error ("RANK=x", "--steps x").
inline int parseInt(const char* text, int lo, int hi, const std::string& what) {
  if (text == nullptr || *text == '\0') usageError("error", what + ": expected an integer");
  char* end = nullptr;
  errno = 0;
  const long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || end == text || text[0] == ' ' || text[0] == '+' || value < lo || value > hi)
    usageError("error", what + ": expected an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return static_cast<int>(value);
}

inline int envInt(const char* name, int fallback, int lo, int hi) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  return parseInt(text, lo, hi, std::string(name) + "=" + text);
}

// The GPUs visible; 0 without one (the sticky "no device" error cleared), when RankLens's host device stands in.
inline int deviceCountOrZero() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

// Under torchrun every run has its own TORCHELASTIC_RUN_ID, hence its own file; "" otherwise.
inline std::string defaultIdFile(const char* program) {
  const char* runId = getenv("TORCHELASTIC_RUN_ID");
  return runId && *runId ? std::string("/tmp/") + program + "." + runId + ".uid" : std::string();
}

// Rank 0 writes the id to `path` (complete before it appears: a temporary file, then rename); the others wait for it
// (60 s), then read it. The file stays behind: a later run must use another path, or its ranks > 0 could read this
// stale id.
inline void exchangeUniqueId(const std::string& path, int rank, ncclUniqueId* id) {
  if (rank == 0) {
    const std::string tmp = path + ".tmp";
    FILE* f = fopen(tmp.c_str(), "wb");
    if (f == nullptr || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp.c_str(), path.c_str()) != 0) {
      fprintf(stderr, "cannot write the unique id to %s: %s\n", path.c_str(), strerror(errno));
      exit(1);
    }
    return;
  }
  for (int waited = 0; waited < 6000; ++waited) {
    if (FILE* f = fopen(path.c_str(), "rb")) {
      const bool ok = fread(id, sizeof *id, 1, f) == 1;
      fclose(f);
      if (ok) return;
    }
    usleep(10000);
  }
  fprintf(stderr,
          "rank %d waited 60 s for rank 0's unique id in %s (is rank 0 running? replaying one rank alone: "
          "leave --id-file out and unset TORCHELASTIC_RUN_ID)\n",
          rank, path.c_str());
  exit(1);
}

// The world communicator. In a real multi-process job rank 0 calls ncclGetUniqueId and hands the id to every rank
// (here through `idFile`) before ncclCommInitRank; a virtual RankLens communicator has no bootstrap, so a rank
// replayed alone creates its own id.
inline ncclComm_t initWorld(const std::string& idFile, int rank, int worldSize) {
  ncclUniqueId id;
  if (idFile.empty() || rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  if (!idFile.empty() && worldSize > 1) exchangeUniqueId(idFile, rank, &id);
  ncclComm_t world = nullptr;
  NCCL_CHECK(ncclCommInitRank(&world, worldSize, id, rank));
  return world;
}

// FNV-1a over host bytes.
inline uint64_t fnv1a64(const void* data, size_t bytes, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace nccl_example

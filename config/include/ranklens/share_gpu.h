// SPDX-License-Identifier: Apache-2.0
// Several ranks of a real NCCL job on one GPU: what `ranklens record|run --share-gpu` (tools/ranklens) tells the
// preloaded placement library (nccl_fake/src/share_gpu.cc) and what the recorder reads back for the manifest.
//
// NCCL refuses two ranks on one device ("Duplicate GPU detected") unless each process has its own NCCL_HOSTID; the
// ranks then look like separate nodes and talk over NET/Socket (the loopback interface). The launcher cannot give
// each process its own value (torchrun or mpirun starts them), so a library preloaded into every process does it,
// and maps the process's local rank onto the GPUs there are. Header only: the placement library links nothing.
#pragma once

#include <cstdlib>
#include <cstring>

namespace ranklens {
namespace share_gpu {

// Set by the launcher: how many GPUs the job's ranks share (>= 1). Unset: nothing is placed.
inline constexpr const char kGpusVar[] = "RANKLENS_SHARE_GPU";
// Set by the launcher: CUDA_VISIBLE_DEVICES as it was at launch, or kVisibleUnset. A rank that sees another value
// was pinned by the job itself, which would defeat the placement.
inline constexpr const char kVisibleVar[] = "RANKLENS_SHARE_GPU_VISIBLE";
inline constexpr const char kVisibleUnset[] = "(unset)";
// Set by the placement library in a rank's process: the local rank the launcher gave it, before LOCAL_RANK was mapped
// onto the shared GPUs (the recorder writes this one to the manifest).
inline constexpr const char kLocalRankVar[] = "RANKLENS_SHARE_GPU_LOCAL_RANK";
// Every NCCL_HOSTID the placement library sets starts with this; any other value was set by the job.
inline constexpr const char kHostIdPrefix[] = "ranklens-share-gpu-";

// Whether this process was placed on a shared GPU: the launcher asked for it and the host id is the library's.
inline bool placedHere() {
  const char* gpus = std::getenv(kGpusVar);
  const char* hostId = std::getenv("NCCL_HOSTID");
  return gpus != nullptr && *gpus != '\0' && hostId != nullptr &&
         std::strncmp(hostId, kHostIdPrefix, sizeof(kHostIdPrefix) - 1) == 0;
}

}  // namespace share_gpu
}  // namespace ranklens

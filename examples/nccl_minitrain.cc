// SPDX-License-Identifier: Apache-2.0
// nccl_minitrain: one rank of a small data + tensor parallel training loop, written against plain NCCL.
//
// It is the default workload that RankLens replays (README, first command), and an ordinary NCCL program: it links
// the CUDA toolkit's real libnccl.so.2 and knows nothing about RankLens, which replaces that library at run time
// (LD_LIBRARY_PATH=<ranklens>/lib). Every step does what a TP x DP trainer asks of NCCL:
//   - AllGather of the parameter shards on the TP communicator (bf16),
//   - ReduceScatter of activations on the TP communicator (fp32, sum),
//   - three gradient AllReduce buckets of different sizes on the DP communicator (fp32, sum, in place),
//   - Broadcast of an int32 "found_inf" flag on the world communicator from root 0 (in place),
//   - a pipeline-style exchange on the world communicator: ncclGroupStart; ncclSend to (rank+1)%N;
//     ncclRecv from (rank-1+N)%N; ncclGroupEnd.
// Buffers come from ncclMemAlloc and are never read or written from the host, so the program also runs on a machine
// without a GPU under RankLens's host device (RANKLENS_DEVICE=host); it then passes a NULL stream.
//
// Usage:  RANK=r WORLD_SIZE=n nccl_minitrain [--steps N] [--tp K] [--id-file PATH] [--digest]
//   RANK, WORLD_SIZE  this process's rank and the world size (defaults 0 and 1)
//   --steps N         training steps (default 3)
//   --tp K            tensor-parallel size; must divide WORLD_SIZE (default 2, or 1 when WORLD_SIZE is odd)
//   --id-file PATH    exchange the world communicator's ncclUniqueId through PATH (rank 0 writes it, the others
//                     wait for it): needed to run on real NCCL with several processes. Under torchrun
//                     (TORCHELASTIC_RUN_ID set) it defaults to /tmp/nccl_minitrain.<run id>.uid.
//   --digest          (GPU only) fill the buffers with a pattern of this rank at the start, and at the end print
//                     `RANKLENS_DIGEST buffers fnv1a64:<hex>` (and `RESULT {"rank": r, "digest": ...}`), a checksum of
//                     every buffer a call received into:
//                     a value replay restores them all from the recording, so its digest is the real run's
//   LOCAL_RANK        with GPUs, the device is LOCAL_RANK % (device count) (default 0)
// Recording it on 2 GPUs (the trace shipped in examples/traces/minitrain-2xh200):
//   ranklens record --trace T -- torchrun --standalone --nproc-per-node 2 --no-python nccl_minitrain --steps 10
// Each step is marked with ranklensMarkStage("step", i) when the process has RankLens's library (found with dlsym;
// nothing happens otherwise), so a trace and `ranklens compare` are per step; each step's wall time is printed.
//
// Communicators (world rank w, tensor-parallel size K, D = WORLD_SIZE / K data-parallel replicas):
//   world  ncclCommInitRank over all ranks
//   tp     ncclCommSplit(world, color = w / K,      key = w): ranks d*K .. d*K+K-1     (tp index = w % K)
//   dp     ncclCommSplit(world, color = D + w % K,  key = w): ranks t, t+K, ..., t+(D-1)K (dp index = w / K)
// The DP colors are offset by D so that no TP color equals a DP color: RankLens tells the two splits apart by color
// (a `mesh_colors` range or a `groups:` entry), so two splits of one parent must not share a color.
//
// Under RankLens (replay, structure fidelity) a lone rank cannot learn its peers' colors: the layout comes from a
// mesh (RANKLENS_MESH=dp=D,tp=K RANKLENS_MESH_COLORS=tp=0-<D-1>,dp=D-, at any world size) or the config's
// `groups` table. Without either ncclCommSplit returns ncclInvalidUsage; the program then prints NCCL's last error
// and the settings this rank needs, and exits with status 2.
//
// Exit status: 0 success; 1 a NCCL or CUDA call failed; 2 ncclCommSplit returned ncclInvalidUsage (RankLens without
// a mesh or groups table); 64 bad command line or environment.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "nccl_example_util.h"

namespace {

using namespace nccl_example;

// Element counts (per rank). Small enough for RankLens's host device, large enough to look like real buckets.
constexpr size_t kParamShard = size_t{1} << 18;  // bf16 parameters per TP rank (512 KiB)
constexpr size_t kActShard = size_t{1} << 16;    // fp32 activations per TP rank after ReduceScatter (256 KiB)
constexpr size_t kBuckets[3] = {size_t{1} << 20, size_t{3} << 17, size_t{1} << 16};  // fp32 gradient buckets
constexpr size_t kPipe = size_t{1} << 15;  // fp32 elements sent to the next pipeline rank (128 KiB)

[[noreturn]] void usageError(const std::string& message) {
  fprintf(stderr,
          "minitrain: %s\n"
          "usage: RANK=r WORLD_SIZE=n nccl_minitrain [--steps N] [--tp K] [--id-file PATH] [--digest]\n"
          "  RANK in 0..WORLD_SIZE-1 (default 0), WORLD_SIZE >= 1 (default 1), N >= 0 (default 3),\n"
          "  K >= 1 dividing WORLD_SIZE (default 2, or 1 when WORLD_SIZE is odd)\n",
          message.c_str());
  exit(kExitUsage);
}

std::string rankList(int first, int stride, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) text += (i ? ", " : "") + std::to_string(first + i * stride);
  return text + "]";
}

// ncclCommSplit, with the one failure this program explains instead of just reporting: RankLens without a way to
// size this split (a mesh or a groups table).
ncclComm_t split(ncclComm_t parent, int color, int key, const char* label, const std::string& layoutHint) {
  ncclComm_t child = nullptr;
  ncclResult_t res = ncclCommSplit(parent, color, key, &child, nullptr);
  if (res == ncclInvalidUsage) {
    fprintf(stderr,
            "minitrain: ncclCommSplit(world, color %d, key %d) for the %s communicator returned ncclInvalidUsage: %s\n"
            "  %s\n"
            "minitrain: under RankLens a replayed rank cannot see its peers' colors; describe this program's layout\n"
            "  (docs/config.md, mesh and groups):\n%s",
            color, key, label, ncclGetErrorString(res), ncclGetLastError(nullptr), layoutHint.c_str());
    exit(2);
  }
  NCCL_CHECK(res);
  if (child == nullptr) {
    fprintf(stderr, "minitrain: ncclCommSplit for the %s communicator returned no communicator\n", label);
    exit(1);
  }
  return child;
}

// The sizes this program expects; a mismatch means the communicator layout (a RankLens mesh or groups table) is wrong.
void expectShape(ncclComm_t comm, const char* label, int size, int rank) {
  int gotSize = -1, gotRank = -1;
  NCCL_CHECK(ncclCommCount(comm, &gotSize));
  NCCL_CHECK(ncclCommUserRank(comm, &gotRank));
  if (gotSize != size || gotRank != rank) {
    fprintf(stderr,
            "minitrain: the %s communicator is rank %d of %d, expected rank %d of %d (check the mesh or groups "
            "table)\n",
            label, gotRank, gotSize, rank, size);
    exit(1);
  }
}

void* alloc(size_t bytes) {
  void* ptr = nullptr;
  NCCL_CHECK(ncclMemAlloc(&ptr, bytes));
  return ptr;
}

// FNV-1a over the device buffers' bytes, in order.
uint64_t digestOf(const std::vector<std::pair<void*, size_t>>& buffers) {
  uint64_t h = fnv1a64(nullptr, 0);
  std::vector<unsigned char> host;
  for (const auto& [ptr, bytes] : buffers) {
    host.resize(bytes);
    CUDA_CHECK(cudaMemcpy(host.data(), ptr, bytes, cudaMemcpyDeviceToHost));
    h = fnv1a64(host.data(), bytes, h);
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const int worldSize = envInt("WORLD_SIZE", 1, 1, INT_MAX);
  const int rank = envInt("RANK", 0, 0, worldSize - 1);
  int steps = 3;
  int tp = worldSize % 2 == 0 ? 2 : 1;
  std::string idFile = defaultIdFile("nccl_minitrain");
  bool digest = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--digest") {
      digest = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      printf("usage: RANK=r WORLD_SIZE=n nccl_minitrain [--steps N] [--tp K] [--id-file PATH] [--digest]\n");
      return 0;
    }
    if ((arg == "--steps" || arg == "--tp" || arg == "--id-file") && i + 1 >= argc) usageError(arg + ": missing value");
    if (arg == "--id-file") {
      idFile = argv[++i];
    } else if (arg == "--steps") {
      const char* value = argv[++i];
      steps = parseInt(value, 0, INT_MAX, "--steps " + std::string(value));
    } else if (arg == "--tp") {
      const char* value = argv[++i];
      tp = parseInt(value, 1, INT_MAX, "--tp " + std::string(value));
    } else {
      usageError("unknown argument '" + arg + "'");
    }
  }
  if (worldSize % tp != 0)
    usageError("--tp " + std::to_string(tp) + " does not divide WORLD_SIZE=" + std::to_string(worldSize));
  if (digest && deviceCountOrZero() == 0) usageError("--digest reads the buffers back from a GPU, and none is visible");
  const int dpSize = worldSize / tp;
  const int tpIndex = rank % tp, dpIndex = rank / tp;
  const int tpColor = dpIndex, dpColor = dpSize + tpIndex;

  // A GPU when there is one; otherwise a NULL stream (RankLens's host device needs no GPU).
  const int deviceCount = deviceCountOrZero();
  cudaStream_t stream = nullptr;
  int device = -1;
  if (deviceCount > 0) {
    device = envInt("LOCAL_RANK", 0, 0, INT_MAX) % deviceCount;
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreate(&stream));
  }

  ncclComm_t world = initWorld(idFile, rank, worldSize);
  expectShape(world, "world", worldSize, rank);

  // The layout for RankLens: a mesh (any world size, one line), and for small worlds the groups this rank needs.
  std::string layoutHint =
      "  RANKLENS_MESH=dp=" + std::to_string(dpSize) + ",tp=" + std::to_string(tp) + " RANKLENS_MESH_COLORS=tp=0-" +
      std::to_string(dpSize - 1) + ",dp=" + std::to_string(dpSize) +
      "-\n  (ranklens replay --mesh dp=" + std::to_string(dpSize) + ",tp=" + std::to_string(tp) +
      " --mesh-colors tp=0-" + std::to_string(dpSize - 1) + ",dp=" + std::to_string(dpSize) + "-)\n";
  if (dpSize <= 64) {
    layoutHint += "  or the groups this rank needs: RANKLENS_GROUPS='[{members: " + rankList(dpIndex * tp, 1, tp) +
                  ", color: " + std::to_string(tpColor) + ", name: tp" + std::to_string(dpIndex) +
                  "}, {members: " + rankList(tpIndex, tp, dpSize) + ", color: " + std::to_string(dpColor) +
                  ", name: dp" + std::to_string(tpIndex) + "}]'\n";
  }
  ncclComm_t tpComm = split(world, tpColor, rank, "tensor-parallel", layoutHint);
  ncclComm_t dpComm = split(world, dpColor, rank, "data-parallel", layoutHint);
  expectShape(tpComm, "tensor-parallel", tp, tpIndex);
  expectShape(dpComm, "data-parallel", dpSize, dpIndex);
  printf("minitrain: rank %d of %d: tp %d (rank %d, color %d), dp %d (rank %d, color %d), %s\n", rank, worldSize, tp,
         tpIndex, tpColor, dpSize, dpIndex, dpColor,
         device >= 0 ? ("cuda device " + std::to_string(device)).c_str() : "no GPU (NULL stream)");
  fflush(stdout);

  // Buffers (contents are never touched from the host).
  auto* paramShard = alloc(kParamShard * 2);      // bf16
  auto* paramFull = alloc(kParamShard * 2 * tp);  // bf16, tp shards
  auto* actFull = alloc(kActShard * 4 * tp);      // fp32, tp shards
  auto* actShard = alloc(kActShard * 4);          // fp32
  void* buckets[3];
  for (int b = 0; b < 3; ++b) buckets[b] = alloc(kBuckets[b] * 4);
  auto* foundInf = alloc(sizeof(int32_t));
  auto* pipeSend = alloc(kPipe * 4);
  auto* pipeRecv = alloc(kPipe * 4);
  const int next = (rank + 1) % worldSize, prev = (rank - 1 + worldSize) % worldSize;
  // What a call received into: the digest's buffers.
  const std::vector<std::pair<void*, size_t>> received = {{paramFull, kParamShard * 2 * tp},
                                                          {actShard, kActShard * 4},
                                                          {buckets[0], kBuckets[0] * 4},
                                                          {buckets[1], kBuckets[1] * 4},
                                                          {buckets[2], kBuckets[2] * 4},
                                                          {foundInf, sizeof(int32_t)},
                                                          {pipeRecv, kPipe * 4}};
  if (digest) {  // a pattern of this rank in every buffer, so that the sums are the same in every run
    for (const auto& [ptr, bytes] : received) CUDA_CHECK(cudaMemset(ptr, 0, bytes));
    CUDA_CHECK(cudaMemset(paramShard, 0x3c, kParamShard * 2));
    CUDA_CHECK(cudaMemset(actFull, 0x3c + rank % 4, kActShard * 4 * tp));
    CUDA_CHECK(cudaMemset(pipeSend, 0x40 + rank % 8, kPipe * 4));
    for (int b = 0; b < 3; ++b) CUDA_CHECK(cudaMemset(buckets[b], 0x3a + rank % 4, kBuckets[b] * 4));
    CUDA_CHECK(cudaDeviceSynchronize());
  }

  using MarkStage = int (*)(const char*, int64_t);
  const auto markStage = reinterpret_cast<MarkStage>(dlsym(RTLD_DEFAULT, "ranklensMarkStage"));
  for (int step = 0; step < steps; ++step) {
    if (markStage != nullptr) markStage("step", step);
    const auto stepStart = std::chrono::steady_clock::now();
    // Forward: gather the full parameters of this TP group, reduce-scatter the activations.
    NCCL_CHECK(ncclAllGather(paramShard, paramFull, kParamShard, ncclBfloat16, tpComm, stream));
    NCCL_CHECK(ncclReduceScatter(actFull, actShard, kActShard, ncclFloat32, ncclSum, tpComm, stream));
    // Backward: gradient buckets, all-reduced across data-parallel replicas (in place, as DDP does).
    for (int b = 0; b < 3; ++b)
      NCCL_CHECK(ncclAllReduce(buckets[b], buckets[b], kBuckets[b], ncclFloat32, ncclSum, dpComm, stream));
    // Optimizer: rank 0's overflow check decides for everyone.
    NCCL_CHECK(ncclBroadcast(foundInf, foundInf, 1, ncclInt32, 0, world, stream));
    // Pipeline: hand activations to the next stage, receive from the previous one (fused in one group).
    NCCL_CHECK(ncclGroupStart());
    NCCL_CHECK(ncclSend(pipeSend, kPipe, ncclFloat32, next, world, stream));
    NCCL_CHECK(ncclRecv(pipeRecv, kPipe, ncclFloat32, prev, world, stream));
    NCCL_CHECK(ncclGroupEnd());
    if (stream != nullptr) CUDA_CHECK(cudaStreamSynchronize(stream));
    printf("minitrain: rank %d step %d/%d done in %.3f ms\n", rank, step + 1, steps,
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stepStart).count());
    fflush(stdout);
  }

  if (markStage != nullptr) markStage("step", steps);  // closes the last step
  if (digest) {
    const unsigned long long value = digestOf(received);
    printf("RANKLENS_DIGEST buffers fnv1a64:%016llx\nRESULT {\"rank\": %d, \"digest\": \"buffers fnv1a64:%016llx\"}\n",
           value, rank, value);
    fflush(stdout);
  }
  NCCL_CHECK(ncclCommDestroy(dpComm));
  NCCL_CHECK(ncclCommDestroy(tpComm));
  NCCL_CHECK(ncclCommDestroy(world));
  for (void* ptr :
       {paramShard, paramFull, actFull, actShard, buckets[0], buckets[1], buckets[2], foundInf, pipeSend, pipeRecv})
    NCCL_CHECK(ncclMemFree(ptr));
  if (stream != nullptr) CUDA_CHECK(cudaStreamDestroy(stream));
  printf("minitrain: rank %d of %d done, %d steps\n", rank, worldSize, steps);
  return 0;
}

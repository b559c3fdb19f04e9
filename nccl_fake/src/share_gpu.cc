// SPDX-License-Identifier: Apache-2.0
// libranklens_share_gpu.so: preloaded by `ranklens record|run --share-gpu` into every process of the job, so that
// several real NCCL ranks can run on one GPU (ranklens/share_gpu.h says why). At load, in each process that the
// launcher asked for (RANKLENS_SHARE_GPU=<gpus>):
//   - NCCL_HOSTID becomes this process's own ("ranklens-share-gpu-<host>-<pid>"), and again in each forked child;
//   - a rank's local rank (LOCAL_RANK, else MPI's) is mapped onto the shared GPUs: LOCAL_RANK becomes
//     local rank % gpus, so `torch.cuda.set_device(LOCAL_RANK)` picks a GPU that exists, and an MPI rank gets
//     NCCL_TESTS_DEVICE (nccl-tests' device choice) likewise; the launcher's local rank is kept in
//     RANKLENS_SHARE_GPU_LOCAL_RANK;
//   - a host id or CUDA_VISIBLE_DEVICES that the job set for itself would place ranks wrongly or make NCCL refuse
//     them later, far from the cause: the process stops here, saying so.
// It runs before main (and before Python copies the environment into os.environ), links only libc, and does
// nothing in a process started without RANKLENS_SHARE_GPU.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "ranklens/share_gpu.h"

namespace {

namespace sg = ranklens::share_gpu;

// "NCCL_HOSTID=<prefix><host>-<pid>", given to the environment with putenv: the environment then points at this
// buffer, and a forked child rewrites the pid digits in place (no allocation, no lock: safe after fork).
char hostIdEntry[256];
size_t pidAt = 0;
constexpr int kPidDigits = 10;

void writePid(long pid) {
  for (int i = kPidDigits - 1; i >= 0; --i, pid /= 10) hostIdEntry[pidAt + i] = static_cast<char>('0' + pid % 10);
}

void inForkedChild() { writePid(getpid()); }

[[noreturn]] void refuse(const char* what, const char* fix) {
  fprintf(stderr, "ranklens: error: --share-gpu (pid %ld): %s; %s\n", static_cast<long>(getpid()), what, fix);
  fflush(stderr);
  _exit(2);
}

bool readInt(const char* name, long* value) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  const long v = strtol(text, &end, 10);
  if (*end != '\0' || v < 0) return false;
  *value = v;
  return true;
}

void setOwnHostId() {
  const char* current = getenv("NCCL_HOSTID");
  if (current != nullptr && strncmp(current, sg::kHostIdPrefix, sizeof(sg::kHostIdPrefix) - 1) != 0) {
    char what[512];
    snprintf(what, sizeof what, "NCCL_HOSTID=%.200s was set by the job or its launcher", current);
    refuse(what,
           "RankLens gives every process its own NCCL_HOSTID so that NCCL accepts several ranks on one GPU: "
           "remove NCCL_HOSTID from the job's environment (mpirun -x, a wrapper script)");
  }
  char host[64] = "host";
  gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = '\0';
  const int n = snprintf(hostIdEntry, sizeof hostIdEntry, "NCCL_HOSTID=%s%s-", sg::kHostIdPrefix, host);
  pidAt = static_cast<size_t>(n);
  hostIdEntry[pidAt + kPidDigits] = '\0';
  writePid(getpid());
  putenv(hostIdEntry);
  pthread_atfork(nullptr, nullptr, inForkedChild);
}

// The launcher's local rank of this process: torchrun's LOCAL_RANK, else an MPI launcher's.
bool launcherLocalRank(long* localRank, bool* fromMpi) {
  *fromMpi = false;
  if (readInt("LOCAL_RANK", localRank)) return true;
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK"})
    if (readInt(name, localRank)) return *fromMpi = true;
  return false;
}

void checkVisibleDevices() {
  const char* atLaunch = getenv(sg::kVisibleVar);
  const char* now = getenv("CUDA_VISIBLE_DEVICES");
  if (atLaunch == nullptr) return;
  const bool same = strcmp(atLaunch, sg::kVisibleUnset) == 0 ? now == nullptr : now && strcmp(now, atLaunch) == 0;
  if (same) return;
  char what[512];
  snprintf(what, sizeof what,
           "this rank's CUDA_VISIBLE_DEVICES is %.100s%s%s but was %.100s at launch: the job "
           "pins a GPU per rank",
           now ? "'" : "", now ? now : "unset", now ? "'" : "", atLaunch);
  refuse(what,
         "ranks that share GPUs must all see the launch's GPUs (RankLens maps each local rank onto them); "
         "set CUDA_VISIBLE_DEVICES before `ranklens ... --share-gpu`, not per rank");
}

void placeLocalRank(long gpus) {
  long localRank = 0;
  bool fromMpi = false;
  if (!launcherLocalRank(&localRank, &fromMpi)) return;  // not a rank (torchrun's agent, mpirun, a shell)
  checkVisibleDevices();
  long placedFrom = 0;
  // A rank's wrapper (a shell that then runs python) placed it already: LOCAL_RANK is the mapped value.
  if (!fromMpi && readInt(sg::kLocalRankVar, &placedFrom) && placedFrom % gpus == localRank) return;
  char text[32];
  snprintf(text, sizeof text, "%ld", localRank);
  setenv(sg::kLocalRankVar, text, 1);
  snprintf(text, sizeof text, "%ld", localRank % gpus);
  if (fromMpi)
    setenv("NCCL_TESTS_DEVICE", text, 1);
  else
    setenv("LOCAL_RANK", text, 1);
}

__attribute__((constructor)) void placeOnSharedGpu() {
  long gpus = 0;
  if (getenv(sg::kGpusVar) == nullptr) return;
  if (!readInt(sg::kGpusVar, &gpus) || gpus < 1)
    refuse("RANKLENS_SHARE_GPU must be the number of GPUs the ranks share (1 or more)",
           "start the job with `ranklens record --share-gpu` or `ranklens run --share-gpu`");
  setOwnHostId();
  placeLocalRank(gpus);
}

}  // namespace

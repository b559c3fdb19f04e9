// SPDX-License-Identifier: Apache-2.0
#include "nccl_fake/profiler_plugin.h"

#include <limits.h>
#include <stdlib.h>

#include <atomic>
#include <cctype>
#include <cstring>

#include "nccl_fake/real_nccl.h"
#include "ranklens/events.h"
#include "ranklens/kernel_clock.h"

namespace nccl_fake {
namespace profiler {
namespace {

using ranklens::timing::KernelClock;

std::atomic<KernelClock*> attached{nullptr};

// Every callback runs inside the real NCCL, on its launching or proxy thread: nothing may throw through it.
ncclResult_t init(void** context, uint64_t, int* eActivationMask, const char*, int, int nranks, int rank, Logger) {
  *context = nullptr;
  *eActivationMask = 0;
  KernelClock* clock = attached.load(std::memory_order_acquire);
  if (clock == nullptr) return ncclSuccess;  // loaded by a process that is not recording: report nothing
  try {
    *context = clock->commContext(nranks, rank);
  } catch (...) {
    return ncclSystemError;
  }
  *eActivationMask = static_cast<int>(kColl | kP2p | kKernelCh);
  return ncclSuccess;
}

ncclResult_t startEvent(void* context, void** eHandle, EventDescr* d) {
  *eHandle = nullptr;
  KernelClock* clock = attached.load(std::memory_order_acquire);
  if (clock == nullptr || d == nullptr) return ncclSuccess;
  try {
    KernelClock::Task task;
    if (d->type == kColl) {
      task.func = d->coll.func ? d->coll.func : "";
      task.bytes = d->coll.count * datatypeBytesByName(d->coll.datatype);
      task.root =
          (std::strcmp(task.func, "Broadcast") == 0 || std::strcmp(task.func, "Reduce") == 0) ? d->coll.root : -1;
      task.buffer = d->coll.recvBuff;
      *eHandle = clock->taskStarted(context, task, d->rank, d->coll.nChannels);
    } else if (d->type == kP2p) {
      task.func = d->p2p.func ? d->p2p.func : "";
      task.bytes = d->p2p.count * datatypeBytesByName(d->p2p.datatype);
      task.root = d->p2p.peer;
      task.buffer = d->p2p.buff;
      *eHandle = clock->taskStarted(context, task, d->rank, d->p2p.nChannels);
    } else if (d->type == kKernelCh) {
      *eHandle = clock->channelStarted(d->parentObj, d->kernelCh.pTimer);
    }
  } catch (...) {
    *eHandle = nullptr;
  }
  return ncclSuccess;
}

ncclResult_t stopEvent(void* eHandle) {
  KernelClock* clock = attached.load(std::memory_order_acquire);
  if (clock != nullptr && eHandle != nullptr) clock->stopped(eHandle);
  return ncclSuccess;
}

ncclResult_t recordEventState(void* eHandle, int eState, EventStateArgs* args) {
  KernelClock* clock = attached.load(std::memory_order_acquire);
  if (clock != nullptr && eHandle != nullptr && args != nullptr && eState == kStateKernelChStop) {
    try {
      clock->channelStopped(eHandle, args->kernelCh.pTimer);
    } catch (...) {
    }
  }
  return ncclSuccess;
}

ncclResult_t finalize(void* context) {
  KernelClock* clock = attached.load(std::memory_order_acquire);
  if (clock != nullptr && context != nullptr) clock->releaseContext(context);
  return ncclSuccess;
}

}  // namespace

const Table kTable = {"RankLens", init, startEvent, stopEvent, recordEventState, finalize};

// NCCL's profiler names a datatype as nccl.h spells it: "ncclBfloat16" for the trace's "bfloat16".
size_t datatypeBytesByName(const char* name) {
  if (name == nullptr || std::strncmp(name, "nccl", 4) != 0 || name[4] == '\0') return 0;
  for (int type = 0; ranklens::events::datatypeBytes(type) > 0; ++type) {
    const char* ours = ranklens::events::datatypeName(type);
    if (std::toupper(static_cast<unsigned char>(ours[0])) == name[4] && std::strcmp(ours + 1, name + 5) == 0)
      return ranklens::events::datatypeBytes(type);
  }
  return 0;
}

ranklens::Status install() {
  const char* current = getenv("NCCL_PROFILER_PLUGIN");
  std::string self = real::selfPath();
  char resolved[PATH_MAX];
  if (!self.empty() && realpath(self.c_str(), resolved) != nullptr) self = resolved;
  if (self.empty()) {
    return ranklens::Status::systemError("the path of RankLens's own library is unknown (dladdr)");
  }
  if (current != nullptr && *current != '\0') {
    char theirs[PATH_MAX];
    if (realpath(current, theirs) != nullptr && self == theirs) return ranklens::Status::ok();
    return ranklens::Status::unsupported(std::string("NCCL_PROFILER_PLUGIN is already set (") + current +
                                         "): NCCL loads one profiler plugin");
  }
  // Before the real NCCL reads it (at its first communicator); inherited by child processes, whose NCCL then loads
  // this library as a plugin: unless they record too, it reports nothing (init returns no event types).
  if (setenv("NCCL_PROFILER_PLUGIN", self.c_str(), 1) != 0) {
    return ranklens::Status::systemError("setenv(NCCL_PROFILER_PLUGIN) failed");
  }
  return ranklens::Status::ok();
}

void attach(KernelClock* clock) { attached.store(clock, std::memory_order_release); }

}  // namespace profiler
}  // namespace nccl_fake

// SPDX-License-Identifier: Apache-2.0
// RankLens's library doubles as an NCCL profiler plugin (interface version 5, NCCL 2.28) so that record mode can
// take call durations from NCCL's own kernel timestamps (timing::KernelClock, `timing_clock: kernel`). Record mode
// points NCCL_PROFILER_PLUGIN at this library before the real NCCL creates its first communicator; the real NCCL
// then finds the table below (exported as ncclProfiler_v5) and reports its tasks and kernel channels to it.
#pragma once

#include <nccl.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

// Forward: the stub real NCCL of the tests includes this header for the plugin ABI alone, without config/.
namespace ranklens {
class Status;
}

namespace ranklens {
namespace timing {
class KernelClock;
}
}  // namespace ranklens

namespace nccl_fake {
namespace profiler {

// NCCL's profiler plugin interface, version 5 (NCCL's plugin/profiler/profiler_v5.h and nccl_profiler.h): the
// layout must match it exactly, so every member of the descriptor union is declared, read or not.
enum EventType : uint64_t {
  kGroup = 1u << 0,
  kColl = 1u << 1,
  kP2p = 1u << 2,
  kProxyOp = 1u << 3,
  kProxyStep = 1u << 4,
  kProxyCtrl = 1u << 5,
  kKernelCh = 1u << 6,
};
constexpr int kStateKernelChStop = 22;  // ncclProfilerKernelChStop

struct EventDescr {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      bool graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graphCaptured;
    } p2pApi;
    struct {
      void* stream;
    } kernelLaunch;
    struct {
      uint64_t seqNumber;
      const char* func;
      const void* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
};

union EventStateArgs {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
};

using Logger = void (*)(int level, unsigned long flags, const char* file, int line, const char* fmt, ...);

struct Table {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName, int nNodes,
                       int nranks, int rank, Logger logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, EventDescr* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, int eState, EventStateArgs* eStateArgs);
  ncclResult_t (*finalize)(void* context);
};

// The table exported as ncclProfiler_v5 (nccl_fake/src/exports.cc).
extern const Table kTable;

// Bytes per element of NCCL's datatype name ("ncclFloat32", ...); 0 when unknown.
size_t datatypeBytesByName(const char* name);

// Record mode, before the real NCCL is loaded: points NCCL_PROFILER_PLUGIN at this library. Unsupported when the
// variable already names another plugin, a system error when this library's path cannot be found or set.
ranklens::Status install();
// The clock the plugin reports to; null: NCCL's calls are answered with no events.
void attach(ranklens::timing::KernelClock* clock);

}  // namespace profiler
}  // namespace nccl_fake

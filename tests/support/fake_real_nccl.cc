// SPDX-License-Identifier: Apache-2.0
// A stand-in for the REAL libnccl.so.2, for testing record mode without a GPU: it exports what libnccl exports (weak
// `ncclX` + `pncclX` alias for every function of nccl_api.def) and implements them on host memory with simple,
// recognisable effects. Built twice: as is (reports NCCL 2.27.7) and with -DFAKE_OLD (reports 2.23.4, and its
// version script leaves ncclCommShrink/ncclCommRevoke and their aliases out of the dynamic symbol table).
//
// Two functions call the library's own exported API through its public name, as real NCCL does: ncclCommInitAll
// (-> ncclCommInitRank) and ncclBcast (-> ncclBroadcast). Such calls go through the PLT, so a recorder that loads this
// library without RTLD_DEEPBIND (or without a reentry guard) sees them as calls of the application.
//
// Profiler plugin (as NCCL 2.28): when NCCL_PROFILER_PLUGIN names a library at the first communicator's creation,
// its ncclProfiler_v5 table gets init per communicator and, for every call that moves data, a task event (Coll or
// P2p, on the launching thread, inside the call or the outermost ncclGroupEnd) whose channels then start and stop
// on a separate "proxy" thread with made-up GPU timestamps: tasks start 10 us apart in launch order, channel c at
// base + 100 c ns, and stops 1000 ns + 1 ns per byte later, so a task's kernel time is 100 (channels - 1) + 1000 +
// bytes ns. FAKE_REAL_NCCL_CHANNELS
// (default 2) sets the channel count; FAKE_REAL_NCCL_DROP_STOPS=1 never reports channel stops.
//
// Test-only exports: fakeRealNcclCalls(name), fakeRealNcclReset(), fakeRealNcclIsFake().
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/gin_barrier.h>
#include <nccl_device/impl/comm__types.h>  // the complete out-parameter types of the device-API host helpers
#include <nccl_device/impl/gin_barrier__types.h>
#include <nccl_device/impl/ll_a2a__types.h>
#include <nccl_device/impl/lsa_barrier__types.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nccl_fake/profiler_plugin.h"  // the plugin interface's layout (RankLens's declaration of NCCL's v5)

namespace fake {
namespace {

#ifdef FAKE_OLD
constexpr int kVersion = 22304;
#else
constexpr int kVersion = 22707;
#endif
constexpr uint64_t kCommMagic = 0xfa4e4ea1c0331ull;

// ---- call counters, one per function of the API list -------------------------------------------------------------
enum Fn : int {
#define NCCL_FAKE_API(ret, name, params, args, prof) k_##name,
#include "nccl_api.def"
#undef NCCL_FAKE_API
  kFnCount
};
constexpr const char* kFnNames[] = {
#define NCCL_FAKE_API(ret, name, params, args, prof) #name,
#include "nccl_api.def"
#undef NCCL_FAKE_API
};
std::atomic<int> gCalls[kFnCount];

// ---- last error: process-wide; messages are interned so that returned pointers stay valid ------------------------
std::mutex gErrorMutex;
std::atomic<const char*> gLastError{""};

ncclResult_t fail(ncclResult_t code, const std::string& message) {
  static std::set<std::string> interned;
  std::lock_guard<std::mutex> lock(gErrorMutex);
  gLastError = interned.insert(message).first->c_str();
  return code;
}
ncclResult_t invalid(const char* fn, const std::string& what) {
  return fail(ncclInvalidArgument, std::string("fake-real: ") + fn + ": " + what);
}

// ---- communicators: never freed, so that stale handles stay readable (tombstones) --------------------------------
struct FakeComm {
  uint64_t magic;
  int nranks, rank, cudaDev;
  bool blocking;
  int asyncPolls;  // ncclCommGetAsyncError answers ncclInProgress while this is > 0
  bool destroyed;
  void* profilerContext;
};
std::mutex gCommsMutex;
std::deque<FakeComm> gComms;  // stable addresses

FakeComm* get(ncclComm_t comm) { return reinterpret_cast<FakeComm*>(comm); }

ncclResult_t checkComm(const char* fn, ncclComm_t comm) {
  if (comm == nullptr) return invalid(fn, "comm is NULL");
  if (get(comm)->magic != kCommMagic) return invalid(fn, "comm is not a communicator of this library");
  return ncclSuccess;
}

bool blockingOf(const ncclConfig_t* config, bool inherited) {
  if (config == nullptr || config->blocking == NCCL_CONFIG_UNDEF_INT) return inherited;
  return config->blocking != 0;
}

int envDevice() {
  const char* value = getenv("FAKE_REAL_NCCL_DEVICE");
  return value ? atoi(value) : 0;
}

// ---- the profiler plugin ------------------------------------------------------------------------------------------
using Table = nccl_fake::profiler::Table;
using Descr = nccl_fake::profiler::EventDescr;

const Table* profilerTable() {
  static const Table* table = []() -> const Table* {
    const char* path = getenv("NCCL_PROFILER_PLUGIN");
    if (path == nullptr || *path == '\0') return nullptr;
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return handle ? static_cast<const Table*>(dlsym(handle, "ncclProfiler_v5")) : nullptr;
  }();
  return table;
}

int envInt(const char* name, int fallback) {
  const char* value = getenv(name);
  return value ? atoi(value) : fallback;
}

// The proxy thread: reports kernel channels after the launch, as NCCL's proxy does.
struct Proxy {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> work;
  Proxy() {
    std::thread([this] {
      for (;;) {
        std::function<void()> next;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [this] { return !work.empty(); });
          next = std::move(work.front());
          work.pop_front();
        }
        next();
      }
    }).detach();
  }
  void post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu);
      work.push_back(std::move(fn));
    }
    cv.notify_one();
  }
};
Proxy& proxy() {
  static Proxy* p = new Proxy();  // never destroyed: its thread outlives static destructors
  return *p;
}

const char* datatypeString(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
      return "ncclInt8";
    case ncclUint8:
      return "ncclUint8";
    case ncclInt32:
      return "ncclInt32";
    case ncclUint32:
      return "ncclUint32";
    case ncclInt64:
      return "ncclInt64";
    case ncclUint64:
      return "ncclUint64";
    case ncclFloat16:
      return "ncclFloat16";
    case ncclFloat32:
      return "ncclFloat32";
    case ncclFloat64:
      return "ncclFloat64";
    case ncclBfloat16:
      return "ncclBfloat16";
    default:
      return "Unknown";
  }
}

// What a data call tells the profiler besides its function, count and datatype.
struct TaskInfo {
  int root = -1;                 // root (collectives) or peer (Send/Recv)
  const void* buffer = nullptr;  // receive buffer; Send: send buffer
  const void* sendBuffer = nullptr;
};

// One task's events: start and host stop here (the launching thread), channels on the proxy thread.
void profileTask(void* context, int rank, const char* fn, size_t count, ncclDataType_t type, const TaskInfo& info,
                 size_t bytes) {
  const Table* table = profilerTable();
  if (table == nullptr || context == nullptr) return;
  static std::atomic<uint64_t> clock{1'000'000};
  const int channels = std::clamp(envInt("FAKE_REAL_NCCL_CHANNELS", 2), 0, 64);
  const char* func = fn + 4;  // "ncclAllReduce" -> "AllReduce"
  Descr d{};
  d.rank = rank;
  if (strcmp(func, "Send") == 0 || strcmp(func, "Recv") == 0) {
    d.type = nccl_fake::profiler::kP2p;
    d.p2p.func = func;
    d.p2p.buff = const_cast<void*>(info.buffer);
    d.p2p.datatype = datatypeString(type);
    d.p2p.count = count;
    d.p2p.peer = info.root;
    d.p2p.nChannels = static_cast<uint8_t>(channels);
  } else {
    d.type = nccl_fake::profiler::kColl;
    d.coll.func = func;
    d.coll.sendBuff = info.sendBuffer;
    d.coll.recvBuff = const_cast<void*>(info.buffer);
    d.coll.count = count;
    d.coll.root = info.root;
    d.coll.datatype = datatypeString(type);
    d.coll.nChannels = static_cast<uint8_t>(channels);
  }
  void* task = nullptr;
  table->startEvent(context, &task, &d);
  const uint64_t base = clock.fetch_add(10'000);  // tasks 10 us apart, in launch order
  const bool dropStops = envInt("FAKE_REAL_NCCL_DROP_STOPS", 0) != 0;
  proxy().post([=] {
    for (int c = 0; c < channels; ++c) {
      Descr ch{};
      ch.type = nccl_fake::profiler::kKernelCh;
      ch.parentObj = task;
      ch.kernelCh.channelId = static_cast<uint8_t>(c);
      ch.kernelCh.pTimer = base + 100 * c;
      void* handle = nullptr;
      table->startEvent(context, &handle, &ch);
      if (handle == nullptr) continue;
      if (!dropStops) {
        nccl_fake::profiler::EventStateArgs args{};
        args.kernelCh.pTimer = base + 100 * c + 1000 + bytes;
        table->recordEventState(handle, nccl_fake::profiler::kStateKernelChStop, &args);
      }
      table->stopEvent(handle);
    }
  });
  if (task != nullptr) table->stopEvent(task);  // NCCL's host-side stop, right after the launch
}

// Creates a communicator; a non-blocking one returns ncclInProgress and completes on the first async-error poll.
ncclResult_t newComm(const char* fn, ncclComm_t* out, int nranks, int rank, int cudaDev, bool blocking) {
  if (out == nullptr) return invalid(fn, "comm out-pointer is NULL");
  if (nranks < 1) return invalid(fn, "nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return invalid(fn, "rank " + std::to_string(rank) + " out of range [0, " + std::to_string(nranks) + ")");
  void* context = nullptr;
  if (const Table* table = profilerTable()) {
    int mask = 0;
    table->init(&context, reinterpret_cast<uint64_t>(out), &mask, "", 1, nranks, rank, nullptr);
    if ((mask & (nccl_fake::profiler::kColl | nccl_fake::profiler::kP2p)) == 0) context = nullptr;
  }
  std::lock_guard<std::mutex> lock(gCommsMutex);
  gComms.push_back(FakeComm{kCommMagic, nranks, rank, cudaDev, blocking, blocking ? 0 : 1, false, context});
  *out = reinterpret_cast<ncclComm_t>(&gComms.back());
  return blocking ? ncclSuccess : ncclInProgress;
}

// ---- groups: per thread; calls inside a group run at the outermost ncclGroupEnd ----------------------------------
struct Group {
  int depth = 0;
  bool nonBlocking = false;
  std::vector<std::function<ncclResult_t()>> queued;
};
thread_local Group tGroup;

// Runs `op` now or, inside a group, at the outermost ncclGroupEnd.
ncclResult_t run(ncclComm_t comm, std::function<ncclResult_t()> op) {
  if (tGroup.depth == 0) return op();
  tGroup.nonBlocking |= !get(comm)->blocking;
  tGroup.queued.push_back(std::move(op));
  return ncclSuccess;
}

// ---- data movement on host memory ---------------------------------------------------------------------------------
size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}

// FAKE_REAL_NCCL_SPIN_US: how long each data-moving call busy-waits (read once), so that durations look plausible.
// FAKE_REAL_NCCL_SLOW_EVERY=K:US: every K-th of them waits US instead (a launch held up by a full queue).
void spin() {
  static const long us = [] {
    const char* value = getenv("FAKE_REAL_NCCL_SPIN_US");
    return value ? atol(value) : 0L;
  }();
  static const std::pair<long, long> slow = [] {
    const char* value = getenv("FAKE_REAL_NCCL_SLOW_EVERY");
    long every = 0, slowUs = 0;
    if (value == nullptr || sscanf(value, "%ld:%ld", &every, &slowUs) != 2) return std::pair<long, long>{0, 0};
    return std::pair<long, long>{every, slowUs};
  }();
  static std::atomic<long> calls{0};
  const long n = ++calls;
  const long wait = slow.first > 0 && n % slow.first == 0 ? slow.second : us;
  if (wait <= 0) return;
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(wait);
  while (std::chrono::steady_clock::now() < until) {
  }
}

void copy(void* dst, const void* src, size_t bytes) {
  if (dst != src && src != nullptr) memmove(dst, src, bytes);
}

// A buffer argument, and whether this rank uses it (recvbuff of Reduce and Gather: only at the root).
struct Buf {
  const void* ptr;
  const char* what;
  bool used = true;
};

// The checks and the (possibly deferred) effect shared by every collective and P2P call: `effect(bytes, comm)` with
// bytes = count * element size; a count of 0 does nothing.
template <typename Effect>
ncclResult_t dataCall(const char* fn, ncclComm_t comm, size_t count, ncclDataType_t type,
                      std::initializer_list<Buf> buffers, const TaskInfo& task, Effect effect) {
  if (ncclResult_t res = checkComm(fn, comm)) return res;
  const size_t size = typeSize(type);
  if (size == 0) return invalid(fn, "invalid datatype " + std::to_string(static_cast<int>(type)));
  if (count == 0) return ncclSuccess;
  for (const Buf& buffer : buffers)
    if (buffer.used && buffer.ptr == nullptr) return invalid(fn, std::string(buffer.what) + " is NULL");
  const FakeComm c = *get(comm);
  return run(comm, [=] {
    if (c.nranks > 1) profileTask(c.profilerContext, c.rank, fn, count, type, task, count * size);
    spin();
    effect(count * size, c);
    return ncclSuccess;
  });
}

}  // namespace

// ---- the implementation of every function of the API list, in its order ------------------------------------------
namespace impl {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  if (ptr == nullptr) return invalid("ncclMemAlloc", "ptr is NULL");
  *ptr = malloc(std::max<size_t>(size, 1));
  return ncclSuccess;
}
ncclResult_t ncclMemFree(void* ptr) {
  free(ptr);
  return ncclSuccess;
}
ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return invalid("ncclGetVersion", "version is NULL");
  *version = kVersion;
  return ncclSuccess;
}
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  static std::atomic<uint64_t> next{1};
  if (uniqueId == nullptr) return invalid("ncclGetUniqueId", "uniqueId is NULL");
  *uniqueId = ncclUniqueId{};
  const uint64_t id = next++;
  memcpy(uniqueId->internal, &id, sizeof(id));
  return ncclSuccess;
}
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  return newComm("ncclCommInitRankConfig", comm, nranks, rank, envDevice(), blockingOf(config, true));
}
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId, int rank) {
  return newComm("ncclCommInitRank", comm, nranks, rank, envDevice(), true);
}
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr) return invalid("ncclCommInitAll", "comm is NULL");
  if (ndev < 1) return invalid("ncclCommInitAll", "ndev " + std::to_string(ndev) + " < 1");
  const ncclUniqueId id{};
  for (int i = 0; i < ndev; ++i) {
    // Through the exported name, like a library calling its own API: goes through the PLT.
    if (ncclResult_t res = ::ncclCommInitRank(&comm[i], ndev, id, i)) return res;
    if (comm[i] != nullptr) get(comm[i])->cudaDev = devlist ? devlist[i] : i;  // NULL: an interposer answered
  }
  return ncclSuccess;
}
ncclResult_t ncclCommFinalize(ncclComm_t comm) { return checkComm("ncclCommFinalize", comm); }
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm != nullptr) get(comm)->destroyed = true;
  return ncclSuccess;
}
ncclResult_t ncclCommAbort(ncclComm_t comm) { return impl::ncclCommDestroy(comm); }
ncclResult_t ncclCommRevoke(ncclComm_t comm, int) { return checkComm("ncclCommRevoke", comm); }
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (ncclResult_t res = checkComm("ncclCommSplit", comm)) return res;
  if (newcomm == nullptr) return invalid("ncclCommSplit", "newcomm is NULL");
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  const FakeComm& parent = *get(comm);
  // Colors from 1000: every rank of the parent chose this color, so the child is the whole parent (a framework's new
  // group of all ranks); other colors: the ranks are halved.
  const int nranks = color >= 1000 ? parent.nranks : std::max(1, parent.nranks / 2);
  return newComm("ncclCommSplit", newcomm, nranks, parent.rank % nranks, parent.cudaDev,
                 blockingOf(config, parent.blocking));
}
// The child's rank is this rank's position among the ranks kept (the parent rank when the excluded ones are above).
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int) {
  if (ncclResult_t res = checkComm("ncclCommShrink", comm)) return res;
  if (excludeRanksCount > 0 && excludeRanksList == nullptr)
    return invalid("ncclCommShrink", "excludeRanksList is NULL");
  const FakeComm& parent = *get(comm);
  int rank = parent.rank;
  for (int i = 0; i < excludeRanksCount; ++i) {
    if (excludeRanksList[i] == parent.rank) return invalid("ncclCommShrink", "this rank is excluded");
    if (excludeRanksList[i] < parent.rank) --rank;
  }
  return newComm("ncclCommShrink", newcomm, parent.nranks - std::max(0, excludeRanksCount), rank, parent.cudaDev,
                 blockingOf(config, parent.blocking));
}
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int, ncclUniqueId*,
                                      ncclConfig_t* config) {
  return newComm("ncclCommInitRankScalable", newcomm, nranks, myrank, envDevice(), blockingOf(config, true));
}
const char* ncclGetErrorString(ncclResult_t result) {
  static std::mutex mutex;
  static std::map<int, std::string> strings;  // node-based: returned pointers stay valid
  std::lock_guard<std::mutex> lock(mutex);
  std::string& text = strings[static_cast<int>(result)];
  if (text.empty()) text = "fake-real: error " + std::to_string(static_cast<int>(result));
  return text.c_str();
}
const char* ncclGetLastError(ncclComm_t) { return gLastError.load(); }
void ncclResetDebugInit() {}
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (ncclResult_t res = checkComm("ncclCommGetAsyncError", comm)) return res;
  if (asyncError == nullptr) return invalid("ncclCommGetAsyncError", "asyncError is NULL");
  FakeComm& c = *get(comm);
  *asyncError = ncclSuccess;
  if (c.asyncPolls > 0) {
    --c.asyncPolls;
    *asyncError = ncclInProgress;
  }
  return ncclSuccess;
}
// Count, CuDevice, UserRank: one field of the communicator.
ncclResult_t query(const char* fn, ncclComm_t comm, int* out, int FakeComm::*field) {
  if (ncclResult_t res = checkComm(fn, comm)) return res;
  if (out == nullptr) return invalid(fn, "output pointer is NULL");
  *out = get(comm)->*field;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return query("ncclCommCount", comm, count, &FakeComm::nranks);
}
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return query("ncclCommCuDevice", comm, device, &FakeComm::cudaDev);
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return query("ncclCommUserRank", comm, rank, &FakeComm::rank);
}
ncclResult_t ncclCommRegister(const ncclComm_t, void*, size_t, void** handle) {
  static int dummyHandle;
  if (handle != nullptr) *handle = &dummyHandle;
  return ncclSuccess;
}
ncclResult_t ncclCommDeregister(const ncclComm_t, void*) { return ncclSuccess; }
ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t* win, int) {
  static int dummyWindow;
  if (win != nullptr) *win = reinterpret_cast<ncclWindow_t>(&dummyWindow);
  return ncclSuccess;
}
ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) { return ncclSuccess; }
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t) {
  if (op != nullptr) *op = ncclNumOps;  // the first dynamic operator
  return ncclSuccess;
}
ncclResult_t ncclRedOpDestroy(ncclRedOp_t, ncclComm_t) { return ncclSuccess; }

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t,
                        int root, ncclComm_t comm, cudaStream_t) {
  const bool isRoot = comm != nullptr && get(comm)->rank == root;
  return dataCall("ncclReduce", comm, count, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff", isRoot}},
                  {root, recvbuff, sendbuff}, [=](size_t bytes, const FakeComm&) {
                    if (isRoot) copy(recvbuff, sendbuff, bytes);
                  });
}
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ::ncclBroadcast(buff, buff, count, datatype, root, comm, stream);  // through the exported name, as NCCL does
}
// Every rank copies sendbuff (when it has one: it is only significant at the root) to recvbuff.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclBroadcast", comm, count, datatype, {{recvbuff, "recvbuff"}}, {root, recvbuff, sendbuff},
                  [=](size_t bytes, const FakeComm&) { copy(recvbuff, sendbuff, bytes); });
}
// Float sums come back multiplied by nranks (as if every rank had sent the same data); anything else is a copy.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclAllReduce", comm, count, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff"}},
                  {-1, recvbuff, sendbuff}, [=](size_t bytes, const FakeComm& c) {
                    if (datatype != ncclFloat32 || op != ncclSum) return copy(recvbuff, sendbuff, bytes);
                    for (size_t i = 0; i < count; ++i)
                      static_cast<float*>(recvbuff)[i] = static_cast<const float*>(sendbuff)[i] * c.nranks;
                  });
}
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t, ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclReduceScatter", comm, recvcount, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff"}},
                  {-1, recvbuff, sendbuff}, [=](size_t bytes, const FakeComm&) { copy(recvbuff, sendbuff, bytes); });
}
// nranks copies of sendbuff; in place (sendbuff inside recvbuff) only the rank's own slot overlaps, and copies onto
// itself.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclAllGather", comm, sendcount, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff"}},
                  {-1, recvbuff, sendbuff}, [=](size_t bytes, const FakeComm& c) {
                    for (int r = 0; r < c.nranks; ++r) copy(static_cast<char*>(recvbuff) + r * bytes, sendbuff, bytes);
                  });
}
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t) {
  return dataCall("ncclAlltoAll", comm, count, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff"}},
                  {-1, recvbuff, sendbuff},
                  [=](size_t bytes, const FakeComm& c) { copy(recvbuff, sendbuff, bytes * c.nranks); });
}
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t) {
  const bool isRoot = comm != nullptr && get(comm)->rank == root;
  return dataCall("ncclGather", comm, count, datatype, {{sendbuff, "sendbuff"}, {recvbuff, "recvbuff", isRoot}},
                  {root, recvbuff, sendbuff}, [=](size_t bytes, const FakeComm& c) {
                    if (!isRoot) return;
                    for (int r = 0; r < c.nranks; ++r) copy(static_cast<char*>(recvbuff) + r * bytes, sendbuff, bytes);
                  });
}
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclScatter", comm, count, datatype, {{recvbuff, "recvbuff"}}, {root, recvbuff, sendbuff},
                  [=](size_t bytes, const FakeComm&) { copy(recvbuff, sendbuff, bytes); });
}
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
  return dataCall("ncclSend", comm, count, datatype, {{sendbuff, "sendbuff"}}, {peer, sendbuff, nullptr},
                  [](size_t, const FakeComm&) {});
}
// Fills the buffer with the byte (peer + 1) & 0xff.
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t) {
  return dataCall("ncclRecv", comm, count, datatype, {{recvbuff, "recvbuff"}}, {peer, recvbuff, nullptr},
                  [=](size_t bytes, const FakeComm&) { memset(recvbuff, (peer + 1) & 0xff, bytes); });
}
ncclResult_t ncclGroupStart() {
  ++tGroup.depth;
  return ncclSuccess;
}
// Runs the queued calls in order at the outermost end; the first failure wins; ncclInProgress if any queued call's
// communicator is non-blocking.
ncclResult_t ncclGroupEnd() {
  if (tGroup.depth == 0) return fail(ncclInvalidUsage, "fake-real: ncclGroupEnd: no matching ncclGroupStart");
  if (--tGroup.depth > 0) return ncclSuccess;
  Group group = std::move(tGroup);
  tGroup = Group{};
  ncclResult_t result = ncclSuccess;
  for (auto& op : group.queued) {
    const ncclResult_t res = op();
    if (result == ncclSuccess) result = res;
  }
  return result == ncclSuccess && group.nonBlocking ? ncclInProgress : result;
}
// Ends the group like ncclGroupEnd, without running what it queued (as NCCL: a simulation launches nothing).
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  if (tGroup.depth == 0) return fail(ncclInvalidUsage, "fake-real: ncclGroupSimulateEnd: no matching ncclGroupStart");
  if (simInfo != nullptr) simInfo->estimatedTime = 0.0f;
  if (--tGroup.depth == 0) tGroup = Group{};
  return ncclSuccess;
}

// ---- device-API host helpers: valid, inert answers ----------------------------------------------------------------
ncclResult_t ncclDevCommCreate(ncclComm_t, ncclDevCommRequirements_t const*, ncclDevComm_t* outDevComm) {
  if (outDevComm != nullptr) *outDevComm = ncclDevComm_t{};
  return ncclSuccess;
}
ncclResult_t ncclDevCommDestroy(ncclComm_t, ncclDevComm_t const*) { return ncclSuccess; }
ncclTeam_t team(ncclComm_t comm) {
  if (comm == nullptr) return ncclTeam_t{};
  return ncclTeam_t{get(comm)->nranks, get(comm)->rank, 1};
}
ncclTeam_t ncclTeamWorld(ncclComm_t comm) { return team(comm); }
ncclTeam_t ncclTeamLsa(ncclComm_t comm) { return team(comm); }
ncclTeam_t ncclTeamRail(ncclComm_t comm) { return ncclTeam_t{1, 0, comm ? get(comm)->nranks : 1}; }
int ncclTeamRankToWorld(ncclComm_t, ncclTeam_t, int rank) { return rank; }
int ncclTeamRankToLsa(ncclComm_t, ncclTeam_t, int rank) { return rank; }
template <typename Handle>
ncclResult_t requirement(Handle* outHandle, ncclDevResourceRequirements_t* outReq) {
  if (outHandle != nullptr) *outHandle = Handle{};
  if (outReq != nullptr) *outReq = ncclDevResourceRequirements_t{};
  return ncclSuccess;
}
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t, int, ncclLsaBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq) {
  return requirement(outHandle, outReq);
}
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam_t, int, ncclGinBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq) {
  return requirement(outHandle, outReq);
}
int ncclLLA2ACalcSlots(int maxElts, int) { return maxElts; }
ncclResult_t ncclLLA2ACreateRequirement(int, int, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  return requirement(outHandle, outReq);
}
void ncclResetDebugInitInternal() {}

}  // namespace impl
}  // namespace fake

// ---- the exports: count, then run the implementation ---------------------------------------------------------------
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // ncclResetDebugInit is deprecated but exported

#define FAKE_ALIAS_1(ret, name, params) \
  extern "C" __attribute__((visibility("default"), alias(#name))) ret p##name params;
#define FAKE_ALIAS_0(ret, name, params)
#define NCCL_FAKE_API(ret, name, params, args, prof)                        \
  extern "C" __attribute__((visibility("default"), weak)) ret name params { \
    ++fake::gCalls[fake::k_##name];                                         \
    return fake::impl::name args;                                           \
  }                                                                         \
  FAKE_ALIAS_##prof(ret, name, params)
#include "nccl_api.def"
#undef NCCL_FAKE_API

#pragma GCC diagnostic pop

extern "C" __attribute__((visibility("default"))) int fakeRealNcclCalls(const char* name) {
  if (name == nullptr) return -1;
  if (name[0] == 'p' && strncmp(name + 1, "nccl", 4) == 0) ++name;
  for (int i = 0; i < fake::kFnCount; ++i)
    if (strcmp(name, fake::kFnNames[i]) == 0) return fake::gCalls[i].load();
  return -1;
}
extern "C" __attribute__((visibility("default"))) void fakeRealNcclReset(void) {
  for (auto& calls : fake::gCalls) calls = 0;
  fake::gLastError = "";
  fake::tGroup = fake::Group{};
}
extern "C" __attribute__((visibility("default"))) int fakeRealNcclIsFake(void) { return 1; }

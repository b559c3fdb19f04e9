// SPDX-License-Identifier: Apache-2.0
// Record mode. The handles the job sees are the real NCCL's own (nothing is wrapped), so forwarding is one indirect
// call; capture adds a registry lookup, two events from a pool and a queued record per call (with the kernel clock,
// no events: NCCL's own kernel timestamps reach timing::KernelClock through its profiler plugin interface).
// Functions that make no communication are forwarded by generated code; the ones listed in RANKLENS_CAPTURED are
// written out below.
#include "nccl_fake/record.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "nccl_fake/comm_config.h"
#include "nccl_fake/profiler_plugin.h"
#include "nccl_fake/real_nccl.h"
#include "nccl_fake/runtime.h"
#include "ranklens/call_recorder.h"
#include "ranklens/kernel_clock.h"
#include "ranklens/record_device.h"

namespace nccl_fake {
namespace record {

using ranklens::events::Op;
using ranklens::trace::RecordType;
using ranklens::timing::CallRecorder;
using ranklens::timing::KernelClock;
using ranklens::timing::PayloadRequest;
using real::ApiId;

// The functions with capture code below; every other one is a plain generated forwarder.
#define RANKLENS_CAPTURED(X)                                                                                        \
  X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable) X(ncclCommInitAll) X(ncclCommSplit)     \
  X(ncclCommShrink) X(ncclCommFinalize) X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommRevoke)                       \
  X(ncclCommGetAsyncError) X(ncclAllReduce) X(ncclBroadcast) X(ncclBcast) X(ncclReduce) X(ncclAllGather)            \
  X(ncclReduceScatter) X(ncclAlltoAll) X(ncclGather) X(ncclScatter) X(ncclSend) X(ncclRecv) X(ncclGroupStart)       \
  X(ncclGroupEnd) X(ncclGroupSimulateEnd) X(ncclGetLastError) X(ncclGetErrorString)

namespace {

constexpr bool captured(ApiId id) {
  switch (id) {
#define RANKLENS_CAPTURED_CASE(name) case ApiId::name:
    RANKLENS_CAPTURED(RANKLENS_CAPTURED_CASE)
#undef RANKLENS_CAPTURED_CASE
    return true;
    default: return false;
  }
}

constexpr const char* kApiNames[] = {
#define NCCL_FAKE_API(ret, name, params, args, prof) #name,
#include "nccl_api.def"
#undef NCCL_FAKE_API
};

const real::Library& library() { return real::library(Runtime::get().settings().real_nccl); }

// What a function returns when the real NCCL (or this function in it) is unavailable: NCCL's error code for
// ncclResult_t functions, a neutral value otherwise. The reason goes to the log and ncclGetLastError.
template <typename R>
R unavailable(ApiId id, const real::Library& lib) {
  const char* name = kApiNames[static_cast<int>(id)];
  if (!lib.ok) {
    static std::once_flag warned;
    std::call_once(warned, [&] { WARN("%s", lib.error.c_str()); });
    WARN("%s : %s", name, lib.error.c_str());
  } else {
    WARN("%s : not exported by the real NCCL %s (version %d), which this job loads; use an NCCL that has it "
         "(RankLens implements the 2.28.9 API)", name, lib.path.c_str(), lib.version);
  }
  if constexpr (std::is_same_v<R, ncclResult_t>) return lib.ok ? ncclInvalidUsage : ncclSystemError;
  else if constexpr (std::is_same_v<R, const char*>) return "real NCCL unavailable (see the log)";
  else if constexpr (!std::is_void_v<R>) return R{};
}

// Calls the real function, marking this thread as inside the real library (its own calls back into exported
// names come through RankLens uncaptured).
template <ApiId id, typename Fn, typename... A>
auto callReal(A... args) -> decltype(std::declval<Fn>()(args...)) {
  using R = decltype(std::declval<Fn>()(args...));
  const real::Library& lib = library();
  auto fn = reinterpret_cast<Fn>(lib.functions[static_cast<int>(id)]);
  if (!lib.ok || fn == nullptr) return unavailable<R>(id, lib);
  real::RealCallScope scope;
  return fn(args...);
}
#define REAL(name) callReal<ApiId::name, decltype(&::name)>

bool accepted(ncclResult_t r) { return r == ncclSuccess || r == ncclInProgress; }

// ------------------------------------------------------------------------------------------------ process state

struct RecComm {
  ncclComm_t handle = nullptr;
  uint64_t id = 0;
  int nranks = -1, rank = -1, cudaDev = 0;
  int64_t parentId = -1, color = -1, key = -1;
  std::string how, name;
  bool blocking = true;
  // Held from reading a call's sequence number to committing it, across the real call: two threads issuing on one
  // communicator (NCCL leaves their order to the caller) must not record the same number twice. Guards the
  // sequences (only recordCall touches them).
  std::mutex issueMu;
  uint64_t collSeq = 0;
  std::map<int, uint64_t> sendSeq, recvSeq;
  std::mutex mu;  // guards everything below
  bool announced = false;
  std::vector<std::function<void()>> whenComplete;  // non-blocking: finish once the communicator reports success
};

struct State {
  std::once_flag recorderOnce;
  std::unique_ptr<ranklens::device::RecordDevice> device;
  std::unique_ptr<CallRecorder> recorder;
  std::unique_ptr<KernelClock> kernelClock;  // timing_clock: kernel, once NCCL_PROFILER_PLUGIN points here
  std::shared_mutex commsMu;
  std::unordered_map<ncclComm_t, std::shared_ptr<RecComm>> comms;
  std::atomic<int64_t> step{-1};
  uint32_t opMask = 0;  // payload_ops as a bit set (0: all)
};

State& state() {
  static State* s = new State();  // never destroyed: NCCL is called from atexit handlers and static destructors
  return *s;
}

std::string describeWriter(const ranklens::config::Settings& s, const real::Library& lib) {
  std::string payloads = ranklens::config::toString(s.payloads);
  if (s.payloads == ranklens::config::Payloads::kSmall) payloads += " (<= " + std::to_string(s.payload_max_bytes) + " B)";
  return "ranklens libnccl.so.2 record: real NCCL " + lib.path + " (" + std::to_string(lib.version) +
         "), payloads " + payloads;
}

// Ranks sharing this host, as the launcher says (torchrun, Open MPI, MPICH/Hydra); 1 when none does.
int localRanks() { return ranklens::config::readContext().local_ranks; }

// Created with the first communicator: by then the job has chosen its GPU, and a delay is harmless.
CallRecorder* recorder() {
  State& st = state();
  std::call_once(st.recorderOnce, [&st] {
    Runtime& rt = Runtime::get();
    const auto& s = rt.settings();
    std::string why;
    ranklens::device::CopyOptions copies;
    copies.kernelMaxBytes = s.payload_copy_kernel_bytes;
    copies.kernelMaxBytesOneRank = s.payload_copy_kernel_bytes_one_rank;
    copies.highPriority = s.payload_copy_priority == ranklens::config::CopyPriority::kHigh;
    if (s.device != ranklens::config::DeviceKind::kHost)
      st.device = ranklens::device::makeCudaRecordDevice(&why, copies);
    if (!st.device) {
      if (s.device == ranklens::config::DeviceKind::kCuda)
        WARN("record: device 'cuda' requested but no usable GPU (%s); timing uses host clocks", why.c_str());
      st.device = ranklens::device::makeHostRecordDevice(copies);
    }
    for (const std::string& op : s.payload_ops)
      for (int i = 0; i <= static_cast<int>(Op::kRecv); ++i)
        if (op == ranklens::events::opName(static_cast<Op>(i))) st.opMask |= 1u << i;

    CallRecorder::Options options;
    options.payloads = s.payloads != ranklens::config::Payloads::kNone;
    const bool autoStaging = s.staging_bytes == ranklens::config::Settings::kAutoStagingBytes;
    options.stagingBytes = autoStaging ? ranklens::timing::autoStagingBytes(s.payloads == ranklens::config::Payloads::kAll,
                                                                            ranklens::trace::hostMemoryBytes(),
                                                                            localRanks())
                                       : s.staging_bytes;
    options.stagingLeastBytes = autoStaging ? 64u << 20 : 0;  // auto takes less where the host will not pin that much
    options.waitWhenFull = s.staging_full == ranklens::config::StagingFull::kWait;
    if (s.payloads == ranklens::config::Payloads::kAll) {
      // Every payload stored: keep room for the control values a timing replay restores (staging full of gradients
      // would otherwise skip them under skip, or hold them up under wait).
      options.controlBytes = s.payload_max_bytes;
      options.controlReserveBytes = ranklens::timing::kControlReserveBytes;
    }
    options.timeCaptured = s.captured_timing == ranklens::config::CapturedTiming::kEvents;
    options.pollMicros = s.timing_poll_us;
    // The trace may have been opened before this first communicator (a stage marker came first): name the GPU now.
    if (auto* writer = rt.existingWriter()) {
      std::string gpuName, gpuUuid;
      st.device->describe(&gpuName, &gpuUuid);
      writer->updateManifest([&](ranklens::trace::Manifest* m) {
        m->gpu_name = gpuName;
        m->gpu_uuid = gpuUuid;
      });
    }
    st.recorder = std::make_unique<CallRecorder>(
        *st.device, options, [](const ranklens::trace::Timing& t) { Runtime::get().emit(RecordType::kTiming, t); },
        [](const ranklens::trace::PayloadRef& ref, const void* data, size_t bytes, std::function<void()> release) {
          Runtime::get().emitPayload(ref, data, bytes, std::move(release));
        });
    std::string error;
    if (!st.recorder->prepareStaging(&error))
      WARN("record: cannot allocate %llu bytes of pinned staging memory (%s); payloads are skipped and counted. "
           "Lower RANKLENS_STAGING_BYTES", static_cast<unsigned long long>(options.stagingBytes), error.c_str());
    else if (st.recorder->stagingBytes() < options.stagingBytes)
      WARN("record: %llu MiB of pinned staging memory could not be allocated; using %llu MiB (staging_bytes: auto)",
           static_cast<unsigned long long>(options.stagingBytes >> 20),
           static_cast<unsigned long long>(st.recorder->stagingBytes() >> 20));
    rt.setBeforeClose([] { flush(); });
    INFO(kSubInit | kSubRanklens, "record: recorder ready on the %s device, payloads %s, staging %llu bytes%s",
         st.device->name(), ranklens::config::toString(s.payloads),
         static_cast<unsigned long long>(st.recorder->stagingBytes()), autoStaging ? " (auto)" : "");
  });
  return st.recorder.get();
}

std::shared_ptr<RecComm> findComm(ncclComm_t handle) {
  State& st = state();
  std::shared_lock<std::shared_mutex> lock(st.commsMu);
  auto it = st.comms.find(handle);
  return it == st.comms.end() ? nullptr : it->second;
}

void forgetComm(ncclComm_t handle) {
  State& st = state();
  std::unique_lock<std::shared_mutex> lock(st.commsMu);
  st.comms.erase(handle);
}

// Writes the CommInit record once the communicator's size and rank are known (a non-blocking split learns them
// when the real NCCL reports the communicator ready). Caller holds comm->mu.
void announceLocked(RecComm& comm) {
  if (comm.announced) return;
  if (comm.nranks < 0) {
    int n = -1, r = -1;
    if (REAL(ncclCommCount)(comm.handle, &n) != ncclSuccess || REAL(ncclCommUserRank)(comm.handle, &r) != ncclSuccess)
      return;  // not ready yet
    comm.nranks = n;
    comm.rank = r;
  }
  comm.announced = true;
  ranklens::events::CommInit event;
  event.commId = comm.id;
  event.nranks = comm.nranks;
  event.rank = comm.rank;
  event.parentId = comm.parentId;
  event.color = comm.color;
  event.key = comm.key;
  event.how = comm.how;
  event.name = comm.name;
  // World ranks are known locally only for root communicators; a split's members follow from every rank's lineage.
  if (comm.parentId < 0)
    for (int i = 0; i < comm.nranks; ++i) event.worldRanks.push_back(i);
  event.cudaDev = comm.cudaDev;
  event.blocking = comm.blocking;
  event.timeNs = monotonicNs();
  Runtime::get().emit(RecordType::kCommInit, event, comm.rank);
  INFO(kSubInit | kSubRanklens, "record: %s comm %p id %lu rank %d nranks %d cudaDev %d%s%s", comm.how.c_str(),
       static_cast<void*>(comm.handle), static_cast<unsigned long>(comm.id), comm.rank, comm.nranks, comm.cudaDev,
       comm.name.empty() ? "" : " name ", comm.name.c_str());
}

// Registers a communicator the real NCCL accepted. `nranks` < 0: ask the real NCCL once it is ready.
void registerComm(ncclComm_t handle, int nranks, int rank, int cudaDev, const char* how, const RecComm* parent,
                  int64_t color, int64_t key, const ncclConfig_t* config, ncclResult_t result) {
  if (handle == nullptr) return;
  State& st = state();
  CallRecorder* rec = recorder();
  auto comm = std::make_shared<RecComm>();
  comm->handle = handle;
  comm->id = Runtime::get().nextCommId();
  comm->nranks = nranks;
  comm->rank = rank;
  comm->cudaDev = cudaDev;
  comm->how = how;
  comm->parentId = parent ? static_cast<int64_t>(parent->id) : -1;
  comm->color = color;
  comm->key = key;
  CommConfig parsed;
  if (parent) parsed.blocking = parent->blocking;  // NCCL: a split inherits the parent's config unless given one
  if (parseCommConfig(config, &parsed) == ncclSuccess) {
    applyBlockingEnv(&parsed);
    comm->blocking = parsed.blocking != 0;
    comm->name = parsed.name;
  }
  rec->prepareDevice(cudaDev);
  // Registered after this library's CUDA runtime created its first events (prepareDevice), so that it runs before
  // that runtime's own exit handler: the background thread must not touch a torn-down runtime.
  static std::once_flag exitHandler;
  std::call_once(exitHandler, [] {
    atexit([] {
      // Captured calls whose graph never completed a launch: written now, without a duration.
      if (CallRecorder* r = state().recorder.get()) r->finishCaptured();
      flush();
      if (KernelClock* clock = state().kernelClock.get()) {
        clock->abandonPending();  // written with duration -1 and counted, never silently missing
        flush();
      }
      if (CallRecorder* r = state().recorder.get()) r->stop();
    });
  });
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (result == ncclSuccess || nranks >= 0) announceLocked(*comm);
  }
  std::unique_lock<std::shared_mutex> lock(st.commsMu);
  st.comms[handle] = std::move(comm);
}

int currentDevice() {
  int dev = 0;
  recorder();
  if (state().device->currentDevice(&dev) != 0) dev = 0;
  return dev;
}

// The real NCCL reported a non-blocking communicator ready: announce it and finish its deferred calls.
void completed(const std::shared_ptr<RecComm>& comm) {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    announceLocked(*comm);
    work.swap(comm->whenComplete);
  }
  for (auto& w : work) w();
}

// ------------------------------------------------------------------------------------------------ payload policy

bool wantPayload(const RecComm& comm, Op op, uint64_t seq, uint64_t bytes) {
  const auto& s = Runtime::get().settings();
  using ranklens::config::Payloads;
  if (s.payloads == Payloads::kNone || bytes == 0 || op == Op::kSend) return false;
  if (s.payloads == Payloads::kSmall && bytes > s.payload_max_bytes) return false;
  const uint32_t mask = state().opMask;
  if (mask != 0 && (mask & (1u << static_cast<int>(op))) == 0) return false;
  if (!s.payload_comms.empty() &&
      std::find_if(s.payload_comms.begin(), s.payload_comms.end(), [&](const std::string& c) {
        return c == std::to_string(comm.id) || (!comm.name.empty() && c == comm.name);
      }) == s.payload_comms.end())
    return false;
  if (!s.payload_steps.all() && !s.payload_steps.contains(state().step.load(std::memory_order_relaxed))) return false;
  return s.payload_seqs.contains(static_cast<long long>(seq));
}

// ------------------------------------------------------------------------------------------------ calls and groups

struct CallArgs {
  Op op;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t datatype;
  int redop;  // -1 when the op has none
  int root;   // root, or peer for Send/Recv; -1 otherwise
  ncclComm_t comm;
  cudaStream_t stream;
};

// One stream's share of the current group: timed as a unit from the first call to the group's end, by the kernel
// clock while every call on it can be (kspan), else by events (span).
struct StreamSpan {
  cudaStream_t stream = nullptr;
  ranklens::trace::Timing identity;  // of its first call
  CallRecorder::Span* span = nullptr;
  KernelClock::Span* kspan = nullptr;
  std::shared_ptr<RecComm> comm;  // of the first call (non-blocking groups finish when it reports success)
  std::vector<PayloadRequest> payloads;
};

struct GroupState {
  int depth = 0;
  uint64_t id = 0;
  uint32_t calls = 0;
  std::vector<StreamSpan> streams;
};

GroupState& group() {
  static thread_local GroupState g;
  return g;
}

// Finishes a span now, or when its non-blocking communicator reports success.
void finish(CallRecorder* rec, ncclResult_t result, const std::shared_ptr<RecComm>& comm, CallRecorder::Span* span,
            std::vector<PayloadRequest> payloads) {
  if (span == nullptr) {
    if (!payloads.empty()) rec->countCapturedPayloads(payloads.size());
    return;
  }
  if (result == ncclInProgress && comm) {
    std::lock_guard<std::mutex> lock(comm->mu);
    // Its kernels are enqueued once the communicator reports success.
    comm->whenComplete.push_back([rec, span, payloads = std::move(payloads)] { rec->end(span, payloads); });
    return;
  }
  rec->end(span, payloads);
}

template <typename RealCall>
ncclResult_t recordCall(const CallArgs& a, RealCall&& realCall) {
  GroupState& g = group();
  std::shared_ptr<RecComm> comm = findComm(a.comm);
  if (!comm) {
    // Not created through this library (or already destroyed): forward, and let the real NCCL judge the handle.
    static std::once_flag warned;
    std::call_once(warned, [&] {
      INFO(kSubColl | kSubRanklens, "record: a call on communicator %p, which RankLens did not see created, is "
           "forwarded without being recorded", static_cast<void*>(a.comm));
    });
    return realCall();
  }
  CallRecorder* rec = recorder();
  const bool p2p = a.op == Op::kSend || a.op == Op::kRecv;
  ranklens::events::Call event;
  std::unique_lock<std::mutex> issue(comm->issueMu);
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    announceLocked(*comm);
    event.nranks = comm->nranks;
    event.rank = comm->rank;
  }
  event.seq = a.op == Op::kSend ? comm->sendSeq[a.root] : a.op == Op::kRecv ? comm->recvSeq[a.root] : comm->collSeq;
  event.commId = comm->id;
  event.op = static_cast<int>(a.op);
  event.datatype = a.datatype;
  event.count = a.count;
  event.rootOrPeer = a.root;
  event.redop = a.redop;
  event.stream = reinterpret_cast<uint64_t>(a.stream);
  event.groupId = g.depth > 0 ? g.id : 0;
  event.bytes = ranklens::events::receivedBytes(a.op, a.count, a.datatype, event.nranks, event.rank, a.root);
  event.timeNs = monotonicNs();

  const ranklens::trace::Timing identity = ranklens::trace::timingOf(event);

  // The kernel clock times a call NCCL runs as one task of its own kernel on a blocking communicator of several
  // ranks. A payload it stores goes through a span of the call recorder that times nothing (beginPayloads).
  const bool wantsPayload = wantPayload(*comm, a.op, event.seq, event.bytes);
  KernelClock* clock = state().kernelClock.get();
  const char* func = clock != nullptr ? ranklens::timing::kernelClockFunc(event.op) : nullptr;
  const bool kernelTimed = func != nullptr && comm->blocking && event.nranks > 1 && a.count > 0;
  KernelClock::Task task;
  if (kernelTimed) {
    task.func = func;
    task.bytes = a.count * ranklens::events::datatypeBytes(a.datatype);
    task.root = p2p || a.op == Op::kBroadcast || a.op == Op::kReduce ? a.root : -1;
    task.buffer = a.op == Op::kSend ? a.sendbuff : a.recvbuff;
  }

  // Outside a group the call is launched now: bracket it. Inside, the launch happens at the outermost ncclGroupEnd.
  CallRecorder::Span* span = nullptr;
  KernelClock::Span* kspan = nullptr;
  if (g.depth == 0) {
    if (!kernelTimed) {
      span = rec->begin(comm->cudaDev, a.stream, identity);
    } else if (!rec->reportCaptured(a.stream, identity)) {
      kspan = clock->open(identity);
      clock->expect(kspan, comm->id, event.rank, task);
      if (wantsPayload) span = rec->beginPayloads(comm->cudaDev, a.stream, identity);
      clock->beginLaunch();
    }
  }
  const ncclResult_t result = realCall();
  if (kspan != nullptr) clock->endLaunch(accepted(result));
  if (!accepted(result)) {
    rec->abandon(span);
    return result;
  }
  event.hostNs = monotonicNs() - event.timeNs;
  if (a.op == Op::kSend) comm->sendSeq[a.root]++;  // under issueMu, held since the sequence was read
  else if (a.op == Op::kRecv) comm->recvSeq[a.root]++;
  else comm->collSeq++;
  issue.unlock();
  Runtime::get().emit(RecordType::kCall, event);

  std::vector<PayloadRequest> payloads;
  if (wantsPayload) {
    PayloadRequest request;
    request.ref.commId = event.commId;
    request.ref.seq = event.seq;
    request.ref.op = event.op;
    request.ref.datatype = event.datatype;
    request.ref.count = event.bytes / std::max<size_t>(ranklens::events::datatypeBytes(a.datatype), 1);
    request.ref.peer = identity.peer;
    request.src = a.recvbuff;
    request.bytes = event.bytes;
    request.oneRank = comm->nranks == 1;
    payloads.push_back(request);
  }
  if (g.depth == 0) {
    finish(rec, result, comm->blocking ? nullptr : comm, span, std::move(payloads));
    return result;
  }
  g.calls++;
  auto it = std::find_if(g.streams.begin(), g.streams.end(), [&](const StreamSpan& s) { return s.stream == a.stream; });
  if (it == g.streams.end()) {
    StreamSpan s;
    s.stream = a.stream;
    s.comm = comm;
    s.identity = identity;
    if (!kernelTimed) s.span = rec->begin(comm->cudaDev, a.stream, identity);
    else if (!rec->reportCaptured(a.stream, identity)) s.kspan = clock->open(identity);
    g.streams.push_back(std::move(s));
    it = std::prev(g.streams.end());
  } else if (it->kspan != nullptr && !kernelTimed) {
    // A call the kernel clock cannot time joined this stream: its whole share of the group moves to events (no GPU
    // work of the group is enqueued before its end, so the start event still precedes all of it), which also carry
    // its payloads.
    clock->cancel(it->kspan);
    it->kspan = nullptr;
    rec->abandon(it->span);
    it->span = rec->begin(comm->cudaDev, a.stream, it->identity);
  }
  if (it->kspan != nullptr) clock->expect(it->kspan, comm->id, event.rank, task);
  if (it->kspan != nullptr && it->span == nullptr && !payloads.empty())
    it->span = rec->beginPayloads(comm->cudaDev, a.stream, it->identity);
  for (auto& p : payloads) it->payloads.push_back(p);
  return result;
}

// The outermost group end (or simulation) returned `result`: finish or drop every stream's span.
void closeGroup(ncclResult_t result, bool launched, int64_t hostNs) {
  GroupState& g = group();
  CallRecorder* rec = state().recorder.get();
  for (StreamSpan& s : g.streams) {
    if (rec == nullptr) break;
    if (launched && accepted(result)) {
      finish(rec, result, s.comm && !s.comm->blocking ? s.comm : nullptr, s.span, std::move(s.payloads));
    } else {
      rec->abandon(s.span);
    }
  }
  Runtime::get().endGroup(g.id, g.calls, result, hostNs);
  g.streams.clear();
  g.calls = 0;
  g.id = 0;
}

}  // namespace

// ------------------------------------------------------------------------------------------------ entry points

namespace {
// Set before any record can be written: a stage marker may open the trace before the first communicator exists,
// and a writer opened without these options would drop call records behind a stalled payload stream.
void installWriterSetup() {
  Runtime& rt = Runtime::get();
  const auto& s = rt.settings();
  rt.setWriterSetup([&s](ranklens::trace::Manifest* manifest, ranklens::trace::WriterOptions* writer) {
    const real::Library& lib = library();
    manifest->nccl_version = lib.version;
    if (auto* device = state().device.get()) device->describe(&manifest->gpu_name, &manifest->gpu_uuid);
    manifest->writer = describeWriter(s, lib);
    if (s.payloads != ranklens::config::Payloads::kNone) {
      // Full capture spends these threads compressing and writing, about 0.8-0.9 CPU-s per GB of payload (GPT-2 small
      // DDP on one H200): payload_threads and payload_zstd_level.
      const bool controlValuesOnly =
          s.payloads == ranklens::config::Payloads::kSmall && s.payload_max_bytes <= (1u << 20);
      writer->compressionThreads =
          s.payload_threads > 0
              ? s.payload_threads
              : ranklens::trace::autoCompressionThreads(manifest->cpus, localRanks(), controlValuesOnly);
      writer->zstdLevel = s.payload_zstd_level;
      using WriterShuffle = ranklens::trace::WriterOptions::Shuffle;
      writer->shuffle = s.payload_shuffle == ranklens::config::PayloadShuffle::kOff  ? WriterShuffle::kOff
                        : s.payload_shuffle == ranklens::config::PayloadShuffle::kOn ? WriterShuffle::kAlways
                                                                                     : WriterShuffle::kAuto;
      writer->queueBytes = std::max<size_t>(writer->queueBytes, s.payload_queue_bytes);
      writer->recordReserveBytes = 16u << 20;  // a stalled payload stream never crowds out call records
    }
  });
}

// timing_clock: kernel. Before the real NCCL creates its first communicator, which is when it loads its profiler
// plugin: this library, through NCCL_PROFILER_PLUGIN.
void installKernelClock() {
  if (Runtime::get().settings().timing_clock != ranklens::config::TimingClock::kKernel) return;
  std::string why;
  if (!profiler::install(&why)) {
    WARN("record: timing_clock kernel is unavailable (%s); durations come from CUDA events", why.c_str());
    return;
  }
  State& st = state();
  st.kernelClock = std::make_unique<KernelClock>(
      [](const ranklens::trace::Timing& t) { Runtime::get().emit(RecordType::kTiming, t); });
  profiler::attach(st.kernelClock.get());
  INFO(kSubInit | kSubRanklens, "record: durations from NCCL's kernel timestamps (profiler plugin %s)",
       getenv("NCCL_PROFILER_PLUGIN"));
}
}  // namespace

bool active() {
  static const bool on = [] {
    const bool record = Runtime::get().recordMode();
    if (record) {
      installWriterSetup();
      installKernelClock();
    }
    return record;
  }();
  return on;
}

void noteStage(int64_t step) { state().step.store(step, std::memory_order_relaxed); }

// Payloads lost to a full or too small staging area, or a job held back by it, are said at the end (and again only when more were
// lost since): the counters alone would leave a recording that silently lacks a third of its payloads (GPT-2 small
// DDP with payloads all and a 256 MiB staging under staging_full: skip).
void warnOfStaging(const ranklens::timing::RecorderStats& s, size_t stagingBytes, size_t controlReserveBytes) {
  static std::mutex mu;
  static uint64_t skippedSaid = 0, tooLargeSaid = 0, waitedSaid = 0;
  std::lock_guard<std::mutex> lock(mu);
  auto sizeText = [](size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
  };
  const std::string staging = sizeText(stagingBytes);
  if (s.payloadsSkippedFull > skippedSaid) {
    skippedSaid = s.payloadsSkippedFull;
    WARN("record: %llu of %llu payloads were skipped because staging (staging_bytes, %s) was full: %s",
         static_cast<unsigned long long>(s.payloadsSkippedFull),
         static_cast<unsigned long long>(s.payloadsSkippedFull + s.payloadsStaged), staging.c_str(),
         ranklens::trace::advice::kStagingFull);
  }
  if (s.payloadsSkippedTooLarge > tooLargeSaid) {
    tooLargeSaid = s.payloadsSkippedTooLarge;
    // With payloads: all a larger payload may not take the room kept for control values: say so where it is kept.
    const std::string kept = controlReserveBytes == 0 ? std::string()
                             : ", less the " + sizeText(controlReserveBytes) + " kept for payloads up to payload_max_bytes";
    WARN("record: %llu payloads larger than all of staging (staging_bytes, %s%s) were skipped: %s",
         static_cast<unsigned long long>(s.payloadsSkippedTooLarge), staging.c_str(), kept.c_str(),
         ranklens::trace::advice::kStagingTooSmall);
  }
  if (s.waitsForStaging > waitedSaid) {
    waitedSaid = s.waitsForStaging;
    INFO(kSubInit | kSubRanklens, "record: the job waited %.1f ms in all for room in staging (%llu times; staging_bytes %s)",
         s.stagingWaitNs / 1e6, static_cast<unsigned long long>(s.waitsForStaging), staging.c_str());
  }
}

void flush() {
  CallRecorder* rec = state().recorder.get();
  if (rec == nullptr) {  // no communicator yet: stage markers may still be queued
    Runtime::get().flushEvents();
    return;
  }
  if (!rec->drain(2'000'000'000) && rec->stats().pending > 0)
    WARN("record: GPU durations still pending after 2 s; they are not in the trace");
  if (KernelClock* clock = state().kernelClock.get()) {
    if (!clock->drain(2'000'000'000))
      WARN("record: %llu kernel-clock durations still pending after 2 s (NCCL has not reported all their kernel "
           "channels)", static_cast<unsigned long long>(clock->stats().pending));
    if (auto* writer = Runtime::get().writer()) {
      const ranklens::timing::KernelClockStats k = clock->stats();
      const std::pair<const char*, uint64_t> values[] = {
          {"kernel_clock_timed", k.timed},
          {ranklens::trace::counter::kKernelClockUnmatched, k.unmatched},
          {ranklens::trace::counter::kKernelClockIncomplete, k.incomplete},
          {"kernel_clock_foreign_tasks", k.foreignTasks}};
      for (const auto& [name, value] : values) writer->setCounter(name, value);
    }
  }
  rec->sampleDeviceMemory();
  if (auto* writer = Runtime::get().writer()) {
    const ranklens::timing::RecorderStats s = rec->stats();
    const std::pair<const char*, uint64_t> values[] = {
        {"timings_measured", s.timed},
        {"timings_captured_in_graph", s.captured},
        {"timings_captured_measured", s.capturedTimed},
        {ranklens::trace::counter::kTimingErrors, s.timingErrors},
        {"payloads_staged", s.payloadsStaged},
        {"payload_bytes_staged", s.payloadBytesStaged},
        {ranklens::trace::counter::kPayloadsSkippedStagingFull, s.payloadsSkippedFull},
        {ranklens::trace::counter::kPayloadsSkippedTooLarge, s.payloadsSkippedTooLarge},
        {ranklens::trace::counter::kPayloadsSkippedCaptured, s.payloadsSkippedCaptured},
        {ranklens::trace::counter::kPayloadCopyFailures, s.payloadsFailed},
        {"payloads_copy_engine", s.payloadsByCopyEngine},
        {ranklens::trace::counter::kStagingWaits, s.waitsForStaging},
        {ranklens::trace::counter::kStagingWaitNs, s.stagingWaitNs},
    };
    for (const auto& [name, value] : values) writer->setCounter(name, value);
    warnOfStaging(s, rec->stagingBytes(), rec->controlReserveBytes());
    if (s.deviceMemoryTotal > 0) {
      writer->setCounter(ranklens::trace::counter::kDeviceMemoryTotal, s.deviceMemoryTotal);
      writer->setCounter(ranklens::trace::counter::kDeviceMemoryLeastFree, s.deviceMemoryLeastFree);
    }
  }
  Runtime::get().flushEvents();
}

namespace capture {
#define NCCL_FAKE_API(ret, name, params, args, prof) ret name params;
#include "nccl_api.def"
#undef NCCL_FAKE_API

namespace {
// A recording whose trace cannot be written would be lost whole: a communicator is refused instead, before the real
// NCCL creates it, with the reason in ncclGetLastError. (`ranklens record` checks its directory before starting.)
ncclResult_t refuseWithoutTrace(int rankHint) {
  recorder();  // first: its device describes the GPU in the manifest written when the trace opens
  if (Runtime::get().traceWritable(rankHint)) return ncclSuccess;
  const std::string why = lastErrorText();
  WARN("record: %s; no communicator is created, so that the job does not run unrecorded: point RANKLENS_TRACE_DIR "
       "(trace_dir) at a new directory", why.c_str());
  return ncclInvalidUsage;
}
}  // namespace

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  NCCLCHECK(refuseWithoutTrace(rank));
  ncclResult_t ret = REAL(ncclCommInitRank)(comm, nranks, commId, rank);
  if (accepted(ret) && comm) registerComm(*comm, nranks, rank, currentDevice(), "init", nullptr, -1, -1, nullptr, ret);
  return ret;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config) {
  NCCLCHECK(refuseWithoutTrace(rank));
  ncclResult_t ret = REAL(ncclCommInitRankConfig)(comm, nranks, commId, rank, config);
  if (accepted(ret) && comm) registerComm(*comm, nranks, rank, currentDevice(), "init", nullptr, -1, -1, config, ret);
  return ret;
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  NCCLCHECK(refuseWithoutTrace(myrank));
  ncclResult_t ret = REAL(ncclCommInitRankScalable)(newcomm, nranks, myrank, nId, commIds, config);
  if (accepted(ret) && newcomm)
    registerComm(*newcomm, nranks, myrank, currentDevice(), "initScalable", nullptr, -1, -1, config, ret);
  return ret;
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  NCCLCHECK(refuseWithoutTrace(0));
  ncclResult_t ret = REAL(ncclCommInitAll)(comms, ndev, devlist);
  if (accepted(ret) && comms)
    for (int i = 0; i < ndev; ++i)
      registerComm(comms[i], ndev, i, devlist ? devlist[i] : i, "initAll", nullptr, -1, -1, nullptr, ret);
  return ret;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  ncclResult_t ret = REAL(ncclCommSplit)(comm, color, key, newcomm, config);
  if (accepted(ret) && newcomm && *newcomm) {
    auto parent = findComm(comm);
    registerComm(*newcomm, -1, -1, parent ? parent->cudaDev : currentDevice(), "split", parent.get(), color, key,
                 config, ret);
  }
  return ret;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  ncclResult_t ret = REAL(ncclCommShrink)(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
  if (accepted(ret) && newcomm && *newcomm) {
    auto parent = findComm(comm);
    registerComm(*newcomm, -1, -1, parent ? parent->cudaDev : currentDevice(), "shrink", parent.get(), -1, -1,
                 config, ret);
  }
  return ret;
}

namespace {
// Destroy, abort, finalize, revoke: durations still in flight are collected first (the GPU work is still valid).
template <typename RealEnd>
ncclResult_t endComm(ncclComm_t comm, const char* how, bool forget, RealEnd&& realEnd) {
  auto rc = findComm(comm);
  if (rc) flush();
  ncclResult_t ret = realEnd();
  if (rc && accepted(ret)) {
    ranklens::events::CommEnd event;
    event.commId = rc->id;
    event.how = how;
    event.timeNs = monotonicNs();
    Runtime::get().emit(RecordType::kCommEnd, event);
    if (forget) forgetComm(comm);  // the handle may be reused by a later communicator
  }
  return ret;
}
}  // namespace

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return endComm(comm, "finalize", false, [&] { return REAL(ncclCommFinalize)(comm); });
}
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return endComm(comm, "destroy", true, [&] { return REAL(ncclCommDestroy)(comm); });
}
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return endComm(comm, "abort", true, [&] { return REAL(ncclCommAbort)(comm); });
}
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return endComm(comm, "revoke", false, [&] { return REAL(ncclCommRevoke)(comm, revokeFlags); });
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  ncclResult_t ret = REAL(ncclCommGetAsyncError)(comm, asyncError);
  if (ret == ncclSuccess && asyncError && *asyncError == ncclSuccess)
    if (auto rc = findComm(comm); rc && !rc->blocking) completed(rc);
  return ret;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kAllReduce, sendbuff, recvbuff, count, datatype, op, -1, comm, stream}, [&] {
    return REAL(ncclAllReduce)(sendbuff, recvbuff, count, datatype, op, comm, stream);
  });
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kBroadcast, sendbuff, recvbuff, count, datatype, -1, root, comm, stream}, [&] {
    return REAL(ncclBroadcast)(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  // Recorded as what it is, an in-place Broadcast (as replay records it).
  return recordCall({Op::kBroadcast, buff, buff, count, datatype, -1, root, comm, stream}, [&] {
    return REAL(ncclBcast)(buff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kReduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream}, [&] {
    return REAL(ncclReduce)(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  });
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kAllGather, sendbuff, recvbuff, sendcount, datatype, -1, -1, comm, stream}, [&] {
    return REAL(ncclAllGather)(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  });
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, -1, comm, stream}, [&] {
    return REAL(ncclReduceScatter)(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  });
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kAlltoAll, sendbuff, recvbuff, count, datatype, -1, -1, comm, stream}, [&] {
    return REAL(ncclAlltoAll)(sendbuff, recvbuff, count, datatype, comm, stream);
  });
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kGather, sendbuff, recvbuff, count, datatype, -1, root, comm, stream}, [&] {
    return REAL(ncclGather)(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return recordCall({Op::kScatter, sendbuff, recvbuff, count, datatype, -1, root, comm, stream}, [&] {
    return REAL(ncclScatter)(sendbuff, recvbuff, count, datatype, root, comm, stream);
  });
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return recordCall({Op::kSend, sendbuff, nullptr, count, datatype, -1, peer, comm, stream}, [&] {
    return REAL(ncclSend)(sendbuff, count, datatype, peer, comm, stream);
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return recordCall({Op::kRecv, nullptr, recvbuff, count, datatype, -1, peer, comm, stream}, [&] {
    return REAL(ncclRecv)(recvbuff, count, datatype, peer, comm, stream);
  });
}

ncclResult_t ncclGroupStart() {
  ncclResult_t ret = REAL(ncclGroupStart)();
  if (ret != ncclSuccess) return ret;
  GroupState& g = group();
  if (g.depth++ == 0) g.id = Runtime::get().beginGroup();
  return ret;
}

ncclResult_t ncclGroupEnd() {
  const int64_t start = monotonicNs();
  GroupState& g = group();
  // The outermost end launches.
  KernelClock* clock = g.depth == 1 ? state().kernelClock.get() : nullptr;
  if (clock != nullptr) clock->beginLaunch();
  ncclResult_t ret = REAL(ncclGroupEnd)();
  if (clock != nullptr) clock->endLaunch(accepted(ret));
  if (g.depth > 0 && --g.depth == 0) closeGroup(ret, true, monotonicNs() - start);
  return ret;
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  const int64_t start = monotonicNs();
  ncclResult_t ret = REAL(ncclGroupSimulateEnd)(simInfo);
  GroupState& g = group();
  if (g.depth == 1)
    if (KernelClock* clock = state().kernelClock.get()) clock->endLaunch(false);  // nothing was launched
  if (g.depth > 0 && --g.depth == 0) closeGroup(ret, false, monotonicNs() - start);
  return ret;
}

const char* ncclGetLastError(ncclComm_t comm) {
  // RankLens's own failures (no real NCCL, a missing function) are reported in RankLens's log; otherwise NCCL's.
  const real::Library& lib = library();
  if (!lib.ok || lib.functions[static_cast<int>(ApiId::ncclGetLastError)] == nullptr) return impl::ncclGetLastError(comm);
  const char* text = REAL(ncclGetLastError)(comm);
  return text != nullptr && *text != '\0' ? text : impl::ncclGetLastError(comm);
}

const char* ncclGetErrorString(ncclResult_t result) {
  const real::Library& lib = library();
  if (!lib.ok || lib.functions[static_cast<int>(ApiId::ncclGetErrorString)] == nullptr)
    return impl::ncclGetErrorString(result);
  return REAL(ncclGetErrorString)(result);
}
}  // namespace capture

// The exported functions' record-mode bodies: captured ones go to capture::, the rest straight to the real NCCL.
// A call made from inside the real library (its own exported API, resolved through the global scope) is
// forwarded uncaptured.
#define NCCL_FAKE_API(ret, name, params, args, prof)                                   \
  ret name params {                                                                    \
    if constexpr (captured(ApiId::name)) {                                             \
      if (!real::insideRealCall()) return capture::name args;                          \
    }                                                                                  \
    return callReal<ApiId::name, ret(*) params> args;                                  \
  }
#include "nccl_api.def"
#undef NCCL_FAKE_API

}  // namespace record
}  // namespace nccl_fake

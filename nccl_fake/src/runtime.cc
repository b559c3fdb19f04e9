// SPDX-License-Identifier: Apache-2.0
#include "nccl_fake/runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>

#include "ranklens/share_gpu.h"

namespace nccl_fake {

using ranklens::config::DeviceKind;
using ranklens::config::Fidelity;
using ranklens::config::Mode;

int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int workerThreads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 4, 2u, 8u)); }

Runtime& Runtime::get() {
  // Never destroyed: frameworks call NCCL (destroy, abort) from atexit handlers and static destructors.
  static Runtime* runtime = [] {
    auto* r = new Runtime();
    atexit([] { Runtime::get().closeEvents(); });
    return r;
  }();
  return *runtime;
}

Runtime::Runtime() { load(); }

void Runtime::load() {
  std::vector<std::string> warnings;
  const ranklens::Status loaded =
      ranklens::config::loadFromEnvironment([](const char* name) { return getenv(name); }, &settings_, &warnings);
  for (const auto& warning : warnings) INFO(kSubEnv | kSubRanklens, "%s", warning.c_str());
  status_ = ranklens::Status::ok();
  if (!loaded.isOk()) {
    // Invalid usage whatever the cause, as NCCL answers a bad NCCL_* setting.
    status_ = ranklens::Status::invalidUsage("configuration error: " + loaded.message());
    return;
  }
  for (const auto& row : ranklens::config::describe(settings_))
    if (row.set_by != "default")
      INFO(kSubEnv | kSubRanklens, "%s set by %s to %s", row.key.c_str(), row.set_by.c_str(), row.value.c_str());

  if (settings_.mode == Mode::kRecord) {
    // No CUDA here: this runs at the first NCCL call (often ncclGetVersion at import), before the job has chosen
    // its GPU; the recorder touches CUDA when the first communicator exists.
    INFO(kSubInit | kSubRanklens, "RankLens record mode: forwarding to the real NCCL, payloads %s",
         ranklens::config::toString(settings_.payloads));
    return;
  }
  // Without a recording, timing fidelity can still hold every call for its estimate from a history.
  const bool estimatesOnly = settings_.fidelity == Fidelity::kTiming &&
                             settings_.timing == ranklens::config::TimingSource::kEstimated &&
                             !settings_.history.empty();
  if (settings_.fidelity != Fidelity::kStructure && settings_.replay_trace.empty() && !estimatesOnly) {
    std::string message = std::string("fidelity '") + ranklens::config::toString(settings_.fidelity) +
                          "' replays a recording: set RANKLENS_REPLAY_TRACE to the recorded trace (ranklens replay "
                          "--trace DIR), or RANKLENS_FIDELITY=structure";
    if (settings_.fidelity == Fidelity::kTiming)
      message +=
          ", or hold every call for an estimate without a recording: RANKLENS_TIMING=estimated and "
          "RANKLENS_HISTORY=<a file from `ranklens history build`> (ranklens replay --history FILE)";
    status_ = ranklens::Status::invalidUsage(std::move(message));
    return;
  }
  if (device_ == nullptr) {
    std::string why;
    static_assert(ranklens::config::kHoldSharedAuto == ranklens::device::HoldShape::kSharedAuto &&
                      ranklens::config::kHoldSharedSm == ranklens::device::HoldShape::kSharedSm,
                  "hold_shared_bytes's words mean the same in the settings and on the device");
    const auto completion = settings_.completion == ranklens::config::Completion::kHostCallback
                                ? ranklens::device::Completion::kHostCallback
                                : ranklens::device::Completion::kKernel;
    if (settings_.device != DeviceKind::kHost)
      device_ =
          ranklens::device::makeCudaDevice(&why, completion,
                                           {settings_.hold_blocks, settings_.hold_threads, settings_.hold_shared_bytes,
                                            0, settings_.hold_from == ranklens::config::HoldFrom::kStart});
    if (device_ == nullptr && settings_.device == DeviceKind::kCuda) {
      status_ = ranklens::Status::cudaError("device 'cuda' requested but no usable GPU: " + why +
                                            "; set RANKLENS_DEVICE=host or auto");
      return;
    }
    if (device_ == nullptr) {
      if (settings_.device == DeviceKind::kAuto)
        INFO(kSubInit | kSubRanklens, "no CUDA device (%s): buffers are host memory (host device)", why.c_str());
      device_ = ranklens::device::makeHostDevice();
    }
  }
  INFO(kSubInit | kSubRanklens, "RankLens %s, %s fidelity, fill %s, %s device, reporting NCCL version %d",
       ranklens::config::toString(settings_.mode), ranklens::config::toString(settings_.fidelity),
       ranklens::config::toString(settings_.fill), device_->name(), settings_.nccl_version);
}

ncclResult_t Runtime::ready(const char* opName) {
  if (status_.isOk()) return ncclSuccess;
  return toNcclResult(status_, opName);
}

void Runtime::setDeviceForTesting(std::unique_ptr<ranklens::device::StreamDevice> device) {
  std::lock_guard<std::mutex> lock(mu_);
  device_ = std::move(device);
}

namespace {
// The rank directory: RANK from the environment, else the rank of the first communicator, else the pid.
std::string rankDirName(const ranklens::config::Context& job, int rankHint) {
  if (!job.rank.empty()) return "rank" + job.rank;
  if (rankHint >= 0) return "rank" + std::to_string(rankHint);
  return "ranklens-pid" + std::to_string(getpid());
}
}  // namespace

ranklens::trace::TraceWriter* Runtime::eventWriter(int rankHint) {
  if (settings_.trace_dir.empty()) return nullptr;
  if (writerReady_.load(std::memory_order_acquire)) return writer_.get();
  std::call_once(writerOnce_, [this, rankHint] {
    // Read now, not at load: a program may set RANK between its first NCCL call and its first communicator.
    const ranklens::config::Context job = ranklens::config::readContext();
    const std::string dir = settings_.trace_dir + "/" + rankDirName(job, rankHint);
    ranklens::trace::Manifest manifest;
    ranklens::trace::describeHost(&manifest);
    manifest.pid = getpid();
    manifest.rank = job.rank_number >= 0 ? job.rank_number : rankHint;
    manifest.world_size = job.world_size;
    manifest.local_rank = job.local_rank;
    // A rank on a shared GPU (ranklens/share_gpu.h): its LOCAL_RANK was mapped onto the GPUs there were; the manifest
    // keeps the launcher's.
    manifest.shared_gpu = ranklens::share_gpu::placedHere();
    if (manifest.shared_gpu && job.shared_gpu_local_rank >= 0) manifest.local_rank = job.shared_gpu_local_rank;
    manifest.nccl_version = settings_.nccl_version;
    manifest.mode = ranklens::config::toString(settings_.mode);
    if (device_) {
      device_->describe(&manifest.gpu_name, &manifest.gpu_uuid);
      manifest.writer = std::string("ranklens libnccl.so.2 (") + ranklens::config::toString(settings_.fidelity) +
                        ", fill " + ranklens::config::toString(settings_.fill) + ", " + device_->name() + " device)";
    }
    manifest.start_time_ns = realtimeNs();
    manifest.env = ranklens::trace::captureEnvironment();
    ranklens::trace::WriterOptions options;
    options.compressionThreads = 1;  // structure mode writes no payloads
    if (writerSetup_) writerSetup_(&manifest, &options);
    std::string error;
    error = ranklens::trace::TraceWriter::create(dir, manifest, options, &writer_).message();
    // Said whatever NCCL_DEBUG is: a run whose event log is silently missing looks like a run without events.
    if (!writer_)
      SAY_ERROR("RANKLENS_TRACE_DIR: %s (events are not written)", error.c_str());
    else
      INFO(kSubInit | kSubRanklens, "writing events to %s", dir.c_str());
    writerReady_.store(true, std::memory_order_release);
  });
  return writer_.get();
}

void Runtime::flushEvents() {
  if (writerReady_.load(std::memory_order_acquire) && writer_ && !writer_->flush().isOk())
    WARN("trace %s: %s", writer_->directory().c_str(), writer_->lastError().c_str());
}

void Runtime::setWriterSetup(WriterSetup setup) {
  std::lock_guard<std::mutex> lock(mu_);
  writerSetup_ = std::move(setup);
}

void Runtime::setBeforeClose(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  beforeClose_ = std::move(hook);
}

void Runtime::closeEvents() {
  if (beforeClose_) beforeClose_();
  if (writerReady_.load(std::memory_order_acquire) && writer_) {
    if (!writer_->close().isOk())
      SAY_ERROR("the event log %s is incomplete: %s", writer_->directory().c_str(), writer_->lastError().c_str());
    if (uint64_t dropped = writer_->stats().recordsDropped)
      WARN("trace %s: %lu records dropped (queue full); the manifest counts them", writer_->directory().c_str(),
           static_cast<unsigned long>(dropped));
  }
}

uint64_t Runtime::beginGroup() {
  ranklens::trace::GroupBegin event;
  event.groupId = nextGroupId_.fetch_add(1);
  event.timeNs = monotonicNs();
  emit(ranklens::trace::RecordType::kGroupBegin, event);
  return event.groupId;
}

void Runtime::endGroup(uint64_t groupId, uint32_t calls, ncclResult_t result, int64_t hostNs) {
  ranklens::events::GroupEnd event;
  event.groupId = groupId;
  event.calls = calls;
  event.result = result;
  event.timeNs = monotonicNs();
  event.hostNs = hostNs;
  emit(ranklens::trace::RecordType::kGroupEnd, event);
}

std::string Runtime::eventLogPath() {
  auto* writer = eventWriter(-1);
  return writer ? writer->directory() : std::string();
}

}  // namespace nccl_fake

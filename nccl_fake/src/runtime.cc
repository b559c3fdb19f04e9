// SPDX-License-Identifier: Apache-2.0
#include "nccl_fake/runtime.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

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
  auto result = ranklens::config::loadFromEnvironment([](const char* name) { return getenv(name); });
  for (const auto& warning : result.warnings) INFO(kSubEnv | kSubRanklens, "%s", warning.c_str());
  status_ = ncclSuccess;
  statusMessage_.clear();
  if (!result.ok) {
    status_ = ncclInvalidUsage;
    statusMessage_ = "configuration error: " + result.error;
    return;
  }
  settings_ = result.settings;
  for (const auto& row : ranklens::config::describe(settings_))
    if (row.set_by != "default")
      INFO(kSubEnv | kSubRanklens, "%s set by %s to %s", row.key.c_str(), row.set_by.c_str(), row.value.c_str());

  if (settings_.mode == Mode::kRecord) {
    status_ = ncclInvalidUsage;
    statusMessage_ = "mode 'record' is not available in this build yet (see README, 'Not supported yet'); "
                     "set RANKLENS_MODE=replay";
    return;
  }
  if (settings_.fidelity != Fidelity::kStructure) {
    status_ = ncclInvalidUsage;
    statusMessage_ = std::string("fidelity '") + ranklens::config::toString(settings_.fidelity) +
                     "' needs a recorded trace, which this build cannot replay yet; set RANKLENS_FIDELITY=structure";
    return;
  }
  if (device_ == nullptr) {
    std::string why;
    if (settings_.device != DeviceKind::kHost) device_ = ranklens::device::makeCudaDevice(&why);
    if (device_ == nullptr && settings_.device == DeviceKind::kCuda) {
      status_ = ncclUnhandledCudaError;
      statusMessage_ = "device 'cuda' requested but no usable GPU: " + why + "; set RANKLENS_DEVICE=host or auto";
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
  if (status_ == ncclSuccess) return ncclSuccess;
  WARN("%s : %s", opName, statusMessage_.c_str());
  return status_;
}

void Runtime::setDeviceForTesting(std::unique_ptr<ranklens::device::StreamDevice> device) {
  std::lock_guard<std::mutex> lock(mu_);
  device_ = std::move(device);
}

void Runtime::reloadForTesting() {
  std::lock_guard<std::mutex> lock(mu_);
  load();
}

namespace {
bool makeDirs(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      if (!partial.empty() && mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST) return false;
    }
    if (i < path.size()) partial += path[i];
  }
  return true;
}

std::string rankLabel() {
  if (const char* rank = getenv("RANK"); rank != nullptr && *rank != '\0') return rank;
  return "pid" + std::to_string(getpid());
}
}  // namespace

ranklens::events::EventLogWriter* Runtime::eventWriter() {
  if (settings_.trace_dir.empty()) return nullptr;
  if (writerReady_.load(std::memory_order_acquire)) return writer_.get();
  std::call_once(writerOnce_, [this] {
    std::string dir = settings_.trace_dir + "/rank" + rankLabel();
    std::string error;
    if (!makeDirs(dir)) {
      WARN("RANKLENS_TRACE_DIR: cannot create %s: %s (events are not written)", dir.c_str(), strerror(errno));
    } else {
      ranklens::events::Header header;
      char host[256] = "";
      gethostname(host, sizeof(host) - 1);
      header.host = host;
      header.pid = getpid();
      header.rankLabel = rankLabel();
      header.mode = ranklens::config::toString(settings_.mode);
      header.fidelity = ranklens::config::toString(settings_.fidelity);
      header.fill = ranklens::config::toString(settings_.fill);
      header.startTimeNs = realtimeNs();
      writer_ = ranklens::events::EventLogWriter::open(dir + "/events.msgpack", header, &error);
      if (!writer_) WARN("%s (events are not written)", error.c_str());
      else INFO(kSubInit | kSubRanklens, "writing events to %s", writer_->path().c_str());
    }
    writerReady_.store(true, std::memory_order_release);
  });
  return writer_.get();
}

void Runtime::flushEvents() {
  if (writerReady_.load(std::memory_order_acquire) && writer_) writer_->flush();
}

void Runtime::closeEvents() {
  if (writerReady_.load(std::memory_order_acquire) && writer_) {
    writer_->close();
    if (uint64_t dropped = writer_->dropped())
      WARN("event log %s: %lu records dropped (queue full)", writer_->path().c_str(),
           static_cast<unsigned long>(dropped));
  }
}

std::string Runtime::eventLogPath() {
  auto* writer = eventWriter();
  return writer ? writer->path() : std::string();
}

}  // namespace nccl_fake

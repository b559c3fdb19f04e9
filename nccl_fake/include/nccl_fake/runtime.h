// SPDX-License-Identifier: Apache-2.0
// Process-wide state of the library: settings, the stream device, the event log, identity counters.
// Created on the first NCCL call; a bad configuration makes every call fail with a message naming the fix.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "nccl_fake/core.h"
#include "ranklens/config.h"
#include "ranklens/device.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace nccl_fake {

class Runtime {
 public:
  static Runtime& get();

  // ncclSuccess when the library can serve calls; else the code to return (the reason was WARNed).
  ncclResult_t ready(const char* opName);

  const ranklens::config::Settings& settings() const { return settings_; }
  bool recordMode() const { return status_.isOk() && settings_.mode == ranklens::config::Mode::kRecord; }
  // The replay device (not created in record mode: record mode touches CUDA only through its own recorder).
  ranklens::device::StreamDevice& device() { return *device_; }
  uint64_t nextCommId() { return nextCommId_.fetch_add(1); }
  // The outermost ncclGroupStart: a new group id, announced by a GroupBegin record.
  uint64_t beginGroup();
  // Its ncclGroupEnd (or simulation): the GroupEnd record; hostNs -1 when not measured (replay).
  void endGroup(uint64_t groupId, uint32_t calls, ncclResult_t result, int64_t hostNs = -1);

  // Queues a record for this process's trace (no I/O on the caller's thread). `rankHint` names the rank directory
  // when RANK is not set and this is the first record (a communicator's creation).
  template <typename Record>
  void emit(ranklens::trace::RecordType type, const Record& record, int rankHint = -1) {
    if (auto* writer = eventWriter(rankHint)) writer->append(type, record);
  }
  // Queues a payload (record mode's background thread; may wait for queue space, never on the job's threads). `data`
  // is lent until `release` is called: payloads of kLendFromBytes and more are copied out by the writer's compression
  // workers (spread over them, and fused with the byte-plane pass), smaller ones here, where a copy costs less than
  // the handoff.
  static constexpr size_t kLendFromBytes = 1u << 20;
  bool emitPayload(const ranklens::trace::PayloadRef& ref, const void* data, size_t bytes,
                   std::function<void()> release) {
    auto* writer = eventWriter(-1);
    if (writer && bytes >= kLendFromBytes)
      return writer->appendPayloadBorrowed(ref, data, bytes, ranklens::trace::BackPressure::kWait, std::move(release));
    const bool queued = writer && writer->appendPayload(ref, data, bytes, ranklens::trace::BackPressure::kWait);
    release();
    return queued;
  }
  ranklens::trace::TraceWriter* writer() { return eventWriter(-1); }
  // Whether this process's trace can be written, opening it if needed (`rankHint` as for emit): false only when
  // trace_dir is set and its rank directory cannot be created or already holds a trace (lastErrorText() says why).
  bool traceWritable(int rankHint) { return settings_.trace_dir.empty() || eventWriter(rankHint) != nullptr; }
  // The writer if it exists already (never creates it).
  ranklens::trace::TraceWriter* existingWriter() {
    return writerReady_.load(std::memory_order_acquire) ? writer_.get() : nullptr;
  }
  void flushEvents();
  void closeEvents();          // at exit
  std::string eventLogPath();  // the rank directory of this process's trace, "" when none
  // Record mode adjusts the trace's manifest and writer options before the first record is written.
  using WriterSetup = std::function<void(ranklens::trace::Manifest*, ranklens::trace::WriterOptions*)>;
  void setWriterSetup(WriterSetup setup);
  // Runs before the trace is closed at exit (record mode: wait for timings still measured on the GPU).
  void setBeforeClose(std::function<void()> hook);

  // For tests: replace the device (e.g. force the host device) before any call; not exported.
  void setDeviceForTesting(std::unique_ptr<ranklens::device::StreamDevice> device);

 private:
  Runtime();
  void load();
  ranklens::trace::TraceWriter* eventWriter(int rankHint);

  std::mutex mu_;
  ranklens::Status status_;  // why the library cannot serve calls (settings, device); ready() says it at each call
  ranklens::config::Settings settings_;
  std::unique_ptr<ranklens::device::StreamDevice> device_;
  std::atomic<uint64_t> nextCommId_{0};
  std::atomic<uint64_t> nextGroupId_{1};
  std::once_flag writerOnce_;
  std::unique_ptr<ranklens::trace::TraceWriter> writer_;
  std::atomic<bool> writerReady_{false};
  WriterSetup writerSetup_;
  std::function<void()> beforeClose_;
};

int64_t monotonicNs();
int64_t realtimeNs();
// How many threads RankLens's own background work takes (payload compression in record, payload decoding in value
// replay): a quarter of the cores, 2..8, so that the job keeps the rest.
int workerThreads();

}  // namespace nccl_fake

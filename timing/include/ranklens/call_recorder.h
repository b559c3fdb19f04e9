// SPDX-License-Identifier: Apache-2.0
// Record mode's GPU side: the duration of every call and a copy of what it received, measured without
// synchronising the caller: the training thread never waits on the GPU for RankLens.
//
// The training thread brackets each real call (or each stream of a group) with two events from a pool: begin()
// before the real call, end() after it. Payload copies are enqueued by end() on the call's stream after its end
// event, into pinned staging memory: after the call, and before the job's next kernel, which may overwrite the
// buffer. A background thread queries the events, turns them into Timing records and hands staged payloads to
// the trace writer, which compresses them on its own threads. Staging memory is bounded: when it is full a payload
// is skipped (counted) or, if configured, the caller waits for space. Under CUDA graph capture the two events become
// nodes of the graph (never reused afterwards: each launch records them again) and the background thread writes the
// call's Timing (captured) at the first launch it sees complete, or with no duration at exit if none did; payloads
// of captured calls are not stored.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ranklens/free_list.h"
#include "ranklens/record_device.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace timing {

// One received buffer to store: `ref` names the call (commId, seq, op, datatype, count, peer).
struct PayloadRequest {
  trace::PayloadRef ref;
  const void* src = nullptr;
  size_t bytes = 0;
  bool oneRank = false;  // the call was on a 1-rank communicator (no NCCL kernel before the copy)
};

struct RecorderStats {
  uint64_t timed = 0;          // Timing records with a measured duration
  uint64_t captured = 0;       // spans inside a CUDA graph capture
  uint64_t capturedTimed = 0;  // of those, timed at a launch of their graph
  uint64_t timingErrors = 0;   // event failures: the Timing record carries duration -1
  uint64_t payloadsStaged = 0, payloadBytesStaged = 0;
  uint64_t payloadsSkippedFull = 0;      // staging memory full (staging_full: skip)
  uint64_t payloadsSkippedTooLarge = 0;  // larger than all of staging memory
  uint64_t payloadsSkippedCaptured = 0;  // inside a CUDA graph capture
  uint64_t payloadsFailed = 0;           // a copy could not be enqueued
  uint64_t payloadsByCopyEngine = 0;     // of those staged, copied by a copy engine (an event after it), not a kernel
  uint64_t waitsForStaging = 0;          // staging_full: wait, times the caller waited
  uint64_t stagingWaitNs = 0;            // and for how long in all
  uint64_t pending = 0;                  // spans not yet completed
  // The job's GPU memory, sampled by the background thread (every 100 ms while it runs, and by sampleDeviceMemory):
  // the least free memory seen on any of its devices and that device's total. 0 and 0 when never sampled.
  uint64_t deviceMemoryLeastFree = 0, deviceMemoryTotal = 0;
};

class CallRecorder {
 public:
  struct Options {
    bool payloads = false;
    size_t stagingBytes = 256u << 20;
    size_t stagingLeastBytes = 0;  // where pinning stagingBytes fails, halve it down to this much (0: do not)
    bool waitWhenFull = false;
    // Payloads of at most `controlBytes` (payload_max_bytes: the control values a replay restores at timing
    // fidelity) may use the last `controlReserveBytes` of staging (at most an eighth of it), which larger ones may
    // not: with every payload stored, staging full of gradients neither skips nor holds up a control value. 0: none.
    size_t controlBytes = 0;
    size_t controlReserveBytes = 0;
    size_t eventBatch = 128;   // events created at a time when a device's pool runs dry
    int pollMicros = 2000;     // background polling interval while spans are pending (timing_poll_us)
    bool timeCaptured = true;  // captured calls: event nodes in the graph (captured_timing), else no duration
  };
  using TimingSink = std::function<void(const trace::Timing&)>;
  // A stored payload's bytes in staging memory, lent to the sink until it calls `release` (at once, or later from any
  // thread; dropping every copy of `release` returns the memory too).
  using PayloadSink = std::function<void(const trace::PayloadRef&, const void*, size_t, std::function<void()> release)>;

  CallRecorder(device::RecordDevice& device, const Options& options, TimingSink timingSink, PayloadSink payloadSink);
  ~CallRecorder();
  CallRecorder(const CallRecorder&) = delete;
  CallRecorder& operator=(const CallRecorder&) = delete;

  // Allocates pinned staging memory now (call it where a delay is harmless: communicator creation).
  // A CUDA error (device::lastError's text) when not even the least size could be pinned; later calls repeat it.
  Status prepareStaging();
  size_t stagingBytes() const;         // as allocated by prepareStaging (0: none)
  size_t controlReserveBytes() const;  // of those, kept for payloads up to Options::controlBytes
  // Creates `device`'s events ahead of use.
  void prepareDevice(int device);

  struct Span;
  // True when `stream` is being captured into a CUDA graph; the call is then reported as captured (a Timing
  // record with no duration). For calls timed otherwise (the kernel clock).
  bool reportCaptured(cudaStream_t stream, const trace::Timing& identity);
  // Before the real call: a span for `stream`, or nullptr when events are unavailable (counted as an error) or the
  // stream is capturing a CUDA graph and the call cannot be timed in it (its captured Timing, with no duration, has
  // then already been written).
  Span* begin(int device, cudaStream_t stream, const trace::Timing& identity);
  // Before the real call, for a call another clock times (the kernel clock) whose payload is stored: a span that only
  // carries the payload copies, so that the calling thread records no event but where a copy engine's copy needs
  // one to say it is done. The caller has found `stream` not capturing (reportCaptured). nullptr once stopped.
  Span* beginPayloads(int device, cudaStream_t stream, const trace::Timing& identity);
  // After the real call was accepted: records the end, enqueues the payload copies, hands the span on.
  void end(Span* span, const std::vector<PayloadRequest>& payloads);
  // The real call failed: nothing is recorded.
  void abandon(Span* span);
  // Counts payloads that could not be staged because the call was captured into a CUDA graph.
  void countCapturedPayloads(size_t n);

  // Waits until every span handed on so far is written; false after `timeoutNs` (at once once stopped). Captured
  // calls whose graph has not run are not waited for: a graph may never be launched.
  bool drain(int64_t timeoutNs);
  // At exit, before stop(): the captured calls no launch of their graph has completed get their Timing, with no
  // duration (after one last look at their events).
  void finishCaptured();
  // Ends the background thread; afterwards nothing touches the GPU (begin() returns nullptr). For process exit:
  // call it before the CUDA runtime is torn down.
  void stop();
  // Samples the free memory of every device the recorder has seen now (at exit, before stats()), as the background
  // thread does every 100 ms.
  void sampleDeviceMemory();
  RecorderStats stats() const;

 private:
  struct DevicePool;
  struct Staged {
    trace::PayloadRef ref;
    size_t offset = 0, bytes = 0;  // staging taken: stagedBytes(bytes), the bytes and their completion flag
    uint64_t token = 0;  // the flag's value once the copy is done (RecordDevice::kSignalled); 0: an event says so
  };
  DevicePool& pool(int device);
  // `create`: make a batch when the pool runs short (never under a graph capture).
  bool takeEvents(int device, size_t n, device::RecordDevice::Event* out, bool create = true);
  void giveEvents(int device, const device::RecordDevice::Event* events, size_t n);
  bool stage(const PayloadRequest& request, bool mayWait, Staged* out);
  uint64_t* doneFlag(const Staged& s) const;  // in staging, after the bytes
  // A staged region given back: its copy failed, or (lent) the payload sink is done with it.
  void releaseStaging(size_t offset, size_t payloadBytes, bool lent);
  bool isControl(size_t payloadBytes) const;  // may use the control reserve
  void run();
  // Background thread. Whether the GPU is done with a span's call and its copies: the copy kernel's flags (no CUDA
  // call), else an event query; never the elapsed time of running work (cudaErrorNotReady, an API error to
  // compute-sanitizer).
  bool doneOnGpu(const Span* span);
  bool complete(Span* span);  // writes a span doneOnGpu found done; false if it was not after all
  // A communicator's last timed collective outside groups: its end event stays out of the pool until the next one's
  // gap (Timing.gapNs) is measured from it.
  struct ChainEnd {
    uint64_t seq = 0;
    int device = 0;
    device::RecordDevice::Event end = nullptr;
  };
  void chainGap(Span* span, trace::Timing* timing);  // background thread: Timing.gapNs, and keeps the span's end
  void recycle(Span* span);
  // A span from the free list (or new), set up for a call on `stream`: timed, not captured, nothing staged.
  Span* takeSpan(int device, cudaStream_t stream, const trace::Timing& identity);
  // Captured calls (begin/end under a graph capture).
  Span* beginCaptured(int device, cudaStream_t stream, const trace::Timing& identity);
  void endCaptured(Span* span, size_t payloads);
  void retireCaptured(Span* span);  // its events stay in the graph: out of the pool for good
  void writeCaptured(const trace::Timing& identity, int64_t durationNs);
  void pollCaptured();  // writes the Timing of every captured call whose graph launch completed

  device::RecordDevice& device_;
  const Options options_;
  TimingSink timingSink_;
  PayloadSink payloadSink_;

  std::mutex poolsMu_;
  std::map<int, std::unique_ptr<DevicePool>> pools_;
  std::mutex spansMu_;
  std::vector<Span*> freeSpans_;

  mutable std::mutex stagingMu_;
  std::condition_variable stagingFreed_;
  char* staging_ = nullptr;
  size_t stagingSize_ = 0;
  FreeList stagingFree_;
  bool stagingFailed_ = false;
  std::string stagingError_;   // why it failed, repeated to later callers
  size_t controlReserve_ = 0;  // staging only control payloads may take (Options::controlReserveBytes)
  size_t bulkTaken_ = 0;       // staging taken by larger payloads, rounded as FreeList takes it

  std::mutex pendingMu_;
  std::condition_variable pendingCv_, drainedCv_;
  std::vector<Span*> incoming_;
  uint64_t handedOn_ = 0, finished_ = 0;
  bool stop_ = false;
  std::atomic<bool> stopped_{false};
  std::atomic<uint64_t> copyTokens_{0};

  struct Counters {
    std::atomic<uint64_t> timed{0}, captured{0}, capturedTimed{0}, timingErrors{0}, payloadsStaged{0},
        payloadBytesStaged{0}, payloadsSkippedFull{0}, payloadsSkippedTooLarge{0}, payloadsSkippedCaptured{0},
        payloadsFailed{0}, payloadsByCopyEngine{0}, waitsForStaging{0}, stagingWaitNs{0};
  } counters_;
  std::mutex capturedMu_;
  std::vector<Span*> captured_;                       // captured calls waiting for a launch of their graph
  std::vector<device::RecordDevice::Event> retired_;  // events left in graphs, destroyed with the recorder
  std::map<uint64_t, ChainEnd> chain_;                // by communicator; background thread only (then the destructor)
  uint64_t lent_ = 0;  // staging regions the payload sink has not returned yet (under stagingMu_)
  std::mutex memoryMu_;
  uint64_t memoryLeastFree_ = 0, memoryTotal_ = 0;  // sampleDeviceMemory's; 0: never sampled
  std::thread thread_;
};

// With payloads: all, the staging only control values (payload_max_bytes) may take: at most an eighth of staging.
inline constexpr size_t kControlReserveBytes = 16u << 20;

// staging_bytes: auto. Payloads up to payload_max_bytes (the default policy, `small`) need little room: 256 MiB. To
// store every payload a recording keeps the job's pace only while a step's payloads fit in staging (once it is full,
// the compression threads set the pace; bench/README.md's record_overhead_torch measures it): 2 GiB, at most a
// sixteenth of the host's memory shared among its `localRanks`, at least 256 MiB. hostMemoryBytes 0: unknown.
uint64_t autoStagingBytes(bool everyPayload, uint64_t hostMemoryBytes, int localRanks);

}  // namespace timing
}  // namespace ranklens

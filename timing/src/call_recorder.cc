// SPDX-License-Identifier: Apache-2.0
#include "ranklens/call_recorder.h"

#include <time.h>

#include <algorithm>
#include <chrono>

#include "ranklens/device.h"
#include "ranklens/thread_name.h"

namespace ranklens {
namespace timing {

using device::RecordDevice;
using Event = RecordDevice::Event;

namespace {
constexpr int kIdleMicros = 1000;  // background polling interval while nothing is pending
// How often the background thread samples the job's free GPU memory (a cudaMemGetInfo per device: microseconds).
constexpr auto kMemorySampleInterval = std::chrono::milliseconds(100);
// Events left in CUDA graphs are never reused; past this many, captured calls get no duration (a program that
// captures without end, e.g. recompiling, does not grow the recorder without bound).
constexpr size_t kMaxRetiredEvents = size_t{1} << 16;
}  // namespace

struct CallRecorder::DevicePool {
  std::mutex mu;
  std::vector<Event> free;
};

struct CallRecorder::Span {
  int device = 0;
  cudaStream_t stream = nullptr;
  Event events[3] = {nullptr, nullptr, nullptr};  // start, end, copies done
  bool copies = false;
  bool timed = true;       // false: beginPayloads (no start or end event, no Timing record)
  bool captured = false;   // its events are nodes of a CUDA graph
  uint64_t captureId = 0;  // of that graph's capture
  trace::Timing identity;
  std::vector<Staged> staged;
};

CallRecorder::CallRecorder(RecordDevice& device, const Options& options, TimingSink timingSink, PayloadSink payloadSink)
    : device_(device), options_(options), timingSink_(std::move(timingSink)), payloadSink_(std::move(payloadSink)) {
  thread_ = std::thread([this] {
    nameThisThread("RankLens Poll");
    run();
  });
}

void CallRecorder::stop() {
  {
    std::lock_guard<std::mutex> lock(pendingMu_);
    if (stop_) return;
    stop_ = true;
  }
  stopped_ = true;
  pendingCv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CallRecorder::~CallRecorder() {
  drain(2'000'000'000);
  stop();
  for (auto& [comm, kept] : chain_) giveEvents(kept.device, &kept.end, 1);
  for (Span* span : captured_) {
    for (Event e : span->events)
      if (e) device_.destroyEvent(e);
    delete span;
  }
  for (Event e : retired_) device_.destroyEvent(e);
  for (Span* span : freeSpans_) delete span;
  for (auto& [dev, pool] : pools_)
    for (Event e : pool->free) device_.destroyEvent(e);
  // Staging lent to the payload sink (a trace writer's workers copy it out) is freed only once returned.
  bool returned = false;
  {
    std::unique_lock<std::mutex> lock(stagingMu_);
    returned = stagingFreed_.wait_for(lock, std::chrono::seconds(10), [this] { return lent_ == 0; });
  }
  if (staging_ && returned) device_.freePinned(staging_);
}

Status CallRecorder::prepareStaging() {
  if (!options_.payloads) return Status::ok();
  std::lock_guard<std::mutex> lock(stagingMu_);
  if (staging_) return Status::ok();
  if (stagingFailed_) return Status::cudaError(stagingError_);
  void* memory = nullptr;
  size_t bytes = options_.stagingBytes;
  while (device_.allocPinned(&memory, bytes) != 0) {
    if (options_.stagingLeastBytes == 0 || bytes / 2 < options_.stagingLeastBytes) {
      stagingFailed_ = true;
      stagingError_ = device::lastError();
      return Status::cudaError(stagingError_);
    }
    bytes /= 2;
  }
  staging_ = static_cast<char*>(memory);
  stagingSize_ = bytes;
  stagingFree_.reset(stagingSize_);
  controlReserve_ = options_.controlBytes > 0 ? std::min(options_.controlReserveBytes, bytes / 8) : 0;
  return Status::ok();
}

size_t CallRecorder::stagingBytes() const {
  std::lock_guard<std::mutex> lock(stagingMu_);
  return staging_ ? stagingSize_ : 0;
}

size_t CallRecorder::controlReserveBytes() const {
  std::lock_guard<std::mutex> lock(stagingMu_);
  return staging_ ? controlReserve_ : 0;
}

uint64_t autoStagingBytes(bool everyPayload, uint64_t hostMemoryBytes, int localRanks) {
  constexpr uint64_t kSmall = 256ull << 20, kEvery = 2ull << 30;
  if (!everyPayload) return kSmall;
  if (hostMemoryBytes == 0) return kEvery;
  return std::clamp<uint64_t>(hostMemoryBytes / 16 / static_cast<uint64_t>(std::max(localRanks, 1)), kSmall, kEvery);
}

CallRecorder::DevicePool& CallRecorder::pool(int device) {
  std::lock_guard<std::mutex> lock(poolsMu_);
  auto& slot = pools_[device];
  if (!slot) slot = std::make_unique<DevicePool>();
  return *slot;
}

void CallRecorder::prepareDevice(int device) {
  Event events[3];
  if (takeEvents(device, 3, events)) giveEvents(device, events, 3);
  // The payload copy kernel, and the stream that primes captured calls' events: a failure shows at the first copy
  // or captured call, which is counted.
  if (options_.payloads || options_.timeCaptured) device_.prepareDevice(device);
}

bool CallRecorder::takeEvents(int device, size_t n, Event* out, bool create) {
  DevicePool& p = pool(device);
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.free.size() < n) {
    if (!create) return false;
    // Rare (warm-up, or more calls in flight than ever before): create a batch on this thread.
    if (device_.createEvents(device, std::max(options_.eventBatch, n), &p.free) != 0 && p.free.size() < n) return false;
  }
  for (size_t i = 0; i < n; ++i) {
    out[i] = p.free.back();
    p.free.pop_back();
  }
  return true;
}

void CallRecorder::giveEvents(int device, const Event* events, size_t n) {
  DevicePool& p = pool(device);
  std::lock_guard<std::mutex> lock(p.mu);
  for (size_t i = 0; i < n; ++i)
    if (events[i]) p.free.push_back(events[i]);
}

bool CallRecorder::reportCaptured(cudaStream_t stream, const trace::Timing& identity) {
  if (!device_.capturing(stream)) return false;
  counters_.captured++;
  writeCaptured(identity, 0);
  return true;
}

CallRecorder::Span* CallRecorder::takeSpan(int device, cudaStream_t stream, const trace::Timing& identity) {
  Span* span = nullptr;
  {
    std::lock_guard<std::mutex> lock(spansMu_);
    if (!freeSpans_.empty()) {
      span = freeSpans_.back();
      freeSpans_.pop_back();
    }
  }
  if (span == nullptr) span = new Span();
  span->device = device;
  span->stream = stream;
  span->identity = identity;
  span->copies = false;
  span->timed = true;
  span->captured = false;
  span->captureId = 0;
  span->staged.clear();
  return span;
}

void CallRecorder::writeCaptured(const trace::Timing& identity, int64_t durationNs) {
  trace::Timing timing = identity;
  timing.captured = true;
  timing.durationNs = durationNs;
  if (durationNs > 0) timing.eventNs = durationNs;
  timingSink_(timing);
}

CallRecorder::Span* CallRecorder::beginCaptured(int device, cudaStream_t stream, const trace::Timing& identity) {
  counters_.captured++;
  bool room = false;
  if (options_.timeCaptured) {
    std::lock_guard<std::mutex> lock(capturedMu_);
    room = retired_.size() + 2 * captured_.size() + 2 <= kMaxRetiredEvents;
  }
  if (room) {
    Span* span = takeSpan(device, stream, identity);
    span->captured = true;
    span->captureId = device_.captureId(stream);
    // From the pool as it is: creating events is no business of a capture.
    if (!takeEvents(device, 2, span->events, false)) {
      span->events[0] = span->events[1] = nullptr;
      span->captured = false;
      recycle(span);
    } else if (device_.primeCapturedEvents(device, span->events[0], span->events[1]) != 0) {
      counters_.timingErrors++;
      giveEvents(device, span->events, 2);  // in no graph: as good as before
      span->events[0] = span->events[1] = nullptr;
      span->captured = false;
      recycle(span);
    } else if (device_.recordEventInCapture(span->events[0], stream) == 0) {
      return span;
    } else {
      counters_.timingErrors++;
      retireCaptured(span);  // whether the failed record reached the graph is unknown
    }
  }
  writeCaptured(identity, 0);
  return nullptr;
}

void CallRecorder::endCaptured(Span* span, size_t payloads) {
  if (payloads > 0) countCapturedPayloads(payloads);
  // A non-blocking communicator may finish the call after the capture ended: its end can no longer join the graph.
  if (!device_.capturing(span->stream) || device_.recordEventInCapture(span->events[1], span->stream) != 0) {
    writeCaptured(span->identity, 0);
    retireCaptured(span);
    return;
  }
  std::lock_guard<std::mutex> lock(capturedMu_);
  captured_.push_back(span);
}

void CallRecorder::retireCaptured(Span* span) {
  {
    std::lock_guard<std::mutex> lock(capturedMu_);
    for (Event& e : span->events)
      if (e) retired_.push_back(e);
  }
  span->events[0] = span->events[1] = span->events[2] = nullptr;
  span->captured = false;
  recycle(span);
}

void CallRecorder::pollCaptured() {
  std::vector<std::pair<Span*, int64_t>> measured;
  {
    std::lock_guard<std::mutex> lock(capturedMu_);
    // One graph's calls are measurable together, once a launch of it has completed: after the first that is not,
    // the rest of its capture waits for the next pass (a graph never launched costs one look per pass).
    std::vector<uint64_t> waiting;
    auto keep = captured_.begin();
    for (Span* span : captured_) {
      // Complete and positive: both events from the same launch. Between launches the start may already be a
      // newer launch's while the end is the older one's; before the first, both hold their priming (end, then start).
      int64_t ns = -1;
      const bool blocked =
          span->captureId != 0 && std::find(waiting.begin(), waiting.end(), span->captureId) != waiting.end();
      if (!blocked && device_.queryEvent(span->events[1]) == 0 && device_.queryEvent(span->events[0]) == 0 &&
          device_.elapsedNs(span->events[0], span->events[1], &ns) == 0 && ns > 0) {
        measured.emplace_back(span, ns);
      } else {
        if (!blocked && span->captureId != 0) waiting.push_back(span->captureId);
        *keep++ = span;
      }
    }
    captured_.erase(keep, captured_.end());
  }
  for (const auto& [span, ns] : measured) {
    counters_.capturedTimed++;
    writeCaptured(span->identity, ns);
    retireCaptured(span);
  }
}

void CallRecorder::finishCaptured() {
  if (stopped_) return;
  pollCaptured();
  std::vector<Span*> left;
  {
    std::lock_guard<std::mutex> lock(capturedMu_);
    left.swap(captured_);
  }
  for (Span* span : left) {
    writeCaptured(span->identity, 0);
    retireCaptured(span);
  }
}

CallRecorder::Span* CallRecorder::begin(int device, cudaStream_t stream, const trace::Timing& identity) {
  if (stopped_.load(std::memory_order_relaxed)) return nullptr;
  if (device_.capturing(stream)) return beginCaptured(device, stream, identity);
  Span* span = takeSpan(device, stream, identity);
  if (!takeEvents(device, 2, span->events) || device_.recordEvent(span->events[0], stream) != 0) {
    counters_.timingErrors++;
    trace::Timing timing = identity;
    timing.durationNs = -1;
    timingSink_(timing);
    giveEvents(device, span->events, 2);
    span->events[0] = span->events[1] = nullptr;
    recycle(span);
    return nullptr;
  }
  return span;
}

CallRecorder::Span* CallRecorder::beginPayloads(int device, cudaStream_t stream, const trace::Timing& identity) {
  if (stopped_.load(std::memory_order_relaxed)) return nullptr;
  Span* span = takeSpan(device, stream, identity);
  span->timed = false;
  return span;
}

void CallRecorder::abandon(Span* span) {
  if (span == nullptr) return;
  if (span->captured) {
    retireCaptured(span);
    return;
  }
  giveEvents(span->device, span->events, 2);
  span->events[0] = span->events[1] = nullptr;
  recycle(span);
}

void CallRecorder::recycle(Span* span) {
  std::lock_guard<std::mutex> lock(spansMu_);
  freeSpans_.push_back(span);
}

void CallRecorder::countCapturedPayloads(size_t n) { counters_.payloadsSkippedCaptured += n; }

namespace {
// The completion flag's place after a payload's bytes in staging (8-byte aligned; staging ranges are 256-aligned),
// and the staging a payload takes: its bytes and the flag.
size_t flagOffset(size_t bytes) { return (bytes + 15) / 16 * 16; }
size_t stagedBytes(size_t bytes) { return flagOffset(bytes) + sizeof(uint64_t); }
}  // namespace

uint64_t* CallRecorder::doneFlag(const Staged& s) const {
  return reinterpret_cast<uint64_t*>(staging_ + s.offset + flagOffset(s.bytes));
}

bool CallRecorder::isControl(size_t payloadBytes) const { return payloadBytes <= options_.controlBytes; }

bool CallRecorder::stage(const PayloadRequest& request, bool mayWait, Staged* out) {
  std::unique_lock<std::mutex> lock(stagingMu_);
  const size_t reserved = stagedBytes(request.bytes);
  // Larger payloads leave the control reserve alone: what they may take in all is staging less the reserve.
  const bool control = isControl(request.bytes);
  const size_t room = control ? stagingSize_ : stagingSize_ - controlReserve_;
  if (staging_ == nullptr || FreeList::rounded(reserved) > room) {
    counters_.payloadsSkippedTooLarge++;
    return false;
  }
  std::chrono::steady_clock::time_point waitStart;
  for (bool waited = false;; waited = true) {
    if ((control || bulkTaken_ + FreeList::rounded(reserved) <= room) && stagingFree_.take(reserved, &out->offset)) {
      if (!control) bulkTaken_ += FreeList::rounded(reserved);
      out->bytes = request.bytes;
      if (waited) {
        counters_.waitsForStaging++;
        counters_.stagingWaitNs += static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - waitStart).count());
      }
      return true;
    }
    if (!options_.waitWhenFull || !mayWait) {
      counters_.payloadsSkippedFull++;
      return false;
    }
    if (!waited) waitStart = std::chrono::steady_clock::now();
    stagingFreed_.wait(lock);
  }
}

void CallRecorder::releaseStaging(size_t offset, size_t payloadBytes, bool lent) {
  std::lock_guard<std::mutex> lock(stagingMu_);
  const size_t bytes = stagedBytes(payloadBytes);
  stagingFree_.give(offset, bytes);
  if (!isControl(payloadBytes)) bulkTaken_ -= FreeList::rounded(bytes);
  if (lent) lent_--;
  // Under the lock: the destructor, waiting for the last loan, cannot go on (and destroy this) before it is done.
  stagingFreed_.notify_all();
}

void CallRecorder::end(Span* span, const std::vector<PayloadRequest>& payloads) {
  if (span == nullptr) return;
  if (stopped_.load(std::memory_order_relaxed)) {  // at exit: no GPU work any more
    abandon(span);
    return;
  }
  if (span->captured) {
    endCaptured(span, payloads.size());
    return;
  }
  if (span->timed && device_.recordEvent(span->events[1], span->stream) != 0) {
    counters_.timingErrors++;
    trace::Timing timing = span->identity;
    timing.durationNs = -1;
    timingSink_(timing);
    abandon(span);
    return;
  }
  if (!payloads.empty()) {
    // The copies go on the call's own stream, after its end event: in stream order after the call and before the
    // job's next kernel, which may overwrite the received buffer. (A side stream would need that order through two
    // cross-stream waits and one more event record: about 2.5 us more on the calling thread, and the job's stream
    // would wait for the copy all the same.)
    bool needEvent = false;
    for (const PayloadRequest& request : payloads) {
      Staged staged;
      staged.ref = request.ref;
      // Waiting for space is only safe while this span holds none: its own copies are freed after it is handed on.
      if (!stage(request, span->staged.empty(), &staged)) continue;
      uint64_t* done = doneFlag(staged);
      *done = 0;  // whatever an earlier payload left there is not this copy's token
      const uint64_t token = copyTokens_.fetch_add(1, std::memory_order_relaxed) + 1;
      const int copied = device_.copyToHost(span->device, staging_ + staged.offset, request.src, request.bytes,
                                            span->stream, done, token, request.oneRank);
      if (copied != 0 && copied != RecordDevice::kSignalled) {
        counters_.payloadsFailed++;
        releaseStaging(staged.offset, staged.bytes, /*lent=*/false);
        continue;
      }
      if (copied == RecordDevice::kSignalled) {
        staged.token = token;
      } else {
        needEvent = true;
        counters_.payloadsByCopyEngine++;
      }
      counters_.payloadsStaged++;
      counters_.payloadBytesStaged += request.bytes;
      span->staged.push_back(staged);
    }
    if (needEvent) {
      if (takeEvents(span->device, 1, &span->events[2]) && device_.recordEvent(span->events[2], span->stream) == 0) {
        span->copies = true;
      } else {
        // Nothing will say when the copies are done: their bytes are not stored, and their staging is never given
        // back (a copy still under way must not write into space another payload was given).
        counters_.payloadsFailed += span->staged.size();
        span->staged.clear();  // the signalled ones too: simpler, and this never happens but after a CUDA error
        if (span->events[2] != nullptr) giveEvents(span->device, &span->events[2], 1);
        span->events[2] = nullptr;
      }
    }
  }
  if (!span->timed && span->staged.empty()) {  // nothing was staged: nothing to wait for
    recycle(span);
    return;
  }
  std::lock_guard<std::mutex> lock(pendingMu_);
  incoming_.push_back(span);
  handedOn_++;
}

bool CallRecorder::doneOnGpu(const Span* span) {
  // The copies follow the call's end on its stream: once they are done (their event, or the flags the copy kernel
  // sets), so is the call.
  if (span->copies && device_.queryEvent(span->events[2]) == RecordDevice::kPending) return false;
  bool signalled = false;
  for (const Staged& s : span->staged) {
    if (s.token == 0) continue;
    if (__atomic_load_n(doneFlag(s), __ATOMIC_ACQUIRE) != s.token) return false;
    signalled = true;
  }
  return !span->timed || span->copies || signalled || device_.queryEvent(span->events[1]) != RecordDevice::kPending;
}

bool CallRecorder::complete(Span* span) {
  if (span->timed) {
    trace::Timing timing = span->identity;
    int64_t ns = -1;
    const int state = device_.elapsedNs(span->events[0], span->events[1], &ns);
    if (state == RecordDevice::kPending) return false;
    if (state != 0) {
      counters_.timingErrors++;
      timing.durationNs = timing.eventNs = -1;
    } else {
      counters_.timed++;
      timing.eventNs = timing.durationNs = ns;
      if (trace::chainsGap(timing)) chainGap(span, &timing);
    }
    timingSink_(timing);
  }
  for (const Staged& s : span->staged) {
    // The region goes back when the sink is done with it: the release it calls, or its last copy destroyed.
    struct Loan {
      Loan(CallRecorder* r, size_t o, size_t b) : recorder(r), offset(o), bytes(b) {}
      Loan(const Loan&) = delete;  // one region, returned once
      Loan& operator=(const Loan&) = delete;
      ~Loan() { recorder->releaseStaging(offset, bytes, /*lent=*/true); }
      CallRecorder* recorder;
      size_t offset, bytes;
    };
    {
      std::lock_guard<std::mutex> lock(stagingMu_);
      lent_++;
    }
    auto loan = std::make_shared<Loan>(this, s.offset, s.bytes);
    payloadSink_(s.ref, staging_ + s.offset, s.bytes, [loan = std::move(loan)]() mutable { loan.reset(); });
  }
  giveEvents(span->device, span->events, span->copies ? 3 : 2);  // a kept end event was taken out (chainGap)
  span->events[0] = span->events[1] = span->events[2] = nullptr;
  span->staged.clear();
  recycle(span);
  return true;
}

void CallRecorder::chainGap(Span* span, trace::Timing* timing) {
  auto [it, fresh] = chain_.try_emplace(timing->commId);
  ChainEnd& kept = it->second;
  if (!fresh && kept.seq + 1 == timing->seq) {
    int64_t gap = 0;
    if (device_.elapsedNs(kept.end, span->events[0], &gap) == 0) timing->gapNs = gap;
  }
  // Spans of one communicator on different streams may complete out of order: only a later call replaces the end.
  if (fresh || timing->seq > kept.seq) {
    if (!fresh) giveEvents(kept.device, &kept.end, 1);
    kept = {timing->seq, span->device, span->events[1]};
    span->events[1] = nullptr;
  }
}

void CallRecorder::run() {
  device_.prepareBackgroundThread();
  std::vector<Span*> pending;  // in submission order
  struct StreamSpans {
    cudaStream_t stream;
    std::vector<size_t> spans;  // indices into pending, in order
  };
  std::vector<StreamSpans> streams;  // this pass's, by stream
  std::vector<char> finished;        // by index into pending, this pass
  auto memorySampled = std::chrono::steady_clock::now() - kMemorySampleInterval;
  for (;;) {
    {
      // Polling, not woken per span: a futex wake on the job's thread for every call would cost it microseconds.
      std::unique_lock<std::mutex> lock(pendingMu_);
      const bool idle = pending.empty() && incoming_.empty();
      const auto interval =
          std::chrono::microseconds(idle ? std::max(kIdleMicros, options_.pollMicros) : options_.pollMicros);
      pendingCv_.wait_for(lock, interval, [this] { return stop_; });
      if (stop_) return;  // stop() comes after drain(); whatever is still pending is abandoned, not waited for
      pending.insert(pending.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    // Work on one stream completes in order: its spans that are done come first. The boundary is found by bisection
    // (a few CUDA queries per stream and pass, not one per span), then each span before it is written.
    streams.clear();
    for (size_t i = 0; i < pending.size(); ++i) {
      auto at = std::find_if(streams.begin(), streams.end(),
                             [&](const StreamSpans& s) { return s.stream == pending[i]->stream; });
      if (at == streams.end()) at = streams.insert(streams.end(), StreamSpans{pending[i]->stream, {}});
      at->spans.push_back(i);
    }
    finished.assign(pending.size(), 0);
    size_t done = 0;
    for (const StreamSpans& stream : streams) {
      const std::vector<size_t>& spans = stream.spans;
      size_t lo = 0, hi = spans.size();  // spans[< lo] done, spans[>= hi] running
      if (doneOnGpu(pending[spans[hi - 1]]))
        lo = hi;  // the newest done: every one is (the common case when idle)
      else
        --hi;
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (doneOnGpu(pending[spans[mid]]))
          lo = mid + 1;
        else
          hi = mid;
      }
      for (size_t k = 0; k < lo; ++k) {
        bool written = false;
        try {
          written = complete(pending[spans[k]]);
        } catch (...) {
          written = true;  // a sink failed (out of memory): the span is dropped, never retried forever
          counters_.timingErrors++;
        }
        if (!written) break;
        finished[spans[k]] = 1;
        ++done;
      }
    }
    auto keep = pending.begin();
    for (size_t i = 0; i < finished.size(); ++i)
      if (!finished[i]) *keep++ = pending[i];
    pending.erase(keep, pending.end());
    pollCaptured();
    if (const auto now = std::chrono::steady_clock::now(); now - memorySampled >= kMemorySampleInterval) {
      memorySampled = now;
      sampleDeviceMemory();
    }
    if (done > 0) {
      std::lock_guard<std::mutex> lock(pendingMu_);
      finished_ += done;
      drainedCv_.notify_all();
    }
  }
}

bool CallRecorder::drain(int64_t timeoutNs) {
  if (stopped_) return false;
  std::unique_lock<std::mutex> lock(pendingMu_);
  const uint64_t target = handedOn_;
  return drainedCv_.wait_for(lock, std::chrono::nanoseconds(timeoutNs), [&] { return finished_ >= target; });
}

void CallRecorder::sampleDeviceMemory() {
  if (stopped_) return;
  std::vector<int> devices;
  {
    std::lock_guard<std::mutex> lock(poolsMu_);
    for (const auto& [device, pool] : pools_) devices.push_back(device);
  }
  for (int device : devices) {
    uint64_t free = 0, total = 0;
    if (device_.memoryInfo(device, &free, &total) != 0 || total == 0) continue;  // a GPU that cannot say: not known
    std::lock_guard<std::mutex> lock(memoryMu_);
    if (memoryTotal_ == 0 || free < memoryLeastFree_) {
      memoryLeastFree_ = free;
      memoryTotal_ = total;
    }
  }
}

RecorderStats CallRecorder::stats() const {
  RecorderStats s;
  s.timed = counters_.timed;
  s.captured = counters_.captured;
  s.capturedTimed = counters_.capturedTimed;
  s.timingErrors = counters_.timingErrors;
  s.payloadsStaged = counters_.payloadsStaged;
  s.payloadBytesStaged = counters_.payloadBytesStaged;
  s.payloadsSkippedFull = counters_.payloadsSkippedFull;
  s.payloadsSkippedTooLarge = counters_.payloadsSkippedTooLarge;
  s.payloadsSkippedCaptured = counters_.payloadsSkippedCaptured;
  s.payloadsFailed = counters_.payloadsFailed;
  s.payloadsByCopyEngine = counters_.payloadsByCopyEngine;
  s.waitsForStaging = counters_.waitsForStaging;
  s.stagingWaitNs = counters_.stagingWaitNs;
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(memoryMu_));
    s.deviceMemoryLeastFree = memoryLeastFree_;
    s.deviceMemoryTotal = memoryTotal_;
  }
  {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(pendingMu_));
    s.pending = handedOn_ - finished_;
  }
  return s;
}

}  // namespace timing
}  // namespace ranklens

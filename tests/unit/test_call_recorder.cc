// SPDX-License-Identifier: Apache-2.0
// The recorder's handling of calls captured into a CUDA graph, on a fake record device that captures: no GPU needed.
// A captured call's events become graph nodes; its Timing (captured) is written once a launch of the graph completes,
// with that launch's duration, or at exit with none; those events never go back to the pool.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "ranklens/call_recorder.h"

namespace {

using ranklens::device::RecordDevice;
using ranklens::timing::CallRecorder;
using ranklens::trace::Timing;

struct FakeEvent {
  bool recorded = false, pending = false, inGraph = false;
  int64_t ns = 0;
};

// Streams listed in `capturingStreams` are capturing a graph. Events recorded in a capture are stamped only by
// launch().
class CapturingDevice final : public RecordDevice {
 public:
  std::mutex mu;
  std::set<cudaStream_t> capturingStreams;
  std::vector<FakeEvent*> graph;  // events recorded into the capture, in order
  std::set<FakeEvent*> eagerRecorded;
  std::vector<FakeEvent*> eagerOrder;  // eager records, in the order they were made
  int64_t clock = 1000;

  // A launch of the graph: every node records again, `ns` apart, in capture order. `first`: the nodes from there on
  // only (a later capture's graph).
  void launch(int64_t ns, size_t first = 0) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = first; i < graph.size(); ++i) {
      clock += ns;
      graph[i]->recorded = true;
      graph[i]->pending = false;
      graph[i]->ns = clock;
    }
  }
  // The graph's events at these times at once, e.g. a launch under way whose start node ran and whose end node still
  // shows the previous launch.
  void stamp(const std::vector<int64_t>& times) {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < times.size() && i < graph.size(); ++i) {
      graph[i]->recorded = true;
      graph[i]->pending = false;
      graph[i]->ns = times[i];
    }
  }

  const char* name() const override { return "capturing-fake"; }
  int currentDevice(int* device) override {
    *device = 0;
    return 0;
  }
  void describe(std::string*, std::string*) override {}
  // New events as earlier calls may leave them (`staleRecords`): recorded, each one later than the one before, so that
  // two taken from the pool's back (after prepareDevice took and gave back three, reversing them) measure a positive
  // time that no launch made.
  bool staleRecords = false;
  bool recordsPending = false;  // eager records not done until a test says so
  int createEvents(int, size_t count, std::vector<Event>* out) override {
    for (size_t i = 0; i < count; ++i) {
      auto* e = new FakeEvent();
      if (staleRecords) {
        e->recorded = true;
        e->ns = 500 + static_cast<int64_t>(out->size());
      }
      out->push_back(e);
    }
    return 0;
  }
  void destroyEvent(Event event) override { delete static_cast<FakeEvent*>(event); }
  int recordEvent(Event event, cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(capturingStreams.count(stream), 0u) << "a plain event record into a capture";
    auto* e = static_cast<FakeEvent*>(event);
    EXPECT_FALSE(e->inGraph) << "an event of a graph was reused";
    e->recorded = true;
    e->pending = recordsPending;
    e->ns = (clock += 100);
    eagerRecorded.insert(e);
    eagerOrder.push_back(e);
    return 0;
  }
  int recordEventInCapture(Event event, cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(capturingStreams.count(stream), 1u);
    auto* e = static_cast<FakeEvent*>(event);
    e->inGraph = true;
    graph.push_back(e);
    return 0;
  }
  int primeCapturedEvents(int, Event start, Event end) override {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_FALSE(static_cast<FakeEvent*>(start)->inGraph || static_cast<FakeEvent*>(end)->inGraph)
        << "primed after it joined the graph";
    for (auto* e : {static_cast<FakeEvent*>(end), static_cast<FakeEvent*>(start)}) {
      e->recorded = true;
      e->ns = (clock += 100);
    }
    ++primed;
    return 0;
  }
  int queryEvent(Event event) override {
    std::lock_guard<std::mutex> lock(mu);
    ++queries;
    return static_cast<FakeEvent*>(event)->pending ? kPending : 0;  // as CUDA: never recorded counts as complete
  }
  int elapsedNs(Event start, Event end, int64_t* nanoseconds) override {
    std::lock_guard<std::mutex> lock(mu);
    auto *s = static_cast<FakeEvent*>(start), *e = static_cast<FakeEvent*>(end);
    // As CUDA, whose answers here are API errors to compute-sanitizer: never recorded, or not done yet.
    if (!s->recorded || !e->recorded) {
      ++elapsedErrors;
      return 1;
    }
    if (s->pending || e->pending) {
      ++elapsedErrors;
      return kPending;
    }
    *nanoseconds = e->ns - s->ns;
    return 0;
  }
  bool capturing(cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu);
    return capturingStreams.count(stream) > 0;
  }
  uint64_t captureId(cudaStream_t stream) override {
    std::lock_guard<std::mutex> lock(mu);
    return capturingStreams.count(stream) ? captureIdNow : 0;
  }
  uint64_t captureIdNow = 1;
  int queries = 0, primed = 0, elapsedErrors = 0;
  size_t pinnable = 0;  // the largest pinned allocation that succeeds (none by default)
  std::vector<size_t> pinAttempts;
  int allocPinned(void** ptr, size_t bytes) override {
    pinAttempts.push_back(bytes);
    if (bytes > pinnable) return 1;
    *ptr = malloc(bytes);
    return *ptr ? 0 : 1;
  }
  void freePinned(void* ptr) override { free(ptr); }
  int prepareDevice(int) override { return 0; }
  int copyToHost(int, void*, const void*, size_t, cudaStream_t, uint64_t*, uint64_t, bool) override { return 1; }
  void prepareBackgroundThread() override {}
  // The GPU's memory as the test sets it (the recorder's background thread may sample it at any time as well).
  std::atomic<uint64_t> freeNow{8ull << 30};
  int memoryInfo(int, uint64_t* freeBytes, uint64_t* totalBytes) override {
    *freeBytes = freeNow.load();
    *totalBytes = 16ull << 30;
    return 0;
  }
};

const auto kCaptured = reinterpret_cast<cudaStream_t>(0x100);
const auto kEager = reinterpret_cast<cudaStream_t>(0x200);

struct Recorded {
  std::mutex mu;
  std::vector<Timing> timings;
  size_t size() {
    std::lock_guard<std::mutex> lock(mu);
    return timings.size();
  }
};

Timing identity(uint64_t seq) {
  Timing t;
  t.commId = 1;
  t.seq = seq;
  t.op = 2;
  return t;
}

// Waits (up to 2 s) until `n` Timing records were written.
bool waitFor(Recorded& out, size_t n) {
  for (int i = 0; i < 2000 && out.size() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return out.size() >= n;
}

class CapturedCalls : public ::testing::Test {
 protected:
  CallRecorder::Options options() {
    CallRecorder::Options o;
    o.eventBatch = 8;
    o.pollMicros = 50;
    return o;
  }
  void make(const CallRecorder::Options& o) {
    recorder_ = std::make_unique<CallRecorder>(
        device_, o,
        [this](const Timing& t) {
          std::lock_guard<std::mutex> lock(out_.mu);
          out_.timings.push_back(t);
        },
        [](const ranklens::trace::PayloadRef&, const void*, size_t, std::function<void()>) {});
    recorder_->prepareDevice(0);
  }
  void TearDown() override {
    if (recorder_) recorder_->stop();
    recorder_.reset();
  }
  CapturingDevice device_;
  Recorded out_;
  std::unique_ptr<CallRecorder> recorder_;
};

TEST_F(CapturedCalls, TimedAtTheFirstCompletedLaunchOfTheirGraph) {
  make(options());
  device_.capturingStreams.insert(kCaptured);
  CallRecorder::Span* span = recorder_->begin(0, kCaptured, identity(7));
  ASSERT_NE(span, nullptr);
  recorder_->end(span, {});
  device_.capturingStreams.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(out_.size(), 0u) << "no launch yet: nothing to write";
  ASSERT_EQ(device_.graph.size(), 2u);

  device_.launch(5000);  // the graph's start and end nodes 5 us apart
  ASSERT_TRUE(waitFor(out_, 1));
  const Timing t = out_.timings[0];
  EXPECT_EQ(t.seq, 7u);
  EXPECT_TRUE(t.captured);
  EXPECT_EQ(t.durationNs, 5000);
  EXPECT_EQ(t.eventNs, 5000);
  EXPECT_EQ(recorder_->stats().captured, 1u);
  EXPECT_EQ(recorder_->stats().capturedTimed, 1u);

  // Later launches write nothing more; eager calls never get the graph's events (the fake fails a test if they do).
  device_.launch(9000);
  for (uint64_t seq = 8; seq < 40; ++seq) {
    CallRecorder::Span* eager = recorder_->begin(0, kEager, identity(seq));
    ASSERT_NE(eager, nullptr);
    recorder_->end(eager, {});
  }
  ASSERT_TRUE(recorder_->drain(2'000'000'000));
  recorder_->finishCaptured();
  ASSERT_EQ(out_.size(), 33u);
  size_t captured = 0;
  for (const Timing& timing : out_.timings) captured += timing.captured;
  EXPECT_EQ(captured, 1u);
}

// Before its graph's first launch a captured call's events hold what the recorder primed them with (end, then start):
// pool events that earlier calls left in the other order would otherwise measure a positive time no launch made, and
// events never recorded would be asked for a time CUDA answers with an error.
TEST_F(CapturedCalls, EventsFromThePoolArePrimedSoThatNothingIsMeasuredBeforeALaunch) {
  for (bool stale : {true, false}) {
    SCOPED_TRACE(stale ? "pool events with stale records" : "pool events never recorded");
    device_.staleRecords = stale;
    out_.timings.clear();
    make(options());
    device_.capturingStreams.insert(kCaptured);
    CallRecorder::Span* span = recorder_->begin(0, kCaptured, identity(11));
    ASSERT_NE(span, nullptr);
    recorder_->end(span, {});
    device_.capturingStreams.clear();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(out_.size(), 0u) << "a duration before any launch";
    {
      std::lock_guard<std::mutex> lock(device_.mu);
      EXPECT_EQ(device_.primed, 1);
      EXPECT_EQ(device_.elapsedErrors, 0);
    }
    device_.launch(4000, device_.graph.size() - 2);
    ASSERT_TRUE(waitFor(out_, 1));
    EXPECT_EQ(out_.timings[0].durationNs, 4000);
    recorder_->stop();
    std::lock_guard<std::mutex> lock(device_.mu);
    device_.primed = 0;
  }
}

// A call still running at a poll is found so by a query of its end, never by asking for its elapsed time (an API
// error to compute-sanitizer, cudaErrorNotReady): the fake's events stay pending until released.
TEST_F(CapturedCalls, ARunningCallIsQueriedNotAskedForItsTime) {
  make(options());
  device_.recordsPending = true;  // the call's start and end still running
  recorder_->end(recorder_->begin(0, kEager, identity(1)), {});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // many polls
  EXPECT_EQ(out_.size(), 0u);
  {
    std::lock_guard<std::mutex> lock(device_.mu);
    EXPECT_EQ(device_.elapsedErrors, 0);
    EXPECT_EQ(device_.eagerRecorded.size(), 2u);
    for (FakeEvent* e : device_.eagerRecorded) e->pending = false;
  }
  ASSERT_TRUE(waitFor(out_, 1));
  EXPECT_EQ(out_.timings[0].seq, 1u);
  EXPECT_GT(out_.timings[0].durationNs, 0);
}

// The poll thread finds where a stream's finished calls end by bisection: a few queries per pass, whatever the number
// of calls in flight, and every finished call written, in order, none of those still running.
TEST_F(CapturedCalls, FinishedCallsOfAStreamAreFoundInAFewQueriesAPass) {
  CallRecorder::Options o = options();
  o.pollMicros = 5000;  // few passes, so that they can be counted
  make(o);
  device_.recordsPending = true;
  for (uint64_t seq = 0; seq < 256; ++seq) recorder_->end(recorder_->begin(0, kEager, identity(seq)), {});
  std::this_thread::sleep_for(std::chrono::milliseconds(12));
  int before = 0;
  {
    std::lock_guard<std::mutex> lock(device_.mu);
    ASSERT_EQ(device_.eagerOrder.size(), 512u);
    for (size_t i = 0; i < 200; ++i) device_.eagerOrder[i]->pending = false;  // the first 100 calls are done
    before = device_.queries;
  }
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(waitFor(out_, 100));
  std::this_thread::sleep_for(std::chrono::milliseconds(12));  // two more passes: nothing else may be written
  {
    std::lock_guard<std::mutex> lock(device_.mu);
    const auto passes =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count() / 5 + 2;
    EXPECT_EQ(out_.size(), 100u);
    EXPECT_LE(device_.queries - before, passes * 10) << "about log2(256) queries a pass, " << passes << " passes";
    EXPECT_EQ(device_.elapsedErrors, 0);
    for (FakeEvent* e : device_.eagerOrder) e->pending = false;
  }
  ASSERT_TRUE(waitFor(out_, 256));
  for (size_t i = 0; i < out_.timings.size(); ++i) EXPECT_EQ(out_.timings[i].seq, i);
}

TEST_F(CapturedCalls, AStartNewerThanItsEndIsWaitedOut) {
  make(options());
  device_.capturingStreams.insert(kCaptured);
  CallRecorder::Span* span = recorder_->begin(0, kCaptured, identity(3));
  ASSERT_NE(span, nullptr);
  recorder_->end(span, {});
  device_.capturingStreams.clear();
  // The next launch's start node has run, its end not yet: the end still shows the previous launch's time.
  device_.stamp({900'000, 800'000});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(out_.size(), 0u) << "start newer than end: not a duration";
  device_.launch(2500);
  ASSERT_TRUE(waitFor(out_, 1));
  EXPECT_EQ(out_.timings[0].durationNs, 2500);
}

// A graph captured and never launched does not hold up a later capture's calls, and costs the background thread one
// look per pass, not one per call.
TEST_F(CapturedCalls, AGraphNeverLaunchedNeitherBlocksAnotherNorCostsAPollPerCall) {
  make(options());
  std::vector<CallRecorder::Span*> warm;  // the pool grows outside captures only: 60 calls in flight at once
  for (uint64_t seq = 0; seq < 60; ++seq) warm.push_back(recorder_->begin(0, kEager, identity(1000 + seq)));
  for (CallRecorder::Span* span : warm) recorder_->abandon(span);
  device_.capturingStreams.insert(kCaptured);
  device_.captureIdNow = 1;
  for (uint64_t seq = 0; seq < 50; ++seq) recorder_->end(recorder_->begin(0, kCaptured, identity(seq)), {});
  device_.captureIdNow = 2;  // a second capture on the same stream
  CallRecorder::Span* later = recorder_->begin(0, kCaptured, identity(50));
  ASSERT_NE(later, nullptr);
  recorder_->end(later, {});
  device_.capturingStreams.clear();
  int before = 0;
  {
    std::lock_guard<std::mutex> lock(device_.mu);
    before = device_.queries;
  }
  const auto slept = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // about 30 passes (more if the sleep overran)
  const auto passes = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - slept);
  {
    std::lock_guard<std::mutex> lock(device_.mu);
    EXPECT_LT(device_.queries - before, (passes.count() + 1) * 2 * 4)
        << "captured calls looked at one by one every pass";
  }
  device_.launch(7000, device_.graph.size() - 2);  // the second graph only
  ASSERT_TRUE(waitFor(out_, 1));
  EXPECT_EQ(out_.timings[0].seq, 50u);
  EXPECT_EQ(out_.timings[0].durationNs, 7000);
}

TEST_F(CapturedCalls, AGraphNeverLaunchedGetsNoDurationAtExit) {
  make(options());
  device_.capturingStreams.insert(kCaptured);
  recorder_->end(recorder_->begin(0, kCaptured, identity(4)), {});
  device_.capturingStreams.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(out_.size(), 0u);
  recorder_->finishCaptured();
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_TRUE(out_.timings[0].captured);
  EXPECT_EQ(out_.timings[0].durationNs, 0);
  EXPECT_EQ(recorder_->stats().capturedTimed, 0u);
  device_.launch(1000);  // too late: written once only
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(out_.size(), 1u);
}

TEST_F(CapturedCalls, OffPutsNothingIntoTheGraph) {
  CallRecorder::Options o = options();
  o.timeCaptured = false;
  make(o);
  device_.capturingStreams.insert(kCaptured);
  EXPECT_EQ(recorder_->begin(0, kCaptured, identity(5)), nullptr);
  EXPECT_TRUE(device_.graph.empty());
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_TRUE(out_.timings[0].captured);
  EXPECT_EQ(out_.timings[0].durationNs, 0);
}

TEST_F(CapturedCalls, AFailedCallLeavesItsEventsOutOfThePool) {
  make(options());
  device_.capturingStreams.insert(kCaptured);
  CallRecorder::Span* span = recorder_->begin(0, kCaptured, identity(6));
  ASSERT_NE(span, nullptr);
  recorder_->abandon(span);  // the real call failed: nothing written, and its start event stays out of the pool
  device_.capturingStreams.clear();
  for (uint64_t seq = 7; seq < 30; ++seq) recorder_->end(recorder_->begin(0, kEager, identity(seq)), {});
  ASSERT_TRUE(recorder_->drain(2'000'000'000));
  recorder_->finishCaptured();
  EXPECT_EQ(out_.size(), 23u);
  for (const Timing& t : out_.timings) EXPECT_FALSE(t.captured);
}

TEST_F(CapturedCalls, AnEmptyPoolUnderCaptureMeansNoDurationNotNewEvents) {
  CallRecorder::Options o = options();
  o.eventBatch = 2;
  make(o);  // prepareDevice made 3 events
  device_.capturingStreams.insert(kCaptured);
  CallRecorder::Span* first = recorder_->begin(0, kCaptured, identity(1));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(recorder_->begin(0, kCaptured, identity(2)), nullptr);  // one event left: untimed, written at once
  ASSERT_EQ(out_.size(), 1u);
  EXPECT_EQ(out_.timings[0].seq, 2u);
  EXPECT_EQ(out_.timings[0].durationNs, 0);
  recorder_->end(first, {});
  EXPECT_EQ(recorder_->stats().captured, 2u);
}

// The host record device takes the CUDA device's two ways by the same threshold (payload_copy_kernel_bytes), so that
// CI runs both: up to it a copy signals its own completion, above it (and for every size at 0) an event must follow.
// Through the recorder, both ways store the bytes the call received.
// The manifest's device_memory_* counters (payload_device_bytes: auto in a replay) come from the least free memory
// the recorder saw on the job's devices, whoever sampled it.
TEST_F(CapturedCalls, TheLeastFreeDeviceMemoryIsKept) {
  recorder_ = std::make_unique<CallRecorder>(
      device_, options(), [](const Timing&) {},
      [](const ranklens::trace::PayloadRef&, const void*, size_t, std::function<void()>) {});
  recorder_->sampleDeviceMemory();
  EXPECT_EQ(recorder_->stats().deviceMemoryTotal, 0u) << "no device seen yet: nothing to sample";
  recorder_->prepareDevice(0);
  for (const uint64_t gib : {8, 3, 5}) {
    device_.freeNow = gib << 30;
    recorder_->sampleDeviceMemory();
  }
  EXPECT_EQ(recorder_->stats().deviceMemoryLeastFree, 3ull << 30);
  EXPECT_EQ(recorder_->stats().deviceMemoryTotal, 16ull << 30);
  device_.freeNow = 2ull << 30;  // the background thread samples on its own every 100 ms
  for (int i = 0; i < 100 && recorder_->stats().deviceMemoryLeastFree != (2ull << 30); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(recorder_->stats().deviceMemoryLeastFree, 2ull << 30);
}

TEST(HostRecordDevice, CopiesSignalThemselvesUpToTheKernelThresholdAsOnAGpu) {
  unsigned char src[64] = {};
  for (int i = 0; i < 64; ++i) src[i] = static_cast<unsigned char>(i + 1);
  unsigned char dst[64] = {};
  uint64_t done = 0;
  ranklens::device::CopyOptions copies;
  copies.kernelMaxBytes = 32;
  auto host = ranklens::device::makeHostRecordDevice(copies);
  EXPECT_EQ(host->copyToHost(0, dst, src, 32, nullptr, &done, 7, false), RecordDevice::kSignalled);
  EXPECT_EQ(done, 7u);
  done = 0;
  EXPECT_EQ(host->copyToHost(0, dst, src, 33, nullptr, &done, 8, false), 0);
  EXPECT_EQ(done, 0u) << "an event orders this copy: no flag";
  EXPECT_EQ(memcmp(dst, src, 33), 0);
  copies.kernelMaxBytes = 0;
  host = ranklens::device::makeHostRecordDevice(copies);
  EXPECT_EQ(host->copyToHost(0, dst, src, 1, nullptr, &done, 9, false), 0);
  EXPECT_EQ(host->copyToHost(0, dst, src, 0, nullptr, &done, 10, false), RecordDevice::kSignalled) << "nothing to copy";
  // After a call on a 1-rank communicator its own threshold applies (payload_copy_kernel_bytes_one_rank, default 0).
  copies.kernelMaxBytes = 64 << 10;
  host = ranklens::device::makeHostRecordDevice(copies);
  done = 0;
  EXPECT_EQ(host->copyToHost(0, dst, src, 16, nullptr, &done, 11, true), 0) << "1 rank: the copy engine's way";
  EXPECT_EQ(done, 0u);
  EXPECT_EQ(host->copyToHost(0, dst, src, 16, nullptr, &done, 12, false), RecordDevice::kSignalled);
  copies.kernelMaxBytesOneRank = 16;
  host = ranklens::device::makeHostRecordDevice(copies);
  EXPECT_EQ(host->copyToHost(0, dst, src, 16, nullptr, &done, 13, true), RecordDevice::kSignalled);
  EXPECT_EQ(host->copyToHost(0, dst, src, 17, nullptr, &done, 14, true), 0);

  for (size_t threshold : {size_t{0}, size_t{1} << 20}) {
    SCOPED_TRACE("payload_copy_kernel_bytes " + std::to_string(threshold));
    copies.kernelMaxBytes = threshold;
    host = ranklens::device::makeHostRecordDevice(copies);
    std::mutex mu;
    std::vector<std::vector<unsigned char>> stored;
    CallRecorder::Options options;
    options.payloads = true;
    options.stagingBytes = 1 << 20;
    options.pollMicros = 50;
    CallRecorder recorder(
        *host, options, [](const Timing&) {},
        [&](const ranklens::trace::PayloadRef&, const void* data, size_t bytes, std::function<void()> release) {
          std::lock_guard<std::mutex> lock(mu);
          const auto* p = static_cast<const unsigned char*>(data);
          stored.emplace_back(p, p + bytes);
          release();
        });
    const ranklens::Status staged = recorder.prepareStaging();
    ASSERT_TRUE(staged.isOk()) << staged.message();
    recorder.prepareDevice(0);
    for (uint64_t seq = 0; seq < 3; ++seq) {
      CallRecorder::Span* span = recorder.begin(0, kEager, identity(seq));
      ASSERT_NE(span, nullptr);
      ranklens::timing::PayloadRequest request;
      request.ref.commId = 1;
      request.ref.seq = seq;
      request.src = src + seq;
      request.bytes = 16 + seq;
      recorder.end(span, {request});
    }
    ASSERT_TRUE(recorder.drain(2'000'000'000));
    recorder.stop();
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(stored.size(), 3u);
    for (size_t seq = 0; seq < 3; ++seq)
      EXPECT_EQ(stored[seq], std::vector<unsigned char>(src + seq, src + seq + 16 + seq)) << "call " << seq;
    EXPECT_EQ(recorder.stats().payloadsFailed, 0u);
  }
}

// A recorder on the host device with staging room for one 3000-byte payload at a time, whose payload sink keeps each
// region's release for the test to call (or drop).
class OnePayloadOfStaging {
 public:
  explicit OnePayloadOfStaging(bool waitWhenFull, size_t controlBytes = 0, size_t controlReserveBytes = 0) {
    CallRecorder::Options options;
    options.payloads = true;
    options.waitWhenFull = waitWhenFull;
    options.controlBytes = controlBytes;
    options.controlReserveBytes = controlReserveBytes;
    options.stagingBytes = 4096;
    options.pollMicros = 50;
    recorder = std::make_unique<CallRecorder>(
        *host, options, [](const Timing&) {},
        [this](const ranklens::trace::PayloadRef&, const void*, size_t, std::function<void()> release) {
          std::lock_guard<std::mutex> lock(mu);
          ++received;
          held.push_back(std::move(release));
        });
    const ranklens::Status staged = recorder->prepareStaging();
    EXPECT_TRUE(staged.isOk()) << staged.message();
    recorder->prepareDevice(0);
  }
  ~OnePayloadOfStaging() {
    {
      std::lock_guard<std::mutex> lock(mu);
      held.clear();  // regions still lent come back (the recorder's destructor would wait for them)
    }
    recorder.reset();
  }
  // A call with a payload of `bytes` (3000: staging holds one), waited out.
  void call(uint64_t seq, size_t bytes = 3000) {
    static unsigned char src[4096] = {1};
    ASSERT_LE(bytes, sizeof(src));
    CallRecorder::Span* span = recorder->begin(0, kEager, identity(seq));
    ASSERT_NE(span, nullptr);
    ranklens::timing::PayloadRequest request;
    request.ref.seq = seq;
    request.src = src;
    request.bytes = bytes;
    recorder->end(span, {request});
    ASSERT_TRUE(recorder->drain(2'000'000'000));
  }

  std::unique_ptr<ranklens::device::RecordDevice> host = ranklens::device::makeHostRecordDevice();
  std::unique_ptr<CallRecorder> recorder;
  std::mutex mu;
  std::vector<std::function<void()>> held;  // releases, under mu
  size_t received = 0;                      // under mu
};

// Staging lent to the payload sink stays taken until the sink releases it (a trace writer's worker copies it out
// later), or drops every copy of its release: with room for one payload, the next one is skipped while the first is
// held, and stored once it was given back either way.
TEST(CallRecorderStaging, ALentRegionComesBackWhenReleasedOrDropped) {
  OnePayloadOfStaging t(/*waitWhenFull=*/false);
  t.call(0);
  t.call(1);  // staging still lent out: skipped
  EXPECT_EQ(t.recorder->stats().payloadsSkippedFull, 1u);
  {
    std::lock_guard<std::mutex> lock(t.mu);
    ASSERT_EQ(t.held.size(), 1u);
    t.held[0]();  // released
  }
  t.call(2);
  {
    std::lock_guard<std::mutex> lock(t.mu);
    ASSERT_EQ(t.held.size(), 2u);
    t.held.clear();  // dropped without a call: the region comes back all the same
  }
  t.call(3);
  EXPECT_EQ(t.recorder->stats().payloadsSkippedFull, 1u);
  std::lock_guard<std::mutex> lock(t.mu);
  EXPECT_EQ(t.received, 3u);
}

// Under staging_full: wait the caller waits for a lent region to come back, and the recorder counts the wait and its
// length (the manifest's staging_waits and staging_wait_ns, which the end-of-recording messages report).
TEST(CallRecorderStaging, AWaitForRoomIsCountedWithItsLength) {
  OnePayloadOfStaging t(/*waitWhenFull=*/true);
  t.call(0);
  EXPECT_EQ(t.recorder->stats().waitsForStaging, 0u);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    std::lock_guard<std::mutex> lock(t.mu);
    t.held.at(0)();
  });
  t.call(1);  // waits until the first region is released
  releaser.join();
  const auto stats = t.recorder->stats();
  EXPECT_EQ(stats.waitsForStaging, 1u);
  EXPECT_EQ(stats.payloadsSkippedFull, 0u);
  EXPECT_GE(stats.stagingWaitNs, 30'000'000u);  // most of the releaser's 60 ms
  EXPECT_LT(stats.stagingWaitNs, 10'000'000'000u);
  std::lock_guard<std::mutex> lock(t.mu);
  EXPECT_EQ(t.received, 2u);
}

// With every payload stored, the control values (up to payload_max_bytes) keep a reserve of staging that larger
// payloads cannot take: staging full of a lent gradient still stores a control value, under skip and without a wait
// under wait (where the larger payload waits instead); a payload that would need the reserve is too large.
TEST(CallRecorderStaging, ControlPayloadsKeepARoomLargerOnesCannotTake) {
  for (const bool wait : {false, true}) {
    SCOPED_TRACE(wait ? "wait" : "skip");
    // 4096 bytes: the reserve is an eighth (512, below the 1024 asked for), so larger payloads have 3584.
    OnePayloadOfStaging t(wait, /*controlBytes=*/256, /*controlReserveBytes=*/1024);
    t.call(0, 3000);  // takes 3072 of the 3584, and stays lent
    std::thread larger;
    if (wait) {
      // Its 768 bytes would reach into the reserve: it waits (first, so that without a reserve it would take the
      // room the control values need).
      larger = std::thread([&] { t.call(1, 600); });
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    } else {
      t.call(1, 600);  // skipped
      EXPECT_EQ(t.recorder->stats().payloadsSkippedFull, 1u);
    }
    // A wrong wait for room would last for ever: the releaser ends it after 2 s, and the assertions below say so.
    std::mutex doneMu;
    std::condition_variable doneCv;
    bool done = false;
    std::thread releaser([&] {
      std::unique_lock<std::mutex> lock(doneMu);
      if (doneCv.wait_for(lock, std::chrono::seconds(2), [&] { return done; })) return;
      std::lock_guard<std::mutex> held(t.mu);
      t.held.clear();
    });
    t.call(2, 200);  // control values: stored at once, from the reserve
    t.call(3, 200);
    {
      std::lock_guard<std::mutex> lock(doneMu);
      done = true;
    }
    doneCv.notify_all();
    releaser.join();
    auto stats = t.recorder->stats();
    EXPECT_EQ(stats.waitsForStaging, 0u);
    EXPECT_EQ(stats.payloadsStaged, 3u);
    {
      std::lock_guard<std::mutex> lock(t.mu);
      EXPECT_EQ(t.received, 3u);
      t.held.clear();  // everything back; the waiting larger payload goes in
    }
    if (larger.joinable()) larger.join();
    EXPECT_EQ(t.recorder->stats().waitsForStaging, wait ? 1u : 0u);
    {
      std::lock_guard<std::mutex> lock(t.mu);
      t.held.clear();
    }
    const uint64_t staged = t.recorder->stats().payloadsStaged;
    t.call(4, 3500);  // 3584 with its flag, rounded: all a larger payload may have
    t.call(5, 256);   // the largest control value: in the reserve beside it
    t.call(6, 3600);  // would fit in staging only with the reserve
    stats = t.recorder->stats();
    EXPECT_EQ(stats.payloadsSkippedTooLarge, 1u);
    EXPECT_EQ(stats.payloadsStaged, staged + 2);
  }
}

// staging_bytes: auto. 256 MiB for small payloads; for every payload 2 GiB, at most a sixteenth of the host's memory
// shared by its ranks, at least 256 MiB.
TEST(AutoStagingBytes, SmallPayloadsOrEveryPayloadWithinTheHostsShare) {
  using ranklens::timing::autoStagingBytes;
  constexpr uint64_t MiB = 1ull << 20, GiB = 1ull << 30;
  EXPECT_EQ(autoStagingBytes(false, 128 * GiB, 1), 256 * MiB);
  EXPECT_EQ(autoStagingBytes(true, 128 * GiB, 1), 2 * GiB);   // one H200 host
  EXPECT_EQ(autoStagingBytes(true, 560 * GiB, 8), 2 * GiB);   // 8 GPUs: 4.4 GiB each would be the share
  EXPECT_EQ(autoStagingBytes(true, 64 * GiB, 8), 512 * MiB);  // a small host's share
  EXPECT_EQ(autoStagingBytes(true, 2 * GiB, 4), 256 * MiB);   // never below the small payloads' size
  EXPECT_EQ(autoStagingBytes(true, 0, 1), 2 * GiB);           // host memory unknown
  EXPECT_EQ(autoStagingBytes(true, 128 * GiB, 0), 2 * GiB);   // no launcher count: one rank
}

// Where the host will not pin the size asked for, auto takes half, then half again, down to its least; an explicit
// size is taken or refused whole.
TEST(CallRecorderStaging, AutoHalvesWhatCannotBePinnedDownToItsLeast) {
  for (const bool halving : {true, false}) {
    SCOPED_TRACE(halving ? "auto" : "explicit");
    CapturingDevice device;
    device.pinnable = 300u << 10;
    CallRecorder::Options options;
    options.payloads = true;
    options.stagingBytes = 2u << 20;
    options.stagingLeastBytes = halving ? 64u << 10 : 0;
    CallRecorder recorder(device, options, [](const Timing&) {}, {});
    const ranklens::Status staged = recorder.prepareStaging();
    EXPECT_EQ(staged.isOk(), halving) << staged.message();
    EXPECT_EQ(recorder.stagingBytes(), halving ? 256u << 10 : 0u);
    EXPECT_EQ(device.pinAttempts, halving ? std::vector<size_t>({2u << 20, 1u << 20, 512u << 10, 256u << 10})
                                          : std::vector<size_t>({2u << 20}));
  }
  CapturingDevice none;  // nothing can be pinned: auto stops at its least and says why
  CallRecorder::Options options;
  options.payloads = true;
  options.stagingBytes = 1u << 20;
  options.stagingLeastBytes = 256u << 10;
  CallRecorder recorder(none, options, [](const Timing&) {}, {});
  const ranklens::Status staged = recorder.prepareStaging();
  EXPECT_FALSE(staged.isOk());
  EXPECT_EQ(staged.code(), ranklens::Status::Code::kUnhandledCudaError);
  EXPECT_FALSE(recorder.prepareStaging().isOk());  // a later caller hears the same failure
  EXPECT_EQ(none.pinAttempts, std::vector<size_t>({1u << 20, 512u << 10, 256u << 10}));
  EXPECT_EQ(recorder.stagingBytes(), 0u);
}

}  // namespace

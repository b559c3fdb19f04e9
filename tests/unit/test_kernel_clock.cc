// SPDX-License-Identifier: Apache-2.0
// timing::KernelClock driven as NCCL's profiler drives it: tasks started inside a launch on the calling thread,
// channels started and stopped later (here and on another thread), and the recording ending with channels missing.
#include "ranklens/kernel_clock.h"
#include "ranklens/events.h"
#include "ranklens/recording.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

namespace {

using ranklens::timing::KernelClock;
using ranklens::trace::Timing;

struct Recorded {
  std::mutex mu;
  std::vector<Timing> timings;
  KernelClock::Sink sink() {
    return [this](const Timing& t) {
      std::lock_guard<std::mutex> lock(mu);
      timings.push_back(t);
    };
  }
};

Timing identity(uint64_t seq) {
  Timing t;
  t.commId = 3;
  t.seq = seq;
  return t;
}

KernelClock::Task task(const char* func, uint64_t bytes, const void* buffer, int root = -1) {
  KernelClock::Task t;
  t.func = func;
  t.bytes = bytes;
  t.buffer = buffer;
  t.root = root;
  return t;
}

// One call outside a group on communicator 3 (rank 0): expected, launched, its task started by NCCL.
void* launchOne(KernelClock& clock, void* context, uint64_t seq, const KernelClock::Task& t, int channels) {
  KernelClock::Span* span = clock.open(identity(seq));
  clock.expect(span, 3, 0, t);
  clock.beginLaunch();
  void* handle = clock.taskStarted(context, t, 0, channels);
  clock.endLaunch(true);
  return handle;
}

// Runs one task's channels: channel c from start + c to stop + c.
void runChannels(KernelClock& clock, void* taskHandle, int channels, uint64_t start, uint64_t stop) {
  for (int c = 0; c < channels; ++c) {
    void* ch = clock.channelStarted(taskHandle, start + c);
    clock.channelStopped(ch, stop + c);
    clock.stopped(ch);
  }
}

TEST(KernelClock, ACallIsTimedFromItsFirstChannelStartToItsLastStop) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(2, 1);
  int buffer = 0;
  KernelClock::Span* span = clock.open(identity(7));
  clock.expect(span, 3, 1, task("AllReduce", 64, &buffer));
  clock.beginLaunch();
  void* t = clock.taskStarted(context, task("AllReduce", 64, &buffer), 1, 3);
  ASSERT_NE(t, nullptr);
  clock.stopped(t);  // NCCL's host-side stop comes right after the launch
  clock.endLaunch(true);
  EXPECT_TRUE(out.timings.empty());  // no channel has reported yet
  std::thread proxy([&] { runChannels(clock, t, 3, 1000, 5000); });
  proxy.join();
  ASSERT_TRUE(clock.drain(1'000'000'000));
  ASSERT_EQ(out.timings.size(), 1u);
  EXPECT_EQ(out.timings[0].seq, 7u);
  EXPECT_EQ(out.timings[0].durationNs, 5002 - 1000);
  EXPECT_EQ(out.timings[0].clock, ranklens::trace::kClockKernel);
  EXPECT_EQ(out.timings[0].eventNs, -1);
  EXPECT_EQ(clock.stats().timed, 1u);
  clock.releaseContext(context);
}

// Timing.gapNs from the kernel clock: from the communicator's previous collective's last channel stop to this one's
// first channel start, when the previous one is seq - 1 (peer_pacing paces from it).
TEST(KernelClock, EachCollectiveCarriesItsGapFromThePreviousOnesStop) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(2, 0);
  int buffer = 0;
  const auto t = task("AllReduce", 64, &buffer);
  for (uint64_t seq : {0u, 1u, 3u}) {
    void* handle = launchOne(clock, context, seq, t, 2);
    clock.stopped(handle);
    runChannels(clock, handle, 2, 10'000 * (seq + 1), 10'000 * (seq + 1) + 4'000);
  }
  ASSERT_TRUE(clock.drain(1'000'000'000));
  ASSERT_EQ(out.timings.size(), 3u);
  EXPECT_EQ(out.timings[0].gapNs, -1);                         // the communicator's first
  EXPECT_EQ(out.timings[1].gapNs, 20'000 - (10'000 + 4'001));  // stop of seq 0 (its last channel) to start of seq 1
  EXPECT_EQ(out.timings[2].gapNs, -1);                         // seq 2 was not timed here
  clock.releaseContext(context);
}

TEST(KernelClock, ChannelsDoneBeforeTheLaunchEndsAreWrittenAtItsEnd) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(2, 0);
  KernelClock::Span* span = clock.open(identity(1));
  clock.expect(span, 3, 0, task("Broadcast", 8, nullptr, 1));
  clock.beginLaunch();
  void* t = clock.taskStarted(context, task("Broadcast", 8, nullptr, 1), 0, 1);
  runChannels(clock, t, 1, 100, 400);
  clock.stopped(t);
  EXPECT_TRUE(out.timings.empty());  // more tasks may still join the span until the launch ends
  clock.endLaunch(true);
  ASSERT_EQ(out.timings.size(), 1u);
  EXPECT_EQ(out.timings[0].durationNs, 300);
}

TEST(KernelClock, TasksFindTheirCallsByOperationSizePeerAndBuffer) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(4, 2);
  int a = 0, b = 0;
  KernelClock::Span* sendSpan = clock.open(identity(10));
  KernelClock::Span* recvSpan = clock.open(identity(11));
  clock.expect(sendSpan, 3, 2, task("Send", 256, &a, 1));
  clock.expect(recvSpan, 3, 2, task("Recv", 256, &b, 1));
  clock.expect(recvSpan, 3, 2, task("Recv", 256, &a, 3));
  clock.beginLaunch();
  // NCCL's order differs from the calls' order; the peer and the buffer decide.
  void* r3 = clock.taskStarted(context, task("Recv", 256, &a, 3), 2, 1);
  void* s1 = clock.taskStarted(context, task("Send", 256, &a, 1), 2, 1);
  void* r1 = clock.taskStarted(context, task("Recv", 256, &b, 1), 2, 1);
  EXPECT_EQ(clock.taskStarted(context, task("Recv", 512, &b, 1), 2, 1), nullptr);  // no such call: not ours
  clock.endLaunch(true);
  ASSERT_TRUE(r3 && s1 && r1);
  runChannels(clock, s1, 1, 0, 50);
  runChannels(clock, r1, 1, 10, 70);
  runChannels(clock, r3, 1, 20, 200);
  ASSERT_EQ(out.timings.size(), 2u);
  EXPECT_EQ(out.timings[0].seq, 10u);
  EXPECT_EQ(out.timings[0].durationNs, 50);
  EXPECT_EQ(out.timings[1].seq, 11u);
  EXPECT_EQ(out.timings[1].durationNs, 200 - 10);  // its two tasks
  EXPECT_EQ(clock.stats().foreignTasks, 1u);
}

TEST(KernelClock, AContextIsBoundToTheCommunicatorOfItsFirstTask) {
  Recorded out;
  KernelClock clock(out.sink());
  void* first = clock.commContext(2, 0);
  void* second = clock.commContext(2, 0);
  int x = 0;
  // Two communicators where this process is rank 0 of 2: the buffer binds each context to its communicator.
  KernelClock::Span* s0 = clock.open(identity(0));
  clock.expect(s0, 5, 0, task("AllReduce", 4, &x));
  KernelClock::Span* s1 = clock.open(identity(0));
  clock.expect(s1, 6, 0, task("AllReduce", 4, nullptr));
  clock.beginLaunch();
  void* t1 = clock.taskStarted(second, task("AllReduce", 4, nullptr), 0, 1);
  void* t0 = clock.taskStarted(first, task("AllReduce", 4, &x), 0, 1);
  clock.endLaunch(true);
  runChannels(clock, t0, 1, 0, 10);
  runChannels(clock, t1, 1, 0, 20);
  // Later, identical calls on both: each context takes only its own communicator's call.
  KernelClock::Span* later0 = clock.open(identity(1));
  clock.expect(later0, 5, 0, task("AllReduce", 4, nullptr));
  KernelClock::Span* later1 = clock.open(identity(1));
  clock.expect(later1, 6, 0, task("AllReduce", 4, nullptr));
  clock.beginLaunch();
  void* u1 = clock.taskStarted(second, task("AllReduce", 4, nullptr), 0, 1);
  void* u0 = clock.taskStarted(first, task("AllReduce", 4, nullptr), 0, 1);
  clock.endLaunch(true);
  runChannels(clock, u0, 1, 0, 30);
  runChannels(clock, u1, 1, 0, 40);
  ASSERT_EQ(out.timings.size(), 4u);
  std::vector<int64_t> durations;
  for (const Timing& t : out.timings) durations.push_back(t.durationNs);
  EXPECT_EQ(durations, (std::vector<int64_t>{10, 20, 30, 40}));
  EXPECT_EQ(clock.stats().timed, 4u);
}

TEST(KernelClock, ACallWithoutATaskIsWrittenUnmeasured) {
  Recorded out;
  KernelClock clock(out.sink());
  KernelClock::Span* span = clock.open(identity(4));
  clock.expect(span, 3, 0, task("AllReduce", 64, nullptr));
  clock.beginLaunch();
  clock.endLaunch(true);  // NCCL reported nothing
  ASSERT_EQ(out.timings.size(), 1u);
  EXPECT_EQ(out.timings[0].durationNs, -1);
  EXPECT_EQ(clock.stats().unmatched, 1u);
  EXPECT_EQ(clock.stats().timed, 0u);
}

TEST(KernelClock, FailedLaunchesAndCancelledSpansWriteNothing) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(2, 0);
  KernelClock::Span* failed = clock.open(identity(1));
  clock.expect(failed, 3, 0, task("AllReduce", 64, nullptr));
  clock.beginLaunch();
  clock.endLaunch(false);
  KernelClock::Span* cancelled = clock.open(identity(2));
  clock.expect(cancelled, 3, 0, task("AllGather", 64, nullptr));
  clock.cancel(cancelled);
  clock.beginLaunch();
  EXPECT_EQ(clock.taskStarted(context, task("AllGather", 64, nullptr), 0, 1), nullptr);
  clock.endLaunch(true);
  EXPECT_TRUE(out.timings.empty());
  EXPECT_TRUE(clock.drain(1'000'000));
  // Outside a launch, tasks are nobody's (another thread's group, or a graph replay).
  EXPECT_EQ(clock.taskStarted(context, task("AllGather", 64, nullptr), 0, 1), nullptr);
}

TEST(KernelClock, MissingChannelStopsAreWrittenUnmeasuredWhenTheRecordingEnds) {
  Recorded out;
  KernelClock clock(out.sink());
  void* context = clock.commContext(2, 0);
  void* t = launchOne(clock, context, 9, task("ReduceScatter", 128, nullptr), 2);
  void* ch = clock.channelStarted(t, 10);
  clock.channelStopped(ch, 90);
  EXPECT_FALSE(clock.drain(1'000'000));  // one channel of two has stopped
  EXPECT_EQ(clock.stats().pending, 1u);
  clock.abandonPending();
  ASSERT_EQ(out.timings.size(), 1u);
  EXPECT_EQ(out.timings[0].durationNs, -1);
  EXPECT_EQ(clock.stats().incomplete, 1u);
  EXPECT_EQ(clock.stats().pending, 0u);
  // The late channel still reports: it must neither write again nor touch a reused span.
  void* t2 = launchOne(clock, context, 10, task("ReduceScatter", 128, nullptr), 1);
  void* late = clock.channelStarted(t, 20);
  clock.channelStopped(late, 500);
  runChannels(clock, t2, 1, 0, 60);
  ASSERT_EQ(out.timings.size(), 2u);
  EXPECT_EQ(out.timings[1].seq, 10u);
  EXPECT_EQ(out.timings[1].durationNs, 60);
}

TEST(KernelClock, ManyThreadsLaunchWhileAProxyReportsChannels) {
  Recorded out;
  KernelClock clock(out.sink());
  constexpr int kThreads = 4, kCalls = 500;
  std::mutex queueMu;
  std::vector<void*> queue;
  bool done = false;
  std::thread proxy([&] {
    for (;;) {
      std::vector<void*> batch;
      {
        std::lock_guard<std::mutex> lock(queueMu);
        batch.swap(queue);
        if (batch.empty() && done) return;
      }
      for (void* t : batch) {
        runChannels(clock, t, 2, 100, 300);
        clock.stopped(t);
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      void* context = clock.commContext(2, i);
      for (int c = 0; c < kCalls; ++c) {
        KernelClock::Span* span = clock.open(identity(c));
        clock.expect(span, 100 + i, i, task("AllReduce", 4, nullptr));
        clock.beginLaunch();
        void* t = clock.taskStarted(context, task("AllReduce", 4, nullptr), i, 2);
        clock.endLaunch(true);
        std::lock_guard<std::mutex> lock(queueMu);
        queue.push_back(t);
      }
    });
  }
  for (auto& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(queueMu);
    done = true;
  }
  proxy.join();
  ASSERT_TRUE(clock.drain(1'000'000'000));
  ASSERT_EQ(out.timings.size(), static_cast<size_t>(kThreads * kCalls));
  for (const Timing& t : out.timings) EXPECT_EQ(t.durationNs, 201);
}

// The calls the kernel clock times, by NCCL's spelling of their function; grouped Send/Recv ops keep events.
TEST(KernelClockFunc, NcclNamesAndNoneForGroupedOps) {
  using ranklens::events::Op;
  using ranklens::timing::kernelClockFunc;
  EXPECT_STREQ(kernelClockFunc(static_cast<int>(Op::kAllReduce)), "AllReduce");
  EXPECT_STREQ(kernelClockFunc(static_cast<int>(Op::kReduceScatter)), "ReduceScatter");
  EXPECT_STREQ(kernelClockFunc(static_cast<int>(Op::kRecv)), "Recv");
  for (Op grouped : {Op::kAlltoAll, Op::kGather, Op::kScatter})
    EXPECT_EQ(kernelClockFunc(static_cast<int>(grouped)), nullptr);
  EXPECT_EQ(kernelClockFunc(-1), nullptr);
  EXPECT_EQ(kernelClockFunc(static_cast<int>(Op::kRecv) + 1), nullptr);
}

}  // namespace

// Replay learns which durations are kernel time (Timing.clock, trace 1.4): it adds its hold's launch to those.
TEST(KernelClockTrace, ARecordingKnowsWhichDurationsAreKernelTime) {
  using namespace ranklens::trace;
  const std::string dir = ::testing::TempDir() + "/kernel-clock-" + std::to_string(getpid()) + "/rank0";
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  Manifest m;
  m.mode = "record";
  std::string error;
  std::unique_ptr<TraceWriter> w;
  error = TraceWriter::create(dir, m, {}, &w).message();
  ASSERT_NE(w, nullptr) << error;
  for (uint64_t seq = 0; seq < 2; ++seq) {
    ranklens::events::Call c;
    c.seq = seq;
    c.op = static_cast<int>(ranklens::events::Op::kAllReduce);
    c.count = c.bytes = 64;
    w->append(RecordType::kCall, c);
    Timing t;
    t.seq = seq;
    t.op = c.op;
    t.durationNs = 1000 + static_cast<int64_t>(seq);
    t.clock = seq == 0 ? kClockEvents : kClockKernel;
    w->append(RecordType::kTiming, t);
  }
  ASSERT_TRUE(w->close().isOk());
  std::unique_ptr<ranklens::trace::Recording> recording;
  error = ranklens::trace::Recording::open(dir, -1, &recording).message();
  ASSERT_NE(recording, nullptr) << error;
  ASSERT_EQ(recording->calls().size(), 2u);
  EXPECT_EQ(recording->calls()[0].durationNs, 1000);
  EXPECT_FALSE(recording->calls()[0].kernelClock);
  EXPECT_EQ(recording->calls()[1].durationNs, 1001);
  EXPECT_TRUE(recording->calls()[1].kernelClock);
}

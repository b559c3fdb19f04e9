// SPDX-License-Identifier: Apache-2.0
// The CUDA stream device and the library's effects on real GPU memory. Skips itself without a GPU.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "ranklens/device.h"
#include "ranklens/call_recorder.h"
#include "ranklens/record_device.h"

namespace {

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!haveGpu()) GTEST_SKIP() << "no GPU";
    std::string why;
    device_ = ranklens::device::makeCudaDevice(&why);
    ASSERT_NE(device_, nullptr) << why;
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_) cudaStreamDestroy(stream_);
  }
  std::unique_ptr<ranklens::device::StreamDevice> device_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(CudaDevice, FillEveryElementSize) {
  for (size_t elem : {1, 2, 4, 8}) {
    const size_t count = 100003;  // not a multiple of the block size
    void* buf = nullptr;
    ASSERT_EQ(device_->alloc(&buf, count * elem), 0);
    const uint64_t pattern = 0x7FF8000000000000ull | 0x7FC0;
    ASSERT_EQ(device_->fill(buf, count, elem, pattern, stream_), 0) << ranklens::device::lastError();
    std::vector<unsigned char> host(count * elem);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buf, host.size(), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    for (size_t i : {size_t{0}, count / 2, count - 1}) EXPECT_EQ(memcmp(&host[i * elem], &pattern, elem), 0) << elem;
    device_->free(buf);
  }
}

TEST_F(CudaDevice, CopyIsStreamOrdered) {
  void *a = nullptr, *b = nullptr;
  const size_t bytes = 1 << 20;
  ASSERT_EQ(device_->alloc(&a, bytes), 0);
  ASSERT_EQ(device_->alloc(&b, bytes), 0);
  ASSERT_EQ(device_->fill(a, bytes / 4, 4, 0x3F800000, stream_), 0);  // 1.0f
  ASSERT_EQ(device_->copy(b, a, bytes, stream_), 0);
  std::vector<float> host(bytes / 4);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), b, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(host.front(), 1.0f);
  EXPECT_EQ(host.back(), 1.0f);
  device_->free(a);
  device_->free(b);
}

// Clone fills of all-gathers: replicate writes every slot but the source's own, of 16-byte multiples and not.
TEST_F(CudaDevice, ReplicateFillsEverySlotButTheSource) {
  for (size_t bytes : {size_t{1} << 16, size_t{1001}}) {
    const size_t slots = 8;
    char* buf = nullptr;
    ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&buf), bytes * slots), 0);
    ASSERT_EQ(cudaMemsetAsync(buf, 0, bytes * slots, stream_), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(buf + 3 * bytes, 7, bytes, stream_), cudaSuccess);  // slot 3 is the source (in place)
    ASSERT_EQ(device_->replicate(buf, buf + 3 * bytes, bytes, slots, bytes, stream_), 0)
        << ranklens::device::lastError();
    std::vector<char> host(bytes * slots);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buf, host.size(), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(std::count(host.begin(), host.end(), 7), static_cast<long>(host.size())) << bytes;
    char* other = nullptr;  // a source outside the slots: out of place
    ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&other), bytes), 0);
    ASSERT_EQ(cudaMemsetAsync(other, 9, bytes, stream_), cudaSuccess);
    ASSERT_EQ(device_->replicate(buf, other, bytes, 3, bytes, stream_), 0);
    ASSERT_EQ(cudaMemcpyAsync(host.data(), buf, host.size(), cudaMemcpyDeviceToHost, stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(std::count(host.begin(), host.begin() + 3 * bytes, 9), static_cast<long>(3 * bytes)) << bytes;
    EXPECT_EQ(std::count(host.begin() + 3 * bytes, host.end(), 7), static_cast<long>(5 * bytes)) << bytes;
    device_->free(other);
    device_->free(buf);
  }
}

// Value replay's device staging: a worker thread uploads pinned bytes on the device's own stream; once its fence has
// passed, a copy within the GPU on the program's stream restores them. Calibration times that copy too.
TEST_F(CudaDevice, UploadFromAnotherThreadThenRestoreWithinTheGpu) {
  const size_t bytes = (4 << 20) + 12;
  void* pinned = nullptr;
  void *staged = nullptr, *recv = nullptr;
  ASSERT_EQ(device_->allocHost(&pinned, bytes), 0);
  ASSERT_EQ(device_->alloc(&staged, bytes), 0);
  ASSERT_EQ(device_->alloc(&recv, bytes), 0);
  for (size_t i = 0; i < bytes; ++i) static_cast<unsigned char*>(pinned)[i] = static_cast<unsigned char>(i * 13 + 7);
  int ordinal = -1;
  ASSERT_EQ(device_->currentDevice(&ordinal), 0);
  uint64_t token = 0;
  int err = -1;
  std::thread worker([&] { err = device_->upload(staged, pinned, bytes, ordinal, &token); });
  worker.join();
  ASSERT_EQ(err, 0) << ranklens::device::lastError();
  for (int polls = 0; !device_->passed(token); ++polls) ASSERT_LT(polls, 10'000'000) << "upload never completed";
  ASSERT_EQ(device_->copy(recv, staged, bytes, stream_), 0);
  std::vector<unsigned char> back(bytes);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), recv, bytes, cudaMemcpyDeviceToHost, stream_), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(memcmp(back.data(), pinned, bytes), 0);
  uint64_t bad = 0;
  EXPECT_NE(device_->upload(staged, pinned, bytes, 1 << 20, &bad), 0) << "an ordinal out of range is refused";
  const auto c = device_->calibrate();
  EXPECT_GT(c.deviceCopyFixedNs, 0);
  EXPECT_GT(c.copyNsPerByte, c.deviceCopyNsPerByte) << "a copy within the GPU is faster per byte than from the host";
  device_->free(staged);
  device_->free(recv);
  device_->freeHost(pinned);
}

// Behaviour, not a benchmark: a hold keeps the stream busy at least as long as asked, and holds on two streams
// overlap instead of serialising (the reason holds are kernels, not host callbacks).
TEST_F(CudaDevice, HoldsLastAndOverlap) {
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  cudaEvent_t start, endA, endB;
  cudaEventCreate(&start);
  cudaEventCreate(&endA);
  cudaEventCreate(&endB);
  ASSERT_EQ(device_->hold(1000, "AllReduce", stream_), 0);  // warm-up launch
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const uint64_t holdNs = 5'000'000;
  cudaEventRecord(start, stream_);
  cudaStreamWaitEvent(other, start, 0);
  ASSERT_EQ(device_->hold(holdNs, "AllReduce", stream_), 0);
  ASSERT_EQ(device_->hold(holdNs, "AllGather", other), 0);
  cudaEventRecord(endA, stream_);
  cudaEventRecord(endB, other);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float msA = 0, msB = 0;
  cudaEventElapsedTime(&msA, start, endA);
  cudaEventElapsedTime(&msB, start, endB);
  EXPECT_GE(msA, 5.0f);
  EXPECT_GE(msB, 5.0f);
  EXPECT_LT(std::max(msA, msB), 7.5f) << "two 5 ms holds on two streams should overlap";
  cudaStreamDestroy(other);
}

// peer_pacing on the GPU: a 1 ms collective starts the chain; the next, whose peers arrive 5 ms after it ended and
// whose last arrival took 1 ms, ends about 6 ms after the first ended, though its own duration is 0.5 ms; a third
// whose peers arrived at once (gap 0) ends its 1 ms last-arrival duration after its own arrival.
TEST_F(CudaDevice, PacedHoldsWaitForTheirPeersRecordedPace) {
  uint64_t chain = 0;
  ASSERT_EQ(device_->paceChain(&chain), 0) << ranklens::device::lastError();
  ASSERT_NE(chain, 0u);
  cudaEvent_t start, first, second, third;
  for (cudaEvent_t* e : {&start, &first, &second, &third}) cudaEventCreate(e);
  auto paced = [&](uint64_t index, uint64_t ownNs, bool known, int64_t gapNs, uint64_t lastNs) {
    ranklens::device::HoldRequest r;
    r.nanoseconds = ownNs;
    r.label = "AllReduce";
    EXPECT_EQ(device_->arrive(stream_, false, &r.arrival), 0);
    r.pace = {chain, index, known, gapNs, lastNs};
    EXPECT_EQ(device_->hold(r, stream_), 0);
  };
  cudaEventRecord(start, stream_);
  paced(1, 1'000'000, false, 0, 0);
  cudaEventRecord(first, stream_);
  paced(2, 500'000, true, 5'000'000, 1'000'000);
  cudaEventRecord(second, stream_);
  paced(3, 3'000'000, true, 0, 1'000'000);
  cudaEventRecord(third, stream_);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  float ms1 = 0, ms2 = 0, ms3 = 0;
  cudaEventElapsedTime(&ms1, start, first);
  cudaEventElapsedTime(&ms2, first, second);
  cudaEventElapsedTime(&ms3, second, third);
  EXPECT_NEAR(ms1, 1.0f, 0.1f);
  EXPECT_NEAR(ms2, 6.0f, 0.1f) << "the peers arrived 5 ms after the first ended, then 1 ms";
  EXPECT_NEAR(ms3, 1.0f, 0.1f) << "the peers were there: the last arrival's 1 ms, not the own 3 ms";
  for (cudaEvent_t e : {start, first, second, third}) cudaEventDestroy(e);
}

// An NCCL-shaped hold (24 blocks of 640 threads, each with an SM's whole shared memory) launches and lasts as asked;
// a second one on another stream cannot share those SMs' shared memory yet still runs beside it (132 SMs).
TEST(CudaHoldShape, NcclShapedHoldsLaunchAndLast) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  ranklens::device::HoldShape shape;
  shape.blocks = 24;
  shape.threads = 640;
  shape.sharedBytes = ranklens::device::HoldShape::kSharedSm;
  auto device = ranklens::device::makeCudaDevice(&why, ranklens::device::Completion::kKernel, shape);
  ASSERT_NE(device, nullptr) << why;
  cudaStream_t a, b;
  ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
  cudaEvent_t start, end;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  ASSERT_EQ(device->hold(1000, "AllReduce", a), 0) << ranklens::device::lastError();  // warm-up
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  cudaEventRecord(start, a);
  cudaStreamWaitEvent(b, start, 0);
  ASSERT_EQ(device->hold(2'000'000, "AllReduce", a), 0);
  ASSERT_EQ(device->hold(2'000'000, "AllGather", b), 0);
  cudaEvent_t endB;
  cudaEventCreate(&endB);
  cudaEventRecord(endB, b);
  cudaStreamWaitEvent(a, endB, 0);
  cudaEventRecord(end, a);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, end);
  EXPECT_GE(ms, 2.0f);
  EXPECT_LT(ms, 3.5f) << "two 24-block holds fit side by side on an H200's 132 SMs";
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// How long (ms, by events around it) a 1 ms hold of NCCL's launch shape holds its stream when it is enqueued 0.5 ms
// into a 3 ms hold that takes every SM (64 KiB of shared memory on each: a one-thread mark still fits beside it, an
// NCCL-sized block does not). -1 on a failure (reported).
float queuedNcclShapedHoldMs(bool fromStart) {
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  std::string why;
  ranklens::device::HoldShape everySm;
  everySm.blocks = sms;
  everySm.sharedBytes = 64 << 10;
  ranklens::device::HoldShape ncclLike;
  ncclLike.blocks = 24;
  ncclLike.threads = 544;
  ncclLike.sharedBytes = ranklens::device::HoldShape::kSharedSm;
  ncclLike.fromStart = fromStart;
  auto blocker = ranklens::device::makeCudaDevice(&why, ranklens::device::Completion::kKernel, everySm);
  auto held = ranklens::device::makeCudaDevice(&why, ranklens::device::Completion::kKernel, ncclLike);
  EXPECT_TRUE(blocker && held) << why;
  if (!blocker || !held) return -1;
  cudaStream_t a, b;
  EXPECT_EQ(cudaStreamCreate(&a), cudaSuccess);
  EXPECT_EQ(cudaStreamCreate(&b), cudaSuccess);
  EXPECT_EQ(held->hold(1000, "AllReduce", a), 0);  // warm-up (allocates the stamps)
  EXPECT_EQ(blocker->hold(1000, "Hold", b), 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  EXPECT_EQ(blocker->hold(3'000'000, "Hold", b), 0);
  std::this_thread::sleep_for(std::chrono::microseconds(500));  // the blocker holds every SM by now
  cudaEventRecord(before, a);
  EXPECT_EQ(held->hold(1'000'000, "AllReduce", a), 0);
  cudaEventRecord(after, a);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  float ms = 0;
  cudaEventElapsedTime(&ms, before, after);
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
  return ms;
}

// A many-block hold that has to wait for SMs still ends at its arrival plus its duration: the recorded duration
// already contains such a wait (NCCL's kernels queue for SMs too), so it is not counted twice.
TEST(CudaHoldShape, HoldQueuedBehindBusySmsEndsAtItsDeadline) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  const float ms = queuedNcclShapedHoldMs(false);
  // Arrival at ~0.5 ms, deadline ~1.5 ms, SMs free at 3 ms: the hold ends when it gets them (about 2.5 ms after
  // its arrival); counted from its own start it would end a millisecond later.
  EXPECT_LT(ms, 3.2f);
  EXPECT_GE(ms, 1.0f);
}

// hold_from: start. The same queued hold counts its duration from its own start: it ends its whole duration after
// it got the SMs, as NCCL's kernel would when the wait for SMs was not in the recording (another program's).
TEST(CudaHoldShape, HoldFromStartQueuedBehindBusySmsLastsItsWholeDuration) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  const float ms = queuedNcclShapedHoldMs(true);
  EXPECT_GE(ms, 3.2f);  // SMs free ~2.5 ms after the arrival, then the whole millisecond
  EXPECT_LT(ms, 4.5f);
}

// A marked hold: the copy enqueued between the mark and the hold runs within the held duration, not before it.
TEST_F(CudaDevice, MarkedHoldContainsTheCopyBeforeIt) {
  const size_t bytes = 1ull << 30;
  void *src = nullptr, *dst = nullptr;
  ASSERT_EQ(device_->alloc(&src, bytes), 0);
  ASSERT_EQ(device_->alloc(&dst, bytes), 0);
  ASSERT_EQ(cudaMemset(src, 0x5a, bytes), cudaSuccess);  // copied: initialised (compute-sanitizer's initcheck)
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  auto timed = [&](bool marked) {
    cudaEventRecord(before, stream_);
    ranklens::device::HoldRequest hold;
    hold.nanoseconds = 2'000'000;
    hold.label = "AllGather";
    if (marked) EXPECT_EQ(device_->arrive(stream_, false, &hold.arrival), 0);
    EXPECT_EQ(device_->copy(dst, src, bytes, stream_), 0);
    EXPECT_EQ(device_->hold(hold, stream_), 0);
    cudaEventRecord(after, stream_);
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, before, after);
    return ms;
  };
  timed(true);  // warm-up
  const float copyMs = [&] {
    cudaEventRecord(before, stream_);
    device_->copy(dst, src, bytes, stream_);
    cudaEventRecord(after, stream_);
    cudaStreamSynchronize(stream_);
    float ms = 0;
    cudaEventElapsedTime(&ms, before, after);
    return ms;
  }();
  const float markedMs = timed(true), unmarkedMs = timed(false);
  ASSERT_GT(copyMs, 0.1f) << "the copy must take long enough to tell the two apart";
  EXPECT_LT(markedMs, 2.0f + 0.5f * copyMs) << "copy " << copyMs << " ms";
  EXPECT_GE(markedMs, 2.0f);
  EXPECT_GE(unmarkedMs, 2.0f + 0.9f * copyMs);
  device_->free(src);
  device_->free(dst);
}

// A call's small copies after its (deferred) arrival mark go into its hold's launch, whatever their alignment;
// one too large for it, or a fifth, is a copy of its own after the mark. All land, in order, and the hold still
// lasts its duration from the arrival.
TEST_F(CudaDevice, SmallCopiesAfterAMarkGoIntoTheHold) {
  const size_t bytes = 64 << 10;
  unsigned char *src = nullptr, *dst = nullptr;
  ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&src), bytes), 0);
  ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&dst), bytes), 0);
  std::vector<unsigned char> pattern(bytes);
  for (size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<unsigned char>(i * 7 + 3);
  ASSERT_EQ(cudaMemcpy(src, pattern.data(), bytes, cudaMemcpyHostToDevice), cudaSuccess);
  struct Case {
    size_t dst, src, bytes;
  };
  // 16-byte elements at the one-warp limit (8 KiB), 4-byte, odd sizes and offsets: the hold's own copies. Then a
  // fifth (four go into one launch), one over the limit, and one that overwrites part of an earlier one (order).
  const std::vector<Case> inHold = {{0, 0, 8192}, {8192, 8192, 4}, {8200, 100, 101}, {9001, 5, 3}};
  std::vector<Case> more = inHold;
  for (const Case& c : std::vector<Case>{{32768, 0, 64}, {16384, 0, 8208}, {8192, 40000, 2}}) more.push_back(c);
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  ranklens::device::HoldRequest hold;
  for (const auto& cases : {inHold, more}) {
    ASSERT_EQ(cudaMemset(dst, 0, bytes), cudaSuccess);
    cudaEventRecord(before, stream_);
    hold = {};
    hold.nanoseconds = 200'000;
    hold.label = "AllGather";
    ASSERT_EQ(device_->arrive(stream_, false, &hold.arrival), 0);
    ASSERT_NE(hold.arrival, 0u);
    for (const auto& c : cases) ASSERT_EQ(device_->copy(dst + c.dst, src + c.src, c.bytes, stream_), 0);
    ASSERT_EQ(device_->hold(hold, stream_), 0) << ranklens::device::lastError();
    ASSERT_EQ(device_->settle(), 0);
    cudaEventRecord(after, stream_);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    std::vector<unsigned char> expected(bytes, 0), back(bytes);
    for (const auto& c : cases) memcpy(&expected[c.dst], &pattern[c.src], c.bytes);
    ASSERT_EQ(cudaMemcpy(back.data(), dst, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(back[i], expected[i]) << "byte " << i << " of " << cases.size();
    float ms = 0;
    cudaEventElapsedTime(&ms, before, after);
    EXPECT_GE(ms, 0.2f);
    EXPECT_LT(ms, 1.0f);
  }
  uint64_t stamp = 0;
  ASSERT_EQ(cudaMemcpy(&stamp, reinterpret_cast<void*>(hold.arrival), 8, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_NE(stamp, 0u) << "the launch that stood for the mark stamps it";
  device_->free(src);
  device_->free(dst);
}

// A call that marked and held nothing: settle() launches the mark with its copies. A fence behind the deferred
// mark has not passed before that, even with the GPU idle; after it, it passes.
TEST_F(CudaDevice, SettleEnqueuesAMarkWhoseCallHeldNothingAndItsFences) {
  int *src = nullptr, *dst = nullptr;
  ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&src), 64), 0);
  ASSERT_EQ(device_->alloc(reinterpret_cast<void**>(&dst), 64), 0);
  const int value = 0x5eed;
  ASSERT_EQ(cudaMemcpy(src, &value, 4, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(dst, 0, 64), cudaSuccess);
  uint64_t arrival = 0, fence = 0;
  ASSERT_EQ(device_->arrive(stream_, false, &arrival), 0);
  ASSERT_EQ(device_->copy(dst, src, 4, stream_), 0);
  ASSERT_EQ(device_->fence(stream_, &fence), 0);
  ASSERT_EQ(device_->hold(0, "AllReduce", stream_), 0);  // nothing held: the mark stays deferred or is launched
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int copied = 0;
  ASSERT_EQ(device_->settle(), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(device_->passed(fence));
  ASSERT_EQ(cudaMemcpy(&copied, dst, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(copied, value);

  ASSERT_EQ(device_->arrive(stream_, false, &arrival), 0);
  ASSERT_EQ(device_->copy(dst + 1, src, 4, stream_), 0);
  ASSERT_EQ(device_->fence(stream_, &fence), 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_FALSE(device_->passed(fence)) << "the copy before the fence is not enqueued yet";
  ASSERT_EQ(device_->settle(), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(device_->passed(fence));
  ASSERT_EQ(cudaMemcpy(&copied, dst + 1, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(copied, value);
  EXPECT_EQ(device_->settle(), 0) << "nothing left to enqueue";
  device_->free(src);
  device_->free(dst);
}

// hold_traffic: the hold moves memory at the calibrated rate and still ends at its deadline, however large its call.
TEST(CudaHoldShape, TrafficHoldsEndOnTime) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  ranklens::device::HoldShape shape;
  shape.blocks = 24;
  shape.threads = 544;
  shape.sharedBytes = 0;
  shape.traffic = 2;
  auto device = ranklens::device::makeCudaDevice(&why, ranklens::device::Completion::kKernel, shape);
  ASSERT_NE(device, nullptr) << why;
  const auto calibration = device->calibrate();
  ASSERT_GT(calibration.trafficNsPerByte, 0) << ranklens::device::lastError();
  EXPECT_LT(calibration.trafficNsPerByte, 1.0) << "24 x 544 threads move well over 1 GB/s";
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  for (uint64_t callBytes : {uint64_t{64} << 20, uint64_t{64} << 30}) {  // fits in 2 ms; far more than fits
    ranklens::device::HoldRequest hold;
    hold.nanoseconds = 2'000'000;
    hold.label = "AllReduce";
    hold.callBytes = callBytes;
    cudaEventRecord(before, stream);
    ASSERT_EQ(device->arrive(stream, false, &hold.arrival), 0);
    ASSERT_EQ(device->hold(hold, stream), 0) << ranklens::device::lastError();
    cudaEventRecord(after, stream);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    float ms = 0;
    cudaEventElapsedTime(&ms, before, after);
    EXPECT_GE(ms, 2.0f) << callBytes;
    EXPECT_LT(ms, 2.3f) << callBytes << " bytes: the traffic must not lengthen the hold";
  }
  cudaStreamDestroy(stream);
}

// Through the public API on device memory (CTest sets RANKLENS_DEVICE=cuda; fill is clone by default).
TEST(CudaEffects, AllGatherClonesIntoEverySlot) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  // A real libnccl.so.2 found first on the library path would wait forever for 7 peers: fail at once instead.
  Dl_info where{};
  ASSERT_NE(dlsym(RTLD_DEFAULT, "ranklensFlush"), nullptr)
      << "this test needs RankLens's libnccl.so.2, but "
      << (dladdr(reinterpret_cast<void*>(&ncclGetUniqueId), &where) && where.dli_fname ? where.dli_fname : "another")
      << " was loaded: put RankLens's nccl_fake/ build directory first on LD_LIBRARY_PATH";
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm;
  ASSERT_EQ(ncclCommInitRank(&comm, 8, id, 5), ncclSuccess);
  const size_t count = 4096;
  void *send = nullptr, *recv = nullptr;
  ASSERT_EQ(ncclMemAlloc(&send, count * 4), ncclSuccess);
  ASSERT_EQ(ncclMemAlloc(&recv, count * 4 * 8), ncclSuccess);
  std::vector<float> host(count, 2.5f);
  cudaStream_t stream;
  cudaStreamCreate(&stream);
  cudaMemcpy(send, host.data(), count * 4, cudaMemcpyHostToDevice);
  cudaMemset(recv, 0, count * 4 * 8);
  ASSERT_EQ(ncclAllGather(send, recv, count, ncclFloat, comm, stream), ncclSuccess);
  std::vector<float> out(count * 8);
  cudaMemcpyAsync(out.data(), recv, out.size() * 4, cudaMemcpyDeviceToHost, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  for (int slot = 0; slot < 8; ++slot) EXPECT_EQ(out[slot * count + 7], 2.5f) << slot;
  ASSERT_EQ(ncclRecv(recv, count, ncclBfloat16, 2, comm, stream), ncclSuccess);  // clone: Recv zero-fills
  std::vector<uint16_t> bf(count);
  cudaMemcpyAsync(bf.data(), recv, count * 2, cudaMemcpyDeviceToHost, stream);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(bf[0], 0);
  EXPECT_EQ(bf[count - 1], 0);
  ncclMemFree(send);
  ncclMemFree(recv);
  ncclCommDestroy(comm);
  cudaStreamDestroy(stream);
}

// Record mode's CUDA primitives (driver entry points for the per-call ones): the events around a hold time it, an
// event is pending until the stream reaches it, and a stream under graph capture reads as capturing.
TEST_F(CudaDevice, RecordDeviceTimesAHoldAndSeesCapture) {
  std::unique_ptr<ranklens::device::RecordDevice> rec;
  const ranklens::Status made = ranklens::device::makeCudaRecordDevice(&rec);
  ASSERT_TRUE(made.isOk()) << made.message();
  int dev = -1;
  ASSERT_EQ(rec->currentDevice(&dev), 0);
  std::vector<ranklens::device::RecordDevice::Event> events;
  ASSERT_EQ(rec->createEvents(dev, 2, &events), 0) << ranklens::device::lastError();
  EXPECT_FALSE(rec->capturing(stream_));
  ASSERT_EQ(rec->recordEvent(events[0], stream_), 0) << ranklens::device::lastError();
  ASSERT_EQ(device_->hold(2000000, "test", stream_), 0);  // 2 ms
  ASSERT_EQ(rec->recordEvent(events[1], stream_), 0) << ranklens::device::lastError();
  EXPECT_EQ(rec->queryEvent(events[1]), ranklens::device::RecordDevice::kPending);
  int64_t early = 0;
  EXPECT_EQ(rec->elapsedNs(events[0], events[1], &early), ranklens::device::RecordDevice::kPending);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_EQ(rec->queryEvent(events[1]), 0);
  int64_t ns = 0;
  ASSERT_EQ(rec->elapsedNs(events[0], events[1], &ns), 0) << ranklens::device::lastError();
  EXPECT_GE(ns, 1900000);
  EXPECT_LT(ns, 20000000);

  cudaStream_t captured;
  ASSERT_EQ(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(captured, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_TRUE(rec->capturing(captured));
  EXPECT_FALSE(rec->capturing(stream_));
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(captured, &graph), cudaSuccess);
  EXPECT_FALSE(rec->capturing(captured));
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(captured);
  for (auto e : events) rec->destroyEvent(e);
}

// A call captured into a CUDA graph is timed at a launch of the graph: the recorder's events become graph nodes, and
// the Timing (captured) written after the first launch has that launch's duration (a 2 ms hold inside the graph).
TEST_F(CudaDevice, RecorderTimesACapturedCallAtItsGraphsLaunch) {
  std::unique_ptr<ranklens::device::RecordDevice> rec;
  const ranklens::Status made = ranklens::device::makeCudaRecordDevice(&rec);
  ASSERT_TRUE(made.isOk()) << made.message();
  std::mutex mu;
  std::vector<ranklens::trace::Timing> timings;
  ranklens::timing::CallRecorder::Options options;
  ranklens::timing::CallRecorder recorder(
      *rec, options,
      [&](const ranklens::trace::Timing& t) {
        std::lock_guard<std::mutex> lock(mu);
        timings.push_back(t);
      },
      [](const ranklens::trace::PayloadRef&, const void*, size_t, std::function<void()>) {});
  int dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  recorder.prepareDevice(dev);
  cudaStream_t captured;
  ASSERT_EQ(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal), cudaSuccess);
  ranklens::trace::Timing identity;
  identity.commId = 1;
  identity.seq = 9;
  auto* span = recorder.begin(dev, captured, identity);
  ASSERT_NE(span, nullptr) << ranklens::device::lastError();
  ASSERT_EQ(device_->hold(2000000, "captured", captured), 0) << ranklens::device::lastError();
  recorder.end(span, {});
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(captured, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  size_t nodes = 0;
  ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &nodes), cudaSuccess);
  EXPECT_GE(nodes, 3u);  // the hold and the two event nodes
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(timings.empty()) << "written before any launch";
  }
  for (int launch = 0; launch < 2; ++launch) ASSERT_EQ(cudaGraphLaunch(exec, captured), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(captured), cudaSuccess);
  for (int i = 0; i < 200; ++i) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!timings.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  recorder.finishCaptured();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(timings.size(), 1u);
  EXPECT_TRUE(timings[0].captured);
  EXPECT_EQ(timings[0].seq, 9u);
  EXPECT_GE(timings[0].durationNs, 1900000);
  EXPECT_LT(timings[0].durationNs, 20000000);
  EXPECT_EQ(recorder.stats().capturedTimed, 1u);
  recorder.stop();
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(captured);
}

// A payload is what the call received, although the job's stream overwrites the buffer right after the call (its
// next kernel may): the copy is ordered after the call's end and before what follows on the stream, through the
// copy kernel (up to 64 KiB, aligned or not; at high and at the stream's priority) and through the copy engine
// (larger, or every size with payload_copy_kernel_bytes 0). The call (a 1 ms hold, then the "received" bytes
// written) is timed without the copy; one the recorder does not time (`timed` false: beginPayloads, the kernel
// clock's calls) gets no Timing record, and its payloads are stored all the same.
void expectStoresWhatTheCallReceived(ranklens::device::CopyOptions copies, cudaStream_t stream_,
                                     ranklens::device::StreamDevice* device_, bool timed = true) {
  std::unique_ptr<ranklens::device::RecordDevice> rec;
  const ranklens::Status made = ranklens::device::makeCudaRecordDevice(&rec, copies);
  ASSERT_TRUE(made.isOk()) << made.message();
  std::mutex mu;
  std::vector<ranklens::trace::Timing> timings;
  std::vector<std::vector<unsigned char>> stored;
  ranklens::timing::CallRecorder::Options options;
  options.payloads = true;
  options.stagingBytes = 16 << 20;
  ranklens::timing::CallRecorder recorder(
      *rec, options,
      [&](const ranklens::trace::Timing& t) {
        std::lock_guard<std::mutex> lock(mu);
        timings.push_back(t);
      },
      [&](const ranklens::trace::PayloadRef&, const void* data, size_t bytes, std::function<void()> release) {
        std::lock_guard<std::mutex> lock(mu);
        const auto* p = static_cast<const unsigned char*>(data);
        stored.emplace_back(p, p + bytes);
        release();
      });
  const ranklens::Status staged = recorder.prepareStaging();
  ASSERT_TRUE(staged.isOk()) << staged.message();
  int dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  recorder.prepareDevice(dev);
  constexpr size_t kBuffer = 4 << 20;
  unsigned char* received = nullptr;
  ASSERT_EQ(cudaMalloc(&received, kBuffer), cudaSuccess);
  struct Call {
    size_t offset, bytes;
  };
  const Call calls[] = {
      {0, 4}, {1, 7}, {0, 4096}, {3, 5000}, {0, 64 << 10}, {0, (64 << 10) + 16}, {5, 1 << 20}, {0, (3 << 20) + 3}};
  const int kCalls = static_cast<int>(sizeof(calls) / sizeof(calls[0]));
  for (int call = 0; call < kCalls; ++call) {
    ranklens::trace::Timing identity;
    identity.commId = 1;
    identity.seq = static_cast<uint64_t>(call);
    auto* span = timed ? recorder.begin(dev, stream_, identity) : recorder.beginPayloads(dev, stream_, identity);
    ASSERT_NE(span, nullptr) << ranklens::device::lastError();
    ASSERT_EQ(device_->hold(1000000, "call", stream_), 0);
    ASSERT_EQ(cudaMemsetAsync(received, 0x10 + call, kBuffer, stream_), cudaSuccess);
    ranklens::timing::PayloadRequest request;
    request.ref.commId = 1;
    request.ref.seq = static_cast<uint64_t>(call);
    request.src = received + calls[call].offset;
    request.bytes = calls[call].bytes;
    recorder.end(span, {request});
    ASSERT_EQ(cudaMemsetAsync(received, 0xEE, kBuffer, stream_), cudaSuccess);  // the job's next kernel
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  ASSERT_TRUE(recorder.drain(5'000'000'000));
  recorder.stop();
  cudaFree(received);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(stored.size(), static_cast<size_t>(kCalls));
  ASSERT_EQ(timings.size(), timed ? static_cast<size_t>(kCalls) : 0u);
  for (int call = 0; call < kCalls; ++call) {
    ASSERT_EQ(stored[call].size(), calls[call].bytes);
    EXPECT_EQ(std::count(stored[call].begin(), stored[call].end(), static_cast<unsigned char>(0x10 + call)),
              static_cast<long>(calls[call].bytes))
        << "call " << call << " (" << calls[call].bytes << " bytes at offset " << calls[call].offset << ")";
    if (!timed) continue;
    EXPECT_GE(timings[call].durationNs, 950000) << "call " << call;
    EXPECT_LT(timings[call].durationNs, 20000000) << "call " << call;
  }
  EXPECT_EQ(recorder.stats().payloadsStaged, static_cast<uint64_t>(kCalls));
  EXPECT_EQ(recorder.stats().payloadsFailed, 0u);
}

TEST_F(CudaDevice, RecorderStoresWhatTheCallReceivedBeforeTheStreamOverwritesIt) {
  ranklens::device::CopyOptions copies;
  {
    SCOPED_TRACE("copy kernel up to 64 KiB at high priority (the default)");
    expectStoresWhatTheCallReceived(copies, stream_, device_.get());
  }
  {
    SCOPED_TRACE("copy kernel at the stream's priority");
    copies.highPriority = false;
    expectStoresWhatTheCallReceived(copies, stream_, device_.get());
  }
  {
    SCOPED_TRACE("every payload through the copy engine");
    copies.kernelMaxBytes = 0;
    expectStoresWhatTheCallReceived(copies, stream_, device_.get());
  }
  {
    SCOPED_TRACE("calls the recorder does not time (the kernel clock's), both ways of copying");
    expectStoresWhatTheCallReceived(copies, stream_, device_.get(), false);
    expectStoresWhatTheCallReceived(ranklens::device::CopyOptions(), stream_, device_.get(), false);
  }
}

// A hold captured into a CUDA graph marks its arrival in a slot of its own: the graph writes it at every launch, so
// no eager mark may share it, however many follow (more than the eager ring holds). The graph's hold still lasts.
TEST_F(CudaDevice, ACapturedArrivalMarkKeepsItsSlot) {
  cudaStream_t captured;
  ASSERT_EQ(cudaStreamCreateWithFlags(&captured, cudaStreamNonBlocking), cudaSuccess);
  uint64_t warm = 0;
  ASSERT_EQ(device_->arrive(stream_, false, &warm), 0);  // the slots exist before the capture (no cudaMalloc inside it)
  ASSERT_EQ(device_->settle(), 0);
  ASSERT_EQ(cudaStreamBeginCapture(captured, cudaStreamCaptureModeGlobal), cudaSuccess);
  ranklens::device::HoldRequest hold;
  hold.nanoseconds = 1000000;
  hold.label = "captured";
  ASSERT_EQ(device_->arrive(captured, true, &hold.arrival), 0) << ranklens::device::lastError();
  ASSERT_NE(hold.arrival, 0u);
  ASSERT_EQ(device_->hold(hold, captured), 0) << ranklens::device::lastError();
  ASSERT_EQ(device_->settle(), 0);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(captured, &graph), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < (1 << 16) + 1000; ++i) {
    uint64_t arrival = 0;
    ASSERT_EQ(device_->arrive(stream_, false, &arrival), 0);
    ASSERT_NE(arrival, hold.arrival) << "eager mark " << i << " took the captured mark's slot";
    if (i % 4096 == 0) ASSERT_EQ(device_->settle(), 0);
  }
  ASSERT_EQ(device_->settle(), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  cudaEvent_t before, after;
  cudaEventCreate(&before);
  cudaEventCreate(&after);
  cudaEventRecord(before, captured);
  ASSERT_EQ(cudaGraphLaunch(exec, captured), cudaSuccess);
  cudaEventRecord(after, captured);
  ASSERT_EQ(cudaStreamSynchronize(captured), cudaSuccess);
  float ms = 0;
  cudaEventElapsedTime(&ms, before, after);
  EXPECT_GE(ms, 0.95f);
  EXPECT_LT(ms, 20.0f);
  cudaEventDestroy(before);
  cudaEventDestroy(after);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(captured);
}

// A call that marked its arrival and then neither held nor copied anything: settle() launches nothing (its stamp
// has no reader), and a fence behind the mark still passes.
TEST_F(CudaDevice, SettleLaunchesNoMarkWhenTheCallHeldAndCopiedNothing) {
  uint64_t arrival = 0, fence = 0;
  ASSERT_EQ(device_->arrive(stream_, false, &arrival), 0);
  ASSERT_NE(arrival, 0u);
  const unsigned long long sentinel = 0x5e771e;
  ASSERT_EQ(cudaMemcpy(reinterpret_cast<void*>(arrival), &sentinel, sizeof(sentinel), cudaMemcpyHostToDevice),
            cudaSuccess);
  ASSERT_EQ(device_->fence(stream_, &fence), 0);
  ASSERT_EQ(device_->hold(0, "AllReduce", stream_), 0);
  ASSERT_EQ(device_->settle(), 0);
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  EXPECT_TRUE(device_->passed(fence));
  unsigned long long stamp = 0;
  ASSERT_EQ(cudaMemcpy(&stamp, reinterpret_cast<void*>(arrival), sizeof(stamp), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(stamp, sentinel) << "a mark kernel ran for a call that held nothing";
}

}  // namespace

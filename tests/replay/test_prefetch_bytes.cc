// SPDX-License-Identifier: Apache-2.0
// prefetch_bytes: auto. The size comes from the recording's largest step of payloads (cut at its step markers) and
// the host's memory: 4x the step, at least 512 MiB, at most 8 GiB and an eighth of the host's memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "ranklens/payload_prefetcher.h"
#include "ranklens/events.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"
#include "recorded_rank.h"

namespace {

using namespace ranklens;
constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;

TEST(AutoArenaBytes, FourStepsWithinTheBounds) {
  const uint64_t host = 128 * kGiB;
  EXPECT_EQ(trace::autoArenaBytes(0, host), 512 * kMiB);
  EXPECT_EQ(trace::autoArenaBytes(100 * kMiB, host), 512 * kMiB);
  EXPECT_EQ(trace::autoArenaBytes(476 * kMiB, host), 4 * 476 * kMiB);  // GPT-2 small DDP, one H200
  EXPECT_EQ(trace::autoArenaBytes(5 * kGiB, host), 8 * kGiB);
  EXPECT_EQ(trace::autoArenaBytes(UINT64_MAX, host), 8 * kGiB);  // no overflow
  EXPECT_EQ(trace::autoArenaBytes(1 * kGiB, 16 * kGiB), 2 * kGiB) << "an eighth of the host";
  EXPECT_EQ(trace::autoArenaBytes(1 * kGiB, 2 * kGiB), 256 * kMiB) << "below 512 MiB on a small host";
  EXPECT_EQ(trace::autoArenaBytes(1 * kGiB, 0), 4 * kGiB) << "host memory unknown";
  EXPECT_GT(trace::hostMemoryBytes(), 0u);
}

// Payload calls at times 50 (before the first marker), 150 and 160 (step 0), 250 (step 1), 350 (step 2).
void writeSteps(const std::string& dir, bool markers) {
  auto w = test::recordedRank(dir, 0, 2);
  ASSERT_NE(w, nullptr);
  const std::vector<std::pair<int64_t, size_t>> payloads = {
      {50, 1000}, {150, 2000}, {160, 3000}, {250, 4000}, {350, 100}};
  if (markers)
    for (int64_t step = 0; step < 3; ++step) {
      events::Stage mark;
      mark.name = "step";
      mark.step = step;
      mark.timeNs = 100 * (step + 1);
      w->append(trace::RecordType::kStage, mark);
    }
  uint64_t seq = 0;
  for (const auto& [time, bytes] : payloads) {
    events::Call c;
    c.commId = 0;
    c.seq = seq++;
    c.op = static_cast<int>(events::Op::kAllReduce);
    c.datatype = 0;  // int8
    c.count = c.bytes = bytes;
    c.timeNs = time;
    w->append(trace::RecordType::kCall, c);
    trace::PayloadRef ref;
    ref.seq = c.seq;
    ref.op = c.op;
    ref.datatype = 0;
    ref.count = bytes;
    const std::vector<uint8_t> data(bytes, 7);
    ASSERT_TRUE(w->appendPayload(ref, data.data(), data.size(), trace::BackPressure::kWait));
  }
  ASSERT_TRUE(w->close().isOk());
}

TEST(LargestStepPayloadBytes, CutAtTheStepMarkersOrTheWholeRecording) {
  const std::string root = ::testing::TempDir() + "/prefetch-bytes-" + std::to_string(getpid());
  for (const bool markers : {true, false}) {
    const std::string dir = root + (markers ? "/marked" : "/unmarked") + "/rank0";
    writeSteps(dir, markers);
    std::string error;
    std::unique_ptr<trace::Recording> recording;
    error = trace::Recording::open(dir, -1, &recording).message();
    ASSERT_NE(recording, nullptr) << error;
    EXPECT_EQ(recording->largestStepPayloadBytes(), markers ? 5000u : 10100u) << (markers ? "marked" : "unmarked");
  }
  EXPECT_EQ(system(("rm -rf '" + root + "'").c_str()), 0);
}

}  // namespace

// payload_device_bytes: auto. GPT-2 small DDP on one H200 as measured: 475 MiB of payloads per step, a
// 1899 MiB pinned arena, the job using a small part of a 141 GiB GPU.
trace::DeviceStageSizing gpt2OnH200() {
  trace::DeviceStageSizing in;
  in.largestStepBytes = 475 * kMiB;
  in.arenaBytes = 1899 * kMiB;
  in.recordedTotalBytes = in.totalBytes = 141 * kGiB;
  in.recordedLeastFreeBytes = 121 * kGiB;  // the job (NCCL's buffers included) used 20 GiB at most
  in.freeBytes = 135 * kGiB;               // at the replay's first communicator
  return in;
}

TEST(AutoDeviceStageBytes, TwoStepsWhereTheRecordedJobLeftRoom) {
  std::string basis;
  EXPECT_EQ(trace::autoDeviceStageBytes(gpt2OnH200(), &basis), 950 * kMiB);
  EXPECT_NE(basis.find("used up to 20480 MiB of 144384 MiB"), std::string::npos) << basis;
  auto small = gpt2OnH200();
  small.largestStepBytes = 1 * kMiB;
  EXPECT_EQ(trace::autoDeviceStageBytes(small, nullptr), 64 * kMiB) << "at least 64 MiB";
  auto big = gpt2OnH200();
  big.largestStepBytes = 20 * kGiB;
  big.arenaBytes = 8 * kGiB;
  EXPECT_EQ(trace::autoDeviceStageBytes(big, &basis), 8 * kGiB) << "never more than the pinned arena";
  EXPECT_NE(basis.find("no more than the pinned memory"), std::string::npos) << basis;
  auto huge = big;
  huge.arenaBytes = UINT64_MAX;
  huge.largestStepBytes = UINT64_MAX;
  // Headroom: 141 GiB - 20 GiB used - 14.1 GiB margin, half of it.
  EXPECT_EQ(trace::autoDeviceStageBytes(huge, nullptr), (141 * kGiB - 20 * kGiB - 141 * kGiB / 10) / 2);
}

TEST(AutoDeviceStageBytes, NothingWhereTheRecordedJobFilledItsGpu) {
  // A job tuned to fill an 80 GiB GPU (76 GiB at its peak): the margin alone is 8 GiB, so nothing is staged.
  trace::DeviceStageSizing in = gpt2OnH200();
  in.recordedTotalBytes = in.totalBytes = 80 * kGiB;
  in.recordedLeastFreeBytes = 4 * kGiB;
  in.freeBytes = 30 * kGiB;
  std::string basis;
  EXPECT_EQ(trace::autoDeviceStageBytes(in, &basis), 0u);
  EXPECT_NE(basis.find("too little"), std::string::npos) << basis;
  // The same job replayed on a larger GPU has room again: 141 - 76 - 14.1 GiB, half of it, two steps wanted.
  in.totalBytes = 141 * kGiB;
  EXPECT_EQ(trace::autoDeviceStageBytes(in, nullptr), 950 * kMiB);
  // Recorded on the larger GPU, replayed on the smaller one: 76 GiB used of 80 leave nothing.
  in.recordedTotalBytes = 141 * kGiB;
  in.recordedLeastFreeBytes = 65 * kGiB;
  in.totalBytes = 80 * kGiB;
  EXPECT_EQ(trace::autoDeviceStageBytes(in, nullptr), 0u);
}

TEST(AutoDeviceStageBytes, TheOldFixedSizeWhereTheRecordingDoesNotSay) {
  trace::DeviceStageSizing in = gpt2OnH200();
  in.recordedTotalBytes = in.recordedLeastFreeBytes = 0;  // recorded before the counters, crashed, or no GPU
  std::string basis;
  EXPECT_EQ(trace::autoDeviceStageBytes(in, &basis), 256 * kMiB);
  EXPECT_NE(basis.find("does not say"), std::string::npos) << basis;
  in.recordedTotalBytes = 1 * kGiB;
  in.recordedLeastFreeBytes = 2 * kGiB;  // inconsistent: not believed
  EXPECT_EQ(trace::autoDeviceStageBytes(in, nullptr), 256 * kMiB);
  in.freeBytes = 300 * kMiB;  // ...but never more than half of what is free now
  EXPECT_EQ(trace::autoDeviceStageBytes(in, &basis), 150 * kMiB);
  EXPECT_NE(basis.find("half of the 300 MiB free now"), std::string::npos) << basis;
  in.arenaBytes = 16 * kMiB;  // a timing replay's control-value arena
  in.freeBytes = 0;           // unknown
  EXPECT_EQ(trace::autoDeviceStageBytes(in, nullptr), 16 * kMiB);
  in.arenaBytes = 8 * kMiB;
  EXPECT_EQ(trace::autoDeviceStageBytes(in, nullptr), 0u) << "under 16 MiB: no device staging";
}

TEST(HostMemoryInfo, ReadsThisHostsMemory) {
  uint64_t available = 0, total = 0;
  ASSERT_TRUE(trace::hostMemoryInfo(&available, &total));
  EXPECT_GT(available, 0u);
  EXPECT_LE(available, total);
  EXPECT_EQ(total / kMiB, trace::hostMemoryBytes() / kMiB / 1)
      << "MemTotal and _SC_PHYS_PAGES both count the kernel's totalram";
}

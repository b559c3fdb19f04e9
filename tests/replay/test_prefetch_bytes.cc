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
  EXPECT_EQ(trace::autoArenaBytes(476 * kMiB, host), 4 * 476 * kMiB);  // GPT-2 small DDP, one H200 (s22f)
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
  const std::vector<std::pair<int64_t, size_t>> payloads = {{50, 1000}, {150, 2000}, {160, 3000}, {250, 4000},
                                                            {350, 100}};
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
  ASSERT_TRUE(w->close());
}

TEST(LargestStepPayloadBytes, CutAtTheStepMarkersOrTheWholeRecording) {
  const std::string root = ::testing::TempDir() + "/prefetch-bytes-" + std::to_string(getpid());
  for (const bool markers : {true, false}) {
    const std::string dir = root + (markers ? "/marked" : "/unmarked") + "/rank0";
    writeSteps(dir, markers);
    std::string error;
    auto recording = trace::Recording::open(dir, -1, &error);
    ASSERT_NE(recording, nullptr) << error;
    EXPECT_EQ(recording->largestStepPayloadBytes(), markers ? 5000u : 10100u) << (markers ? "marked" : "unmarked");
  }
  EXPECT_EQ(system(("rm -rf '" + root + "'").c_str()), 0);
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The duration estimator on synthetic histories whose true durations are known, and the history built from a
// recorded trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <random>

#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace timing {
namespace {

constexpr int kAllReduce = static_cast<int>(events::Op::kAllReduce);
constexpr int kAllGather = static_cast<int>(events::Op::kAllGather);

// 12 us + bytes at 200 GB/s: what the samples of an AllReduce on 2 ranks follow.
int64_t truth(uint64_t bytes) { return 12'000 + static_cast<int64_t>(static_cast<double>(bytes) / 200.0); }

// Every power of two from 1 KiB to 256 MiB, `runs` runs, +-1% multiplicative noise.
History synthetic(int runs, double noise = 0.01) {
  History h;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(1 - noise, 1 + noise);
  for (int r = 0; r < runs; ++r) {
    h.runs.push_back("run" + std::to_string(r));
    for (int p = 10; p <= 28; ++p) {
      HistorySample s;
      s.op = kAllReduce;
      s.nranks = 2;
      s.bytes = 1ull << p;
      s.durationNs = static_cast<int64_t>(static_cast<double>(truth(s.bytes)) * jitter(rng));
      s.run = static_cast<uint32_t>(r);
      h.samples.push_back(s);
    }
  }
  return h;
}

double relativeError(int64_t estimate, int64_t actual) {
  return std::fabs(static_cast<double>(estimate - actual)) / static_cast<double>(actual);
}

TEST(Estimator, InterpolatesBetweenSampledSizesWithinTwoPercent) {
  History h = synthetic(3);
  Estimator e(h, {});
  for (uint64_t bytes : {3000ull, 100'000ull, 3'000'000ull, 50'000'000ull, 200'000'000ull}) {
    Estimate est = e.estimate(kAllReduce, 2, false, bytes);
    EXPECT_STREQ(est.method, "local-regression") << bytes;
    EXPECT_FALSE(est.extrapolated) << bytes;
    EXPECT_LT(est.distance, 1.0) << bytes;
    EXPECT_LT(relativeError(est.durationNs, truth(bytes)), 0.02) << bytes << ": " << est.durationNs;
  }
}

TEST(Estimator, FarOutsideTheSamplesItSaysSoAndUsesTheLatencyBandwidthFit) {
  History h = synthetic(3);
  Estimator e(h, {});
  Estimate est = e.estimate(kAllReduce, 2, false, 1ull << 32);  // 16x beyond the largest sample
  EXPECT_TRUE(est.extrapolated);
  EXPECT_STREQ(est.method, "latency-bandwidth");
  EXPECT_NEAR(est.distance, 4.0, 0.01);
  EXPECT_LT(relativeError(est.durationNs, truth(1ull << 32)), 0.05) << est.durationNs;
  Estimate unknown = e.estimate(kAllGather, 2, false, 1 << 20);  // no sample of this op at all
  EXPECT_FALSE(unknown.found);
  EXPECT_TRUE(unknown.extrapolated);
  EXPECT_STREQ(unknown.method, "default");
}

TEST(Estimator, TheSameRoleIsPreferred) {
  History h = synthetic(1);
  for (auto& s : h.samples) s.role = "dp";
  const size_t n = h.samples.size();
  for (size_t i = 0; i < n; ++i) {
    HistorySample s = h.samples[i];
    s.role = "tp";
    s.durationNs *= 2;  // another communicator of the same size, twice as slow (e.g. other links)
    h.samples.push_back(s);
  }
  Estimator e(h, {});
  const uint64_t bytes = 3'000'000;
  EXPECT_LT(relativeError(e.estimate(kAllReduce, 2, false, bytes, "dp").durationNs, truth(bytes)), 0.02);
  EXPECT_LT(relativeError(e.estimate(kAllReduce, 2, false, bytes, "tp").durationNs, 2 * truth(bytes)), 0.02);
}

TEST(Estimator, LeaveOneOutNeverSeesTheSampleItself) {
  History h = synthetic(1, 0.0);
  h.samples[5].durationNs *= 10;  // an outlier: with itself as a neighbour its estimate would be pulled up
  Estimator e(h, {});
  EXPECT_LT(relativeError(e.estimateWithout(5).durationNs, truth(h.samples[5].bytes)), 0.05);
}

TEST(Estimator, EvaluationOfAClean3RunHistoryIsWithinTwoPercent) {
  History h = synthetic(3);
  Evaluation ev = evaluate(h, {});
  ASSERT_EQ(ev.leaveOneOut.at("all").count, h.samples.size());
  ASSERT_EQ(ev.leaveOneRunOut.at("all").count, h.samples.size());
  EXPECT_LT(ev.leaveOneOut.at("all").median, 0.02);
  EXPECT_LT(ev.leaveOneRunOut.at("all").median, 0.02);
  EXPECT_EQ(ev.leaveOneOut.count("AllReduce >=16MiB"), 1u);
}

TEST(EstimatorHistory, SaveLoadRoundTripAndClearErrors) {
  History h = synthetic(2);
  h.samples[3].role = "tp";
  const std::string path = ::testing::TempDir() + "/h-" + std::to_string(getpid()) + ".hist";
  std::string error;
  ASSERT_TRUE(saveHistory(path, h, &error)) << error;
  History back;
  ASSERT_TRUE(loadHistory(path, &back, &error)) << error;
  EXPECT_EQ(back.runs, h.runs);
  ASSERT_EQ(back.samples.size(), h.samples.size());
  EXPECT_EQ(back.samples[3].role, "tp");
  EXPECT_EQ(back.samples[7].durationNs, h.samples[7].durationNs);

  EXPECT_FALSE(loadHistory(path + ".missing", &back, &error));
  EXPECT_NE(error.find("ranklens history build"), std::string::npos) << error;
  ASSERT_EQ(system(("printf 'garbage' > '" + path + "'").c_str()), 0);
  EXPECT_FALSE(loadHistory(path, &back, &error));
  EXPECT_NE(error.find("corrupt history"), std::string::npos) << error;
}

TEST(EstimatorHistory, BuiltFromARecordedTraceWithGroupsAndRoles) {
  const std::string dir = ::testing::TempDir() + "/est-trace-" + std::to_string(getpid()) + "/rank0";
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  trace::Manifest m;
  m.mode = "record";
  m.rank = 0;
  m.env["LOCAL_WORLD_SIZE"] = "1";  // one rank per node: a 2-rank communicator crosses nodes
  std::string error;
  auto w = trace::TraceWriter::create(dir, m, {}, &error);
  ASSERT_NE(w, nullptr) << error;
  events::CommInit comm;
  comm.nranks = 2;
  comm.name = "dp";
  w->append(trace::RecordType::kCommInit, comm);
  auto call = [](uint64_t seq, events::Op op, uint64_t bytes, uint64_t group, int peer) {
    events::Call c;
    c.seq = seq;
    c.op = static_cast<int>(op);
    c.count = bytes / 4;
    c.datatype = 7;
    c.bytes = bytes;
    c.nranks = 2;
    c.groupId = group;
    c.rootOrPeer = peer;
    c.stream = 0x10;
    return c;
  };
  auto timing = [](uint64_t seq, events::Op op, int64_t ns, int peer) {
    trace::Timing t;
    t.seq = seq;
    t.op = static_cast<int>(op);
    t.durationNs = ns;
    t.peer = peer;
    return t;
  };
  w->append(trace::RecordType::kCall, call(0, events::Op::kAllReduce, 4096, 0, -1));
  w->append(trace::RecordType::kTiming, timing(0, events::Op::kAllReduce, 20'000, -1));
  // A group of a Send and a Recv on one stream: one Timing, on the first call, for both.
  w->append(trace::RecordType::kCall, call(0, events::Op::kSend, 1000, 5, 1));
  w->append(trace::RecordType::kCall, call(0, events::Op::kRecv, 3000, 5, 1));
  w->append(trace::RecordType::kTiming, timing(0, events::Op::kSend, 30'000, 1));
  w->append(trace::RecordType::kCall, call(1, events::Op::kAllReduce, 8192, 0, -1));  // no Timing: not a sample
  ASSERT_TRUE(w->close());

  History h;
  ASSERT_TRUE(addRecordedRun(dir, &h, &error)) << error;
  ASSERT_EQ(h.samples.size(), 2u);
  EXPECT_EQ(h.samples[0].op, kAllReduce);
  EXPECT_EQ(h.samples[0].durationNs, 20'000);
  EXPECT_EQ(h.samples[0].role, "dp");
  EXPECT_TRUE(h.samples[0].crossesNodes);
  EXPECT_TRUE(h.samples[1].grouped);
  EXPECT_EQ(h.samples[1].bytes, 4000u);  // the group's bytes on that stream
  EXPECT_FALSE(addRecordedRun(dir, &h, &error));
  EXPECT_NE(error.find("already in the history"), std::string::npos) << error;
}

}  // namespace
}  // namespace timing
}  // namespace ranklens

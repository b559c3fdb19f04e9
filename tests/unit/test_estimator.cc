// SPDX-License-Identifier: Apache-2.0
// The duration estimator on synthetic histories whose true durations are known, and the history built from a
// recorded trace.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/duration_fit.h"
#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"
#include "recorded_rank.h"

namespace ranklens {
namespace timing {
namespace {

// These histories are made by hand with observed durations only (the default target is transfer).
Estimator::Options observedTarget() {
  Estimator::Options o;
  o.target = EstimateTarget::kObserved;
  return o;
}

constexpr int kAllReduce = static_cast<int>(events::Op::kAllReduce);

// Call `seq` of a 2-rank communicator: a 4 KiB float32 AllReduce.
events::Call allReduce4KiB(uint64_t seq) {
  events::Call c;
  c.seq = seq;
  c.op = kAllReduce;
  c.count = 1024;
  c.datatype = 7;
  c.bytes = 4096;
  c.nranks = 2;
  c.rootOrPeer = -1;
  return c;
}
constexpr int kAllGather = static_cast<int>(events::Op::kAllGather);
constexpr int kBroadcast = static_cast<int>(events::Op::kBroadcast);

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
  Estimator e(h, observedTarget());
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
  Estimator e(h, observedTarget());
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

// The fallback fits bus bytes (nccl-tests' factors), so an all-reduce's line carries over to an all-gather never
// sampled and to a larger communicator: same bus bandwidth, same latency.
TEST(LatencyBandwidthFit, CarriesOverToOtherOpsAndSizesInBusBytes) {
  using ranklens::timing::busBytes;
  ranklens::timing::LatencyBandwidthFit fit;
  std::vector<ranklens::timing::DurationSample> samples;
  for (uint64_t bytes : {1ull << 20, 1ull << 24, 1ull << 28})  // 2 ranks: bus bytes = bytes; 10 us + 100 GB/s
    samples.push_back({kAllReduce, 2, bytes, 10'000 + static_cast<int64_t>(bytes / 100)});
  fit.fit(samples);
  EXPECT_EQ(fit.estimateNs(kAllReduce, 2, false, 1 << 26), 10'000 + (1 << 26) / 100);
  // 8 ranks: 2 x 7/8 of the bytes cross each link.
  EXPECT_NEAR(fit.estimateNs(kAllReduce, 8, false, 1 << 26), 10'000 + 1.75 * (1 << 26) / 100, 2);
  // An all-gather receiving 64 MiB on 8 ranks moves 7/8 of it.
  EXPECT_NEAR(fit.estimateNs(kAllGather, 8, false, 1 << 26), 10'000 + 0.875 * (1 << 26) / 100, 2);
  EXPECT_DOUBLE_EQ(busBytes(kAllGather, 8, 1 << 26), 0.875 * (1 << 26));
  EXPECT_DOUBLE_EQ(busBytes(kAllReduce, 1, 1 << 26), 0.0);  // one rank moves nothing
}

// Two small broadcasts (12 and 308 bytes: 23 and 58 us, the shipped DDP trace's) make a steep line that says nothing
// about 89 MiB: there the all-ops line, fitted to large all-reduces, is used instead.
TEST(LatencyBandwidthFit, ALineIsNotStretchedFarBeyondTheSizesItSaw) {
  ranklens::timing::LatencyBandwidthFit fit;
  fit.fit({{kBroadcast, 2, 12, 22784},
           {kBroadcast, 2, 308, 58144},
           {kAllReduce, 2, 29415424, 154240},
           {kAllReduce, 2, 34129920, 162784},
           {kAllReduce, 2, 92962816, 552576}});
  EXPECT_LT(fit.estimateNs(kBroadcast, 8, false, 92962816), 2'000'000);  // the broadcasts' own line: 11 s
  EXPECT_NEAR(fit.estimateNs(kBroadcast, 8, false, 200), 22784 + (58144 - 22784) * (200.0 - 12) / 296,
              2);  // in range
}

// Large messages whose least-squares line would start below zero (as the shipped DDP trace's all-reduces: 28-89 MiB,
// 154-553 us) keep their bandwidth, through the origin, instead of one mean duration for every size.
TEST(LatencyBandwidthFit, ANegativeLatencyKeepsTheBandwidth) {
  ranklens::timing::LatencyBandwidthFit fit;
  fit.fit({{kAllReduce, 2, 29415424, 154240}, {kAllReduce, 2, 34129920, 162784}, {kAllReduce, 2, 92962816, 552576}});
  const int64_t small = fit.estimateNs(kAllReduce, 2, false, 29415424);
  const int64_t large = fit.estimateNs(kAllReduce, 2, false, 92962816);
  EXPECT_LT(small, 250'000);
  EXPECT_GT(large, 450'000);
  EXPECT_NEAR(static_cast<double>(large) / static_cast<double>(small), 92962816.0 / 29415424.0, 1e-5);
}

// A history that marks steps: a call before the first step (NCCL's connection set-up, 200 ms for 16 bytes) is its
// own size's estimate, but no fallback line carries it to other sizes or operations.
TEST(Estimator, CallsBeforeTheFirstMarkedStepStayOutOfTheFallbackFits) {
  History h;
  h.runs = {"job/rank0"};
  auto sample = [&](int op, uint64_t bytes, int64_t ns, double phase) {
    HistorySample s;
    s.op = op;
    s.nranks = 2;
    s.bytes = bytes;
    s.durationNs = ns;
    s.stepPhase = phase;
    h.samples.push_back(s);
  };
  sample(kAllGather, 16, 200'000'000, -1);  // before step 0
  for (uint64_t bytes : {1ull << 20, 1ull << 24})
    for (int i = 0; i < 3; ++i) sample(kAllReduce, bytes, 10'000 + static_cast<int64_t>(bytes / 100), 0.5);
  Estimator e(h, observedTarget());
  EXPECT_EQ(e.estimate(kAllGather, 2, false, 16).durationNs, 200'000'000);  // the same call: what it took
  const Estimate other = e.estimate(kAllGather, 2, false, 1 << 20);
  EXPECT_TRUE(other.extrapolated);
  EXPECT_LT(other.durationNs, 1'000'000) << "the set-up call's 200 ms carried to a 1 MiB all-gather";
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
  Estimator e(h, observedTarget());
  const uint64_t bytes = 3'000'000;
  EXPECT_LT(relativeError(e.estimate(kAllReduce, 2, false, bytes, "dp").durationNs, truth(bytes)), 0.02);
  EXPECT_LT(relativeError(e.estimate(kAllReduce, 2, false, bytes, "tp").durationNs, 2 * truth(bytes)), 0.02);
}

TEST(Estimator, LeaveOneOutNeverSeesTheSampleItself) {
  History h = synthetic(1, 0.0);
  h.samples[5].durationNs *= 10;  // an outlier: with itself as a neighbour its estimate would be pulled up
  Estimator e(h, observedTarget());
  EXPECT_LT(relativeError(e.estimateWithout(5).durationNs, truth(h.samples[5].bytes)), 0.05);
}

TEST(Estimator, EvaluationOfAClean3RunHistoryIsWithinTwoPercent) {
  History h = synthetic(3);
  Evaluation ev = evaluate(h, observedTarget());
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
  ASSERT_TRUE((error = saveHistory(path, h).message()).empty()) << error;
  History back;
  ASSERT_TRUE((error = loadHistory(path, &back).message()).empty()) << error;
  EXPECT_EQ(back.runs, h.runs);
  ASSERT_EQ(back.samples.size(), h.samples.size());
  EXPECT_EQ(back.samples[3].role, "tp");
  EXPECT_EQ(back.samples[7].durationNs, h.samples[7].durationNs);

  EXPECT_FALSE((error = loadHistory(path + ".missing", &back).message()).empty());
  EXPECT_NE(error.find("ranklens history build"), std::string::npos) << error;
  ASSERT_EQ(system(("printf 'garbage' > '" + path + "'").c_str()), 0);
  EXPECT_FALSE((error = loadHistory(path, &back).message()).empty());
  EXPECT_NE(error.find("corrupt history"), std::string::npos) << error;
}

// A history is shared between users and machines: a sample the estimator cannot use is refused with its index and
// what is wrong, never estimated from (a NaN phase would break the ordering of a place's samples).
TEST(EstimatorHistory, ASampleTheEstimatorCannotUseIsRefusedByIndex) {
  const struct {
    void (*damage)(HistorySample*);
    const char* says;
  } cases[] = {
      {[](HistorySample* s) { s->run = 99; }, "sample 5 names run 99 of 2"},
      {[](HistorySample* s) { s->op = 42; }, "sample 5 has an unknown operation 42"},
      {[](HistorySample* s) { s->nranks = 0; }, "sample 5 has a communicator of 0 ranks"},
      {[](HistorySample* s) { s->durationNs = -5; }, "sample 5 has a negative duration"},
      {[](HistorySample* s) { s->transferNs = -7; }, "sample 5 has a negative transfer time"},
      {[](HistorySample* s) { s->stepPhase = std::nan(""); }, "sample 5 has a step phase that is not a phase"},
      {[](HistorySample* s) { s->stepPhase = -0.5; }, "sample 5 has a step phase that is not a phase"},
      {[](HistorySample* s) { s->stepPhase = 5e33; }, "sample 5 has a step phase that is not a phase"},
      {[](HistorySample* s) { s->stepOccurrence = -2; }, "sample 5 has a negative place in its step"},
  };
  for (const auto& c : cases) {
    History h = synthetic(2);
    c.damage(&h.samples[5]);
    msgpack::sbuffer bytes;
    msgpack::pack(bytes, h);
    History back;
    std::string error;
    EXPECT_FALSE((error = parseHistory(bytes.data(), bytes.size(), "cluster.hist", &back).message()).empty()) << c.says;
    EXPECT_NE(error.find(std::string("cluster.hist: corrupt history (") + c.says), std::string::npos) << error;
    EXPECT_TRUE(back.samples.empty()) << "nothing is handed out";
  }
  // A damaged element count (4 billion samples in a few bytes) is refused, not allocated.
  {
    msgpack::sbuffer bytes;
    msgpack::packer<msgpack::sbuffer> pack(bytes);
    pack.pack_map(4);
    pack.pack(std::string("format")), pack.pack(std::string("ranklens-history"));
    pack.pack(std::string("version")), pack.pack(kHistoryVersion);
    pack.pack(std::string("runs")), pack.pack_array(0);
    pack.pack(std::string("samples")), pack.pack_array(0xffffffffu);
    History back;
    std::string error;
    EXPECT_FALSE((error = parseHistory(bytes.data(), bytes.size(), "huge.hist", &back).message()).empty());
    EXPECT_NE(error.find("huge.hist: corrupt history (array size overflow"), std::string::npos) << error;
  }
  History newer = synthetic(1);
  newer.version = kHistoryVersion + 1;
  msgpack::sbuffer bytes;
  msgpack::pack(bytes, newer);
  History back;
  std::string error;
  EXPECT_FALSE((error = parseHistory(bytes.data(), bytes.size(), "new.hist", &back).message()).empty());
  EXPECT_NE(error.find("reads versions 1 to " + std::to_string(kHistoryVersion)), std::string::npos) << error;
}

TEST(EstimatorHistory, BuiltFromARecordedTraceWithGroupsAndRoles) {
  const std::string dir = ::testing::TempDir() + "/est-trace-" + std::to_string(getpid()) + "/rank0";
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  trace::Manifest m;
  m.mode = "record";
  m.rank = 0;
  m.env["LOCAL_WORLD_SIZE"] = "1";  // one rank per node: a 2-rank communicator crosses nodes
  std::string error;
  std::unique_ptr<trace::TraceWriter> w;
  error = trace::TraceWriter::create(dir, m, {}, &w).message();
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
  ASSERT_TRUE(w->close().isOk());

  History h;
  ASSERT_TRUE((error = addRecordedRun(dir, &h).message()).empty()) << error;
  ASSERT_EQ(h.samples.size(), 2u);
  EXPECT_EQ(h.samples[0].op, kAllReduce);
  EXPECT_EQ(h.samples[0].durationNs, 20'000);
  EXPECT_EQ(h.samples[0].role, "dp");
  EXPECT_TRUE(h.samples[0].crossesNodes);
  EXPECT_TRUE(h.samples[1].grouped);
  EXPECT_EQ(h.samples[1].bytes, 4000u);  // the group's bytes on that stream
  EXPECT_FALSE((error = addRecordedRun(dir, &h).message()).empty());
  EXPECT_NE(error.find("already in the history"), std::string::npos) << error;
}

// History version 3: each sample says where in its step it was made and whether another stream was busy.
TEST(EstimatorHistory, SamplesKnowTheirStepPhaseOccurrenceAndBusyStreams) {
  const std::string dir = ::testing::TempDir() + "/est-context-" + std::to_string(getpid()) + "/rank0";
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  trace::Manifest m;
  m.mode = "record";
  std::string error;
  std::unique_ptr<trace::TraceWriter> w;
  error = trace::TraceWriter::create(dir, m, {}, &w).message();
  ASSERT_NE(w, nullptr) << error;
  events::CommInit comm;
  comm.nranks = 2;
  w->append(trace::RecordType::kCommInit, comm);
  auto add = [&](uint64_t seq, int64_t timeNs, uint64_t stream, int64_t durationNs) {
    events::Call c = allReduce4KiB(seq);
    c.stream = stream;
    c.timeNs = timeNs;
    test::appendTimedCall(*w, c, durationNs);
  };
  auto stage = [&](int64_t step, int64_t timeNs) {
    events::Stage st;
    st.name = "step";
    st.step = step;
    st.timeNs = timeNs;
    w->append(trace::RecordType::kStage, st);
  };
  add(0, 500, 0xa, 100);  // before the first marker
  stage(0, 1000);
  add(1, 1250, 0xa, 600);  // a quarter into step 0; stream a runs until 1850
  add(2, 1500, 0xb, 100);  // half-way: stream a still busy; the step's second 4 KiB AllReduce
  stage(1, 2000);
  add(3, 2400, 0xb, -1);   // not timed (e.g. its kernel-clock duration was lost): no sample, but counted,
                           // as replay counts it
  add(4, 2900, 0xb, 100);  // 90% into step 1 (its second 4 KiB AllReduce); stream a finished at 1850
  stage(2, 3000);
  add(5, 3100, 0xa, 100);  // after the last marker
  ASSERT_TRUE(w->close().isOk());

  History h;
  ASSERT_TRUE((error = addRecordedRun(dir, &h).message()).empty()) << error;
  ASSERT_EQ(h.samples.size(), 5u);
  const std::vector<double> phases = {-1, 0.25, 0.5, 0.9, -1};
  const std::vector<int> occurrences = {-1, 0, 1, 1, -1};  // counted per step, op and size, timed or not
  const std::vector<bool> busy = {false, false, true, false, false};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(h.samples[i].stepPhase, phases[i], 1e-9) << i;
    EXPECT_EQ(h.samples[i].stepOccurrence, occurrences[i]) << i;
    EXPECT_EQ(h.samples[i].otherStreamsBusy, busy[i]) << i;
  }
  EXPECT_EQ(contextClass(h.samples[2]), "all, step 50-75%");
  EXPECT_EQ(contextClass(h.samples[3]), "all, step 75-100%");
  EXPECT_EQ(contextClass(h.samples[0]), "all, outside marked steps");
  // They survive a save and load; a version-2 file reads them as unknown.
  const std::string path = ::testing::TempDir() + "/h3-" + std::to_string(getpid()) + ".hist";
  ASSERT_TRUE((error = saveHistory(path, h).message()).empty()) << error;
  History back;
  ASSERT_TRUE((error = loadHistory(path, &back).message()).empty()) << error;
  EXPECT_EQ(back.version, kHistoryVersion);
  EXPECT_NEAR(back.samples[1].stepPhase, 0.25, 1e-9);
  EXPECT_EQ(back.samples[2].stepOccurrence, 1);
  EXPECT_TRUE(back.samples[2].otherStreamsBusy);
}

// The same call in other runs of the program (same op, size and place in the step) is the neighbour of choice once
// there are Estimator::kSamePlace of them: FSDP2's all-gathers of one size take 10-20% longer or shorter depending
// on the compute beside them, which the same call of another run shares.
TEST(Estimator, SamplesFromTheSamePlaceOfTheStepArePreferred) {
  History h;
  for (uint32_t run = 0; run < 4; ++run) {
    h.runs.push_back("job" + std::to_string(run) + "/rank0");
    for (int occurrence = 0; occurrence < 2; ++occurrence) {
      HistorySample s;
      s.op = kAllGather;
      s.nranks = 2;
      s.bytes = 32u << 20;
      s.run = run;
      s.stepPhase = 0.1 + 0.5 * occurrence;
      s.stepOccurrence = occurrence;
      s.durationNs = s.transferNs = (occurrence == 0 ? 200'000 : 260'000) + 1'000 * run;  // beside other compute
      h.samples.push_back(s);
    }
  }
  Estimator e(h, {});
  const Estimate first = e.estimate(kAllGather, 2, false, 32u << 20, "", false, 0);
  EXPECT_STREQ(first.method, "same-place median");
  EXPECT_NEAR(static_cast<double>(first.durationNs), 201'500, 1'000);
  EXPECT_EQ(first.neighbours, 4);
  EXPECT_NEAR(static_cast<double>(e.estimate(kAllGather, 2, false, 32u << 20, "", false, 1).durationNs), 261'500,
              1'000);
  // Unknown place: the size's median over both places (the upper middle of the eight).
  const Estimate anywhere = e.estimate(kAllGather, 2, false, 32u << 20);
  EXPECT_STREQ(anywhere.method, "same-size median");
  EXPECT_EQ(anywhere.durationNs, 260'000);
  // Leave-one-out leaves the sample itself out of its place; leave-one-job-out takes the other jobs' same place.
  EXPECT_NEAR(static_cast<double>(e.estimateWithout(0).durationNs), 202'000, 1'000);
  Estimator::Options withoutJob0;
  withoutJob0.excludeJob = "job0";
  EXPECT_STREQ(Estimator(h, withoutJob0).estimateWithout(0).method, "same-place median");
  // Fewer than kSamePlace at that place: the same-size rule.
  Estimator::Options twoJobsLeft;
  h.samples.resize(4);  // jobs 0 and 1 only
  h.runs.resize(2);
  twoJobsLeft.excludeJob = "job0";
  EXPECT_STREQ(Estimator(h, twoJobsLeft).estimateWithout(0).method, "same-size median");
  const Evaluation ev = evaluate(synthetic(3), observedTarget());
  EXPECT_LT(ev.leaveOneRunOut.at("all").median, 0.02) << "samples without a place are estimated as before";
}

// Waiting for a late peer makes some samples of one size much longer than the collective itself. A transfer time is
// estimated by the median, which they do not move; an observed duration by the 10%-trimmed mean, what a replayed
// stream must be held for on average.
// Two configurations of one program (same buckets, another micro-batch) make the same call at the same place of
// their steps, but at another phase and beside other compute: the phase tells a run's twin configuration apart.
// Jobs a0 and a1 ran at phase ~0.30 (200 us), b0 and b1 at ~0.50 (240 us); two ranks each.
TEST(Estimator, AtTheSamePlaceTheSamplesNearestInStepPhaseAreChosen) {
  History h;
  const struct {
    const char* job;
    double phase;
    int64_t ns;
  } jobs[] = {{"a0", 0.300, 200'000}, {"a1", 0.305, 201'000}, {"b0", 0.500, 240'000}, {"b1", 0.510, 241'000}};
  for (const auto& j : jobs) {
    for (int rank = 0; rank < 2; ++rank) {
      h.runs.push_back(std::string(j.job) + "/rank" + std::to_string(rank));
      HistorySample s;
      s.op = kAllReduce;
      s.nranks = 2;
      s.bytes = 16u << 20;
      s.run = static_cast<uint32_t>(h.runs.size() - 1);
      s.stepOccurrence = 0;
      s.stepPhase = j.phase + 0.001 * rank;
      s.durationNs = s.transferNs = j.ns;  // a transfer time: the same on both ranks of a job
      h.samples.push_back(s);
    }
  }
  Estimator e(h, {});
  const Estimate nearA = e.estimate(kAllReduce, 2, false, 16u << 20, "", false, 0, 0.31);
  EXPECT_STREQ(nearA.method, "same-place median");
  EXPECT_EQ(nearA.neighbours, 4) << "the four samples within kSamePhase of 0.31";
  EXPECT_EQ(nearA.durationNs, 201'000);
  EXPECT_EQ(e.estimate(kAllReduce, 2, false, 16u << 20, "", false, 0, 0.52).durationNs, 241'000);
  EXPECT_EQ(e.estimate(kAllReduce, 2, false, 16u << 20, "", false, 0).durationNs, 240'000)
      << "without a phase: the median of all eight (the upper middle)";
  // None within kSamePhase: the kSamePlace nearest (both of b0, the nearer of b1).
  const Estimate between = e.estimate(kAllReduce, 2, false, 16u << 20, "", false, 0, 0.45);
  EXPECT_EQ(between.neighbours, 3);
  EXPECT_EQ(between.durationNs, 240'000);
  // Leave-one-job-out: a0 left out, its twin a1 has only two samples within reach, so the nearest of b0 makes the
  // third; their median is a1's. Without phases it would be b's.
  Estimator::Options withoutA0;
  withoutA0.excludeJob = "a0";
  const Estimate twin = Estimator(h, withoutA0).estimateWithout(0);
  EXPECT_EQ(twin.neighbours, 3);
  EXPECT_EQ(twin.durationNs, 201'000);
  // Leave-one-out skips exactly the sample itself: a0's other rank and a1's two stay.
  const Estimate self = e.estimateWithout(0);
  EXPECT_EQ(self.neighbours, 3);
  EXPECT_EQ(self.durationNs, 201'000);
  const Evaluation ev = evaluate(h, {});
  EXPECT_LT(ev.leaveOneRunOut.at("all").median, 0.01);
  EXPECT_EQ(ev.leaveOneRunOut.at("all, by same-place median").count, 8u) << "errors by the rule that estimated";
}

TEST(Estimator, ASampledSizeIsItsMedianTransferOrItsTrimmedMeanObservedDuration) {
  History h;
  h.runs = {"job/rank0"};
  for (int i = 0; i < 100; ++i) {
    HistorySample s;
    s.op = kAllReduce;
    s.nranks = 2;
    s.bytes = 1 << 24;
    s.durationNs = s.transferNs = truth(s.bytes) * (i % 10 < 3 ? 10 : 1);  // 30% waited for a peer
    h.samples.push_back(s);
  }
  Estimator::Options transfer;
  transfer.target = EstimateTarget::kTransfer;
  Estimate est = Estimator(h, transfer).estimate(kAllReduce, 2, false, 1 << 24);
  EXPECT_STREQ(est.method, "same-size median");
  EXPECT_EQ(est.durationNs, truth(1 << 24));
  EXPECT_EQ(Estimator(h, transfer).estimateWithout(0).durationNs, truth(1 << 24));
  Estimator observed(h, observedTarget());
  est = observed.estimate(kAllReduce, 2, false, 1 << 24);
  EXPECT_STREQ(est.method, "same-size trimmed mean");
  // 10 trimmed at each end: 60 at 1x and 20 at 10x remain.
  EXPECT_NEAR(static_cast<double>(est.durationNs), truth(1 << 24) * (60.0 + 200.0) / 80.0, 1.0);
  // Leaving out one slow sample: 99 left, 9 trimmed at each end, 61 at 1x and 20 at 10x.
  EXPECT_NEAR(static_cast<double>(observed.estimateWithout(0).durationNs), truth(1 << 24) * (61.0 + 200.0) / 81.0, 1.0);
}

// Two ranks of one job: rank 0 arrives first and waits, rank 1 arrives last; the transfer time of each collective is
// the shorter of the two, on both ranks' samples. P2P calls are not paired.
void writeRank(const std::string& dir, int rank, const std::vector<int64_t>& allReduceNs, int64_t sendNs) {
  auto w = test::recordedRank(dir, rank, 2);
  ASSERT_NE(w, nullptr);
  for (size_t i = 0; i < allReduceNs.size(); ++i) {
    const events::Call c = allReduce4KiB(i);
    w->append(trace::RecordType::kCall, c);
    trace::Timing t;
    t.seq = i;
    t.op = kAllReduce;
    t.durationNs = allReduceNs[i];
    t.peer = -1;
    w->append(trace::RecordType::kTiming, t);
  }
  events::Call send;
  send.op = static_cast<int>(events::Op::kSend);
  send.count = 256;
  send.datatype = 7;
  send.bytes = 1024;
  send.nranks = 2;
  send.rootOrPeer = 1 - rank;
  w->append(trace::RecordType::kCall, send);
  trace::Timing t;
  t.op = send.op;
  t.durationNs = sendNs;
  t.peer = 1 - rank;
  w->append(trace::RecordType::kTiming, t);
  ASSERT_TRUE(w->close().isOk());
}

// Replay knows a running step's start but not its length: its phase is measured over the previous step's length.
TEST(StepOccurrencesTest, PhaseIsOverThePreviousStepsLength) {
  StepOccurrences places;
  EXPECT_DOUBLE_EQ(places.phase(100), -1) << "outside steps";
  places.startStep(1'000);
  EXPECT_DOUBLE_EQ(places.phase(1'500), -1) << "the first step: no length known yet";
  EXPECT_EQ(places.next(kAllReduce, 64, false), 0);
  places.startStep(3'000);
  EXPECT_DOUBLE_EQ(places.phase(3'500), 0.25);
  EXPECT_DOUBLE_EQ(places.phase(2'000), -1) << "before the step started";
  EXPECT_EQ(places.next(kAllReduce, 64, false), 0) << "a new step counts again";
  places.startStep(4'000);
  EXPECT_DOUBLE_EQ(places.phase(4'500), 0.5);
  places.leave();
  EXPECT_DOUBLE_EQ(places.phase(4'600), -1);
  places.startStep(10'000);
  EXPECT_DOUBLE_EQ(places.phase(10'500), -1) << "a step after leaving has no previous length";
  StepOccurrences untimed;  // history build: phases come from the recording, not from here
  untimed.startStep();
  untimed.startStep();
  EXPECT_DOUBLE_EQ(untimed.phase(0), -1);
}

TEST(EstimatorHistory, TransferTimeIsTheShortestOverTheJobsRanks) {
  const std::string job = ::testing::TempDir() + "/est-job-" + std::to_string(getpid());
  writeRank(job + "/rank0", 0, {50'000, 90'000, 20'000}, 7'000);
  writeRank(job + "/rank1", 1, {10'000, 11'000, 60'000}, 8'000);
  History h;
  std::string error;
  ASSERT_TRUE((error = addRecordedJob(std::vector<std::string>{job + "/rank0", job + "/rank1"}, &h).message()).empty())
      << error;
  ASSERT_EQ(h.samples.size(), 8u);
  EXPECT_EQ(jobOf(h.runs[0]), job);
  const int64_t expected[] = {10'000, 11'000, 20'000, -1};  // per call, the same on both ranks; Send: not paired
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(h.samples[i].transferNs, expected[i % 4]) << i;
  EXPECT_EQ(h.samples[0].durationNs, 50'000);  // what rank 0 measured is kept

  // A rank alone knows no transfer time; a second copy of a rank is refused and adds nothing.
  History alone;
  ASSERT_TRUE((error = addRecordedRun(job + "/rank0", &alone).message()).empty()) << error;
  EXPECT_EQ(alone.samples[0].transferNs, -1);
  EXPECT_FALSE(
      (error = addRecordedJob(std::vector<std::string>{job + "/rank1", job + "/rank0"}, &alone).message()).empty());
  EXPECT_NE(error.find("already in the history"), std::string::npos) << error;
  EXPECT_EQ(alone.samples.size(), 4u);

  // Estimating transfer times: the median of the pairs' shortest, leave-one-job-out leaves both ranks out.
  Estimator::Options transfer;
  transfer.target = EstimateTarget::kTransfer;
  Estimator e(h, transfer);
  EXPECT_EQ(e.samples(), 6u);
  EXPECT_EQ(e.estimate(kAllReduce, 2, false, 4096).durationNs, 11'000);  // the median of 10, 11, 20 us
  Evaluation ev = evaluate(h, transfer);
  EXPECT_EQ(ev.jobs, 1u);
  EXPECT_EQ(ev.leaveOneOut.at("all").count, 6u);
  EXPECT_EQ(ev.leaveOneRunOut.count("all"), 0u);  // one job: nothing to leave out
}

TEST(EstimatorHistory, AVersion1HistoryLoadsWithoutTransferTimes) {
  History h = synthetic(1);
  h.version = 1;
  const std::string path = ::testing::TempDir() + "/h1-" + std::to_string(getpid()) + ".hist";
  // Version 1 samples had nine fields: write them so.
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(4);
  pk.pack(std::string("format"));
  pk.pack(h.format);
  pk.pack(std::string("version"));
  pk.pack(1);
  pk.pack(std::string("runs"));
  pk.pack(h.runs);
  pk.pack(std::string("samples"));
  pk.pack_array(static_cast<uint32_t>(h.samples.size()));
  for (const auto& s : h.samples)
    pk.pack(
        std::make_tuple(s.op, s.datatype, s.bytes, s.nranks, s.crossesNodes, s.role, s.grouped, s.durationNs, s.run));
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(fwrite(buffer.data(), 1, buffer.size(), f), buffer.size());
  fclose(f);
  History back;
  std::string error;
  ASSERT_TRUE((error = loadHistory(path, &back).message()).empty()) << error;
  ASSERT_EQ(back.samples.size(), h.samples.size());
  EXPECT_EQ(back.samples[4].durationNs, h.samples[4].durationNs);
  EXPECT_EQ(back.samples[4].transferNs, -1);
}

}  // namespace
}  // namespace timing
}  // namespace ranklens

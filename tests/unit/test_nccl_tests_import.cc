// SPDX-License-Identifier: Apache-2.0
// nccl-tests output into history samples (tools/nccl_tests/nccl_tests_import.cc), and how the estimator uses them:
// where no recorded call is near, and for communicators that span nodes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/nccl_tests_import.h"

namespace {

using ranklens::events::Op;
using namespace ranklens::timing;

constexpr int kAllReduce = static_cast<int>(Op::kAllReduce);

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A test's output as nccl-tests 2.19 prints it: `hosts` hosts of `perHost` ranks each, then `rows`.
std::string output(const std::string& test, int hosts, int perHost, const std::string& rows,
                   const std::string& params = "agg iters: 1 validation: 1 graph: 0 unalign: 0") {
  std::ostringstream s;
  s << "# nccl-tests version 2.19.6 nccl-headers=22809 nccl-library=22809\n"
    << "# Collective test starting: " << test << "\n"
    << "# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 " << params
    << "\n#\n# Using devices\n";
  for (int h = 0; h < hosts; ++h)
    for (int l = 0; l < perHost; ++l)
      s << "#  Rank " << h * perHost + l << " Group  0 Pid " << 100 + l << " on node" << h << " device  " << l
        << " [0000:1b:00] NVIDIA H200\n";
  s << "#\n#                                              out-of-place                       in-place\n"
    << "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
       "busbw  #wrong\n"
    << "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  "
       "(GB/s)\n"
    << rows << "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.0\n#\n# Collective test concluded: " << test
    << "\n";
  return s.str();
}

bool import(const std::string& text, History* h, std::vector<NcclTestsRun>* runs, std::string* error,
            const NcclTestsOptions& options = {}, const std::string& name = "/logs/t.log") {
  return importNcclTests(text, name, options, h, runs, error);
}

// The committed output of all nine tests on 2x H200: every size row of each test, both placements, as transfer times
// of a 2-rank communicator within one node.
TEST(NcclTestsImport, ReadsEveryTestOfRealOutput) {
  const std::string text = readFile(RANKLENS_TEST_DATA "/nccl-tests/2xh200-9tests.log");
  ASSERT_FALSE(text.empty());
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  ASSERT_TRUE(import(text, &h, &runs, &error)) << error;
  ASSERT_EQ(runs.size(), 9u);
  ASSERT_EQ(h.runs.size(), 9u);
  EXPECT_EQ(h.samples.size(), 206u);
  const char* tests[] = {"all_reduce_perf", "all_gather_perf", "broadcast_perf", "reduce_perf",  "reduce_scatter_perf",
                         "alltoall_perf",   "gather_perf",     "scatter_perf",   "sendrecv_perf"};
  const Op ops[] = {Op::kAllReduce, Op::kAllGather, Op::kBroadcast, Op::kReduce, Op::kReduceScatter,
                    Op::kAlltoAll,  Op::kGather,    Op::kScatter,   Op::kSend};
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].test, tests[i]);
    EXPECT_EQ(runs[i].op, static_cast<int>(ops[i]));
    EXPECT_EQ(runs[i].nranks, 2);
    EXPECT_EQ(runs[i].nodes, 1);
    EXPECT_FALSE(runs[i].crossesNodes);
    EXPECT_EQ(runs[i].rows, 12u);
    EXPECT_EQ(h.runs[i], "nccl-tests:/logs/t.log:" + std::string(tests[i]) + ":" + std::to_string(runs[i].line));
    EXPECT_EQ(jobOf(h.runs[i]), h.runs[i]);  // each its own job, whatever the file is called
  }
  EXPECT_EQ(runs[1].rowsEmpty, 1u);  // all_gather's 0-byte row
  // The bytes each sample receives, through RankLens's bus factors, give back nccl-tests' own busbw column (its
  // highest per test, to the file's two decimals): every size conversion of the nine tests checked against
  // nccl-tests' formulas.
  const double busbw[] = {234.16, 187.77, 293.76, 303.65, 181.25, 205.95, 274.90, 263.59, 227.30};
  for (size_t i = 0; i < runs.size(); ++i) EXPECT_NEAR(runs[i].peakBusGBps, busbw[i], 0.1) << tests[i];
  // all_reduce_perf's first row: 8 bytes, 22.43 us out of place, 22.80 in place.
  const HistorySample& first = h.samples[0];
  EXPECT_EQ(first.op, kAllReduce);
  EXPECT_EQ(first.datatype, 7);  // float
  EXPECT_EQ(first.bytes, 8u);
  EXPECT_EQ(first.durationNs, 22430);
  EXPECT_EQ(first.transferNs, 22430);
  EXPECT_TRUE(first.benchmark);
  EXPECT_EQ(first.stepOccurrence, -1);
  EXPECT_EQ(h.samples[1].durationNs, 22800);
  // Received bytes: a reduce-scatter's 32 MiB row receives 16 MiB on 2 ranks; sendrecv's group moves both ways.
  EXPECT_EQ(runs[4].maxBytes, 16u << 20);
  EXPECT_EQ(runs[8].maxBytes, 64u << 20);
  for (const HistorySample& s : h.samples) EXPECT_EQ(s.grouped, s.op == static_cast<int>(Op::kSend));
}

TEST(NcclTestsImport, HostsOfTheDeviceListGiveThePlacement) {
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  const std::string rows = "  1073741824  33554432  bfloat16  sum  -1  5000.0  1.0  1.0  0  5100.5  1.0  1.0  0\n";
  ASSERT_TRUE(import(output("reduce_scatter_perf", 2, 4, rows), &h, &runs, &error)) << error;
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].nranks, 8);
  EXPECT_EQ(runs[0].nodes, 2);
  EXPECT_EQ(runs[0].ranksPerNode, 4);
  EXPECT_TRUE(runs[0].crossesNodes);
  ASSERT_EQ(h.samples.size(), 2u);
  EXPECT_EQ(h.samples[0].bytes, (1u << 30) / 8);
  EXPECT_EQ(h.samples[0].datatype, 9);  // bfloat16
  EXPECT_TRUE(h.samples[0].crossesNodes);
  EXPECT_EQ(h.samples[1].durationNs, 5100500);
  // --ranks-per-node overrides what the hosts say.
  History h2;
  std::vector<NcclTestsRun> runs2;
  NcclTestsOptions options;
  options.ranksPerNode = 8;
  ASSERT_TRUE(import(output("reduce_scatter_perf", 2, 4, rows), &h2, &runs2, &error, options)) << error;
  EXPECT_FALSE(runs2[0].crossesNodes);
}

TEST(NcclTestsImport, LauncherPrefixesAndMessagesBetweenRowsAreSkipped) {
  const std::string plain = output("all_reduce_perf", 1, 2,
                                   "  1024  256  float  sum  -1  20.0  0.1  0.1  0  21.0  0.1  0.1  0\n"
                                   "  2048  512  float  sum  -1  22.0  0.1  0.1  0  23.0  0.1  0.1  0\n");
  std::string tagged, labelled;
  std::istringstream in(plain);
  for (std::string line; std::getline(in, line);) {
    tagged += "[1,0]<stdout>:" + line + "\n";
    labelled += (line.empty() || line[0] == '#' ? line : "0: " + line) + "\n";
  }
  labelled += "1 more process has sent help message help-mpi-btl-openib.txt / no active ports found\n";
  for (const std::string& text : {tagged, labelled}) {
    History h;
    std::vector<NcclTestsRun> runs;
    std::string error;
    ASSERT_TRUE(import(text, &h, &runs, &error)) << error << "\n" << text;
    ASSERT_EQ(h.samples.size(), 4u);
    EXPECT_EQ(h.samples[3].durationNs, 23000);
    EXPECT_EQ(runs[0].nranks, 2);
  }
}

TEST(NcclTestsImport, WrongResultsAreLeftOutAndCounted) {
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  ASSERT_TRUE(import(output("all_reduce_perf", 1, 2,
                            "  1024  256  float  sum  -1  20.0  0.1  0.1  3  21.0  0.1  0.1  0\n"
                            "  2048  512  float  sum  -1  22.0  0.1  0.1  N/A  23.0  0.1  0.1  N/A\n"),
                     &h, &runs, &error))
      << error;
  EXPECT_EQ(runs[0].rowsWrong, 1u);
  ASSERT_EQ(h.samples.size(), 3u);
  EXPECT_EQ(h.samples[0].durationNs, 21000);  // the in-place time of the first row only
}

// Each refusal names the line, the reason and the way out; the history is left as it was.
TEST(NcclTestsImport, RefusalsNameTheLineAndTheFix) {
  const std::string row = "  1024  256  float  sum  -1  20.0  0.1  0.1  0  21.0  0.1  0.1  0\n";
  std::string duplicated = output("all_reduce_perf", 1, 2, row);
  duplicated.replace(duplicated.find("Rank 1 "), 7, "Rank 0 ");
  std::string cpu = output("all_reduce_perf", 1, 2, row);
  cpu.replace(cpu.find(" time "), 6, " cputime ");
  std::string badTime =
      output("all_reduce_perf", 1, 2, "  1024  256  float  sum  -1  fast  0.1  0.1  0  21.0  0.1  0.1  0\n");
  struct Case {
    std::string text, expected;
    NcclTestsOptions options;
  } cases[] = {
      {duplicated, "t.log:7: rank 0 is listed twice: nccl-tests built without MPI", {}},
      {cpu, "t.log:10: the times are CPU times (nccl-tests -C 1): rerun without -C", {}},
      {output("all_reduce_perf", 1, 2, row, "agg iters: 4 validation: 1 graph: 0"),
       "t.log:3: agg iters 4: each time is of a group of 4 calls",
       {}},
      {output("hypercube_perf", 1, 2, row), "t.log:12: test 'hypercube_perf' is not one call of one operation", {}},
      {badTime, "t.log:12: time 'fast' is not a duration in microseconds", {}},
      {"  1024  256  float  sum  -1  20.0  0.1  0.1  0  21.0  0.1  0.1  0\n", "no nccl-tests results to import", {}},
      {"#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   "
       "busbw  #wrong\n" +
           row,
       "t.log:2: results without a device list",
       {}},
      {"not nccl-tests at all\n\x01\x02", "t.log: no nccl-tests results to import", {}},
      {output("all_reduce_perf", 1, 2, row), "t.log:12: the device list shows 2 ranks, --nranks says 4", {"", 4, -1}},
  };
  for (const Case& c : cases) {
    History h;
    h.runs.push_back("/scratch/run42/rank0");
    std::vector<NcclTestsRun> runs;
    std::string error;
    EXPECT_FALSE(import(c.text, &h, &runs, &error, c.options)) << c.expected;
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
    EXPECT_EQ(h.runs.size(), 1u);
    EXPECT_TRUE(h.samples.empty());
    EXPECT_TRUE(runs.empty());
  }
}

// A pasted table (no header, no device list) imports with the operation and the communicator given.
TEST(NcclTestsImport, APastedTableNeedsTheOperationAndTheSize) {
  const std::string table =
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  "
      "#wrong\n  4194304  1048576  float  sum  -1  40.0  1.0  1.0  0  41.0  1.0  1.0  0\n";
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  NcclTestsOptions options;
  options.nranks = 16;
  EXPECT_FALSE(import(table, &h, &runs, &error, options));
  EXPECT_NE(error.find("pass --op"), std::string::npos) << error;
  options.op = "AllGather";
  options.ranksPerNode = 8;
  ASSERT_TRUE(import(table, &h, &runs, &error, options)) << error;
  ASSERT_EQ(h.samples.size(), 2u);
  EXPECT_EQ(h.samples[0].op, static_cast<int>(Op::kAllGather));
  EXPECT_EQ(h.samples[0].nranks, 16);
  EXPECT_TRUE(h.samples[0].crossesNodes);
}

TEST(NcclTestsImport, TheSameFileTwiceIsRefused) {
  const std::string text =
      output("all_reduce_perf", 1, 2, "  1024  256  float  sum  -1  20.0  0.1  0.1  0  21.0  0.1  0.1  0\n");
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  ASSERT_TRUE(import(text, &h, &runs, &error)) << error;
  EXPECT_FALSE(import(text, &h, &runs, &error));
  EXPECT_NE(error.find("already in the history"), std::string::npos) << error;
  EXPECT_EQ(h.samples.size(), 2u);
  ASSERT_TRUE(import(text, &h, &runs, &error, {}, "/logs/other.log")) << error;  // another file is another run
  EXPECT_EQ(h.samples.size(), 4u);
}

// Version 5 keeps the benchmark mark through a file; a version 4 history reads as recorded calls.
TEST(NcclTestsImport, TheBenchmarkMarkSurvivesTheHistoryFile) {
  History h;
  std::vector<NcclTestsRun> runs;
  std::string error;
  const std::string row = "  1024  256  float  sum  -1  20.0  0.1  0.1  0  21.0  0.1  0.1  0\n";
  ASSERT_TRUE(import(output("all_reduce_perf", 2, 8, row), &h, &runs, &error)) << error;
  const std::string path = ::testing::TempDir() + "/nccl-tests-" + std::to_string(getpid()) + ".hist";
  ASSERT_TRUE((error = saveHistory(path, h).message()).empty()) << error;
  History back;
  ASSERT_TRUE((error = loadHistory(path, &back).message()).empty()) << error;
  std::remove(path.c_str());
  ASSERT_EQ(back.samples.size(), 2u);
  EXPECT_EQ(back.version, 5);
  EXPECT_TRUE(back.samples[0].benchmark);
  EXPECT_TRUE(back.samples[0].crossesNodes);
  EXPECT_EQ(back.samples[0].nranks, 16);
  // A version 4 history (before the mark) reads as recorded calls.
  History v4;
  ASSERT_TRUE(
      (error = loadHistory(RANKLENS_TEST_DATA "/../fuzz/corpus/fuzz_history/v4-one-rank-groups.hist", &v4).message())
          .empty())
      << error;
  EXPECT_EQ(v4.version, 4);
  ASSERT_FALSE(v4.samples.empty());
  for (const HistorySample& s : v4.samples) EXPECT_FALSE(s.benchmark);
}

// nccl-tests' JSON output (-J) of a run on one H200 gives the samples its text output gives, to the text's rounding
// (two decimals of a microsecond); its refusals say where in the JSON.
TEST(NcclTestsImport, JsonOutputReadsAsItsText) {
  for (const char* test : {"all_reduce_1gpu", "sendrecv_1gpu"}) {
    History fromJson, fromText;
    std::vector<NcclTestsRun> runs;
    std::string error;
    const std::string base = std::string(RANKLENS_TEST_DATA "/nccl-tests/") + test;
    ASSERT_TRUE(import(readFile(base + ".json"), &fromJson, &runs, &error, {}, base + ".json")) << error;
    ASSERT_TRUE(import(readFile(base + ".txt"), &fromText, &runs, &error, {}, base + ".txt")) << error;
    ASSERT_EQ(fromJson.samples.size(), 12u) << test;
    ASSERT_EQ(fromJson.samples.size(), fromText.samples.size());
    for (size_t i = 0; i < fromJson.samples.size(); ++i) {
      const HistorySample &j = fromJson.samples[i], &t = fromText.samples[i];
      EXPECT_EQ(j.op, t.op);
      EXPECT_EQ(j.bytes, t.bytes);
      EXPECT_EQ(j.grouped, t.grouped);
      EXPECT_EQ(j.nranks, t.nranks);
      EXPECT_NEAR(static_cast<double>(j.durationNs), static_cast<double>(t.durationNs), 5.0) << test << " " << i;
    }
    EXPECT_EQ(runs[0].test, runs[1].test);
  }
  const std::string json = readFile(RANKLENS_TEST_DATA "/nccl-tests/all_reduce_1gpu.json");
  struct Case {
    std::string text, expected;
  } cases[] = {
      {"{\"results\": [", "not JSON nccl-tests wrote"},
      {"{\"args\": [\"./all_reduce_perf\"], \"results\": [1]}", "results[0] is not an object"},
      {"{\"args\": [\"./all_reduce_perf\"], \"config\": {\"aggregated_iterations\": 4}, \"results\": []}",
       "(config): agg iters 4"},
      {"{\"args\": [\"./all_reduce_perf\"], \"results\": [{\"size\": 8, \"count\": 2, \"type\": \"float\", "
       "\"out_of_place\": {\"cpu_time\": 3.5}}]}",
       "(results): the times are CPU times"},
      {"{\"args\": [\"./all_reduce_perf\"], \"config\": {\"devices\": [{\"rank\": 0, \"hostname\": \"a\"}]}, "
       "\"results\": [{\"size\": 8, \"count\": 2, \"type\": \"float\", \"out_of_place\": {\"time\": \"fast\"}}]}",
       "(results[0]): time 'fast' is not a duration"},
  };
  for (const Case& c : cases) {
    History h;
    std::vector<NcclTestsRun> runs;
    std::string error;
    EXPECT_FALSE(import(c.text, &h, &runs, &error)) << c.expected;
    EXPECT_NE(error.find(c.expected), std::string::npos) << error;
    EXPECT_TRUE(h.samples.empty());
  }
}

std::vector<HistorySample> lineSamples(int op, int nranks, bool crosses, double usPerMiB, bool benchmark, uint32_t run,
                                       double latencyUs = 20) {
  std::vector<HistorySample> out;
  for (uint64_t mib : {1ull, 4ull, 16ull, 64ull}) {
    HistorySample s;
    s.op = op;
    s.nranks = nranks;
    s.crossesNodes = crosses;
    s.bytes = mib << 20;
    s.durationNs = s.transferNs = static_cast<int64_t>((latencyUs + usPerMiB * static_cast<double>(mib)) * 1000);
    s.benchmark = benchmark;
    s.run = run;
    out.push_back(s);
  }
  return out;
}

// A communicator across nodes takes its time from nccl-tests across nodes, not from the one-node recording, even at
// a size of communicator that neither has; within one node, the recording's calls win over the benchmark's.
TEST(NcclTestsImport, EstimatesAcrossNodesComeFromTheBenchmarkAcrossNodes) {
  History h;
  h.runs = {"/scratch/run42/rank0", "nccl-tests:/logs/ar16.log:all_reduce_perf:2",
            "nccl-tests:/logs/ar8.log:all_reduce_perf:2"};
  for (const auto& s : lineSamples(kAllReduce, 8, false, 10, false, 0)) h.samples.push_back(s);  // recorded, NVLink
  for (const auto& s : lineSamples(kAllReduce, 16, true, 50, true, 1)) h.samples.push_back(s);   // nccl-tests, IB
  for (const auto& s : lineSamples(kAllReduce, 8, false, 8, true, 2)) h.samples.push_back(s);    // nccl-tests, NVLink
  HistorySample tiny = h.samples.back();  // and its 8-byte row, a size the recording is far from
  tiny.bytes = 8;
  tiny.durationNs = tiny.transferNs = 15000;
  h.samples.push_back(tiny);
  const Estimator e(h, {});
  // At the benchmark's size and placement: its own samples.
  const Estimate at16 = e.estimate(kAllReduce, 16, true, 16u << 20);
  EXPECT_EQ(at16.durationNs, (20 + 50 * 16) * 1000);
  EXPECT_STREQ(at16.method, "same-size median");
  // 256 ranks across nodes: the line through the benchmark across nodes (bus bytes 2(n-1)/n of the size).
  const Estimate at256 = e.estimate(kAllReduce, 256, true, 64u << 20);
  EXPECT_TRUE(at256.extrapolated);
  const double bus16 = 2.0 * 15 / 16, bus256 = 2.0 * 255 / 256;
  EXPECT_NEAR(static_cast<double>(at256.durationNs), (20 + 50 * 64 * bus256 / bus16) * 1000, 1000);
  // Within one node, 8 ranks: the recorded calls, not the benchmark's faster ones.
  EXPECT_EQ(e.estimate(kAllReduce, 8, false, 4u << 20).durationNs, (20 + 10 * 4) * 1000);
  // Within one node at a size the recording is far from but the benchmark has: the benchmark's sample, not a line.
  const Estimate small = e.estimate(kAllReduce, 8, false, 8);
  EXPECT_EQ(small.durationNs, 15000);
  EXPECT_FALSE(small.extrapolated);
  // Far beyond both (1 GiB): the line of its own placement.
  const Estimate far = e.estimate(kAllReduce, 8, false, 1u << 30);
  EXPECT_TRUE(far.extrapolated);
  EXPECT_LT(far.durationNs, (20 + 50 * 1024) * 1000 / 2);  // not the cross-node bandwidth
  // evaluate() judges recorded calls only.
  const Evaluation ev = evaluate(h, {});
  EXPECT_EQ(ev.jobs, 1u);
  EXPECT_EQ(ev.benchmarkRuns, 2u);
  EXPECT_EQ(ev.leaveOneOut.at("all").count, 4u);
}

}  // namespace

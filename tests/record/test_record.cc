// SPDX-License-Identifier: Apache-2.0
// Record mode without a GPU: record_scenario (linked against RankLens's libnccl.so.2) runs in a child process per
// configuration, forwarding to the fake "real NCCL" of tests/support on the host record device; this test checks
// the child's own verdict and then the trace it wrote, read back with ranklens::trace::TraceReader.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <tuple>
#include <string>
#include <thread>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"
#include "trace_test_support.h"

namespace {

using ranklens::events::Call;
using ranklens::events::Op;
using ranklens::trace::RecordType;

using Trace = trace_test::Trace;
using trace_test::readTrace;

// Every stored payload reads back whole.
void expectEveryPayloadReadable(const Trace& t) {
  for (const auto& p : t.payloads) {
    std::vector<uint8_t> bytes;
    ranklens::trace::Problem problem;
    EXPECT_TRUE(t.reader->readPayload(p, &bytes, &problem)) << problem.describe();
    EXPECT_EQ(bytes.size(), p.rawBytes);
  }
}

struct ScenarioRun {
  int status = -1;
  std::string output;
  std::string traceDir;  // <dir>/rank0
};

// Runs a scenario with the record-mode environment plus `extra`; returns its exit status and output.
// `tag` keeps a run's trace apart from another run of the same scenario in the same test.
ScenarioRun runScenario(const std::string& scenario, const std::map<std::string, std::string>& extra,
                        const std::string& tag = "") {
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, scenario + tag + "-" + std::to_string(getpid()));
  std::map<std::string, std::string> env = {{"RANKLENS_MODE", "record"},
                                            {"RANKLENS_DEVICE", "host"},
                                            {"RANKLENS_REAL_NCCL", FAKE_REAL_NCCL},
                                            {"RANKLENS_TRACE_DIR", dir},
                                            {"RANK", "0"},
                                            {"FAKE_REAL_NCCL_SPIN_US", "300"}};
  for (const auto& [k, v] : extra) env[k] = v;
  trace_test::ChildRun child = trace_test::runWithEnv(env, "'" RECORD_SCENARIO "' " + scenario);
  return ScenarioRun{child.status, child.output, dir + "/rank0"};
}

// The capture scenario with `variable` set to `value`, or with the default when `value` is empty.
ScenarioRun runCaptureWith(const std::string& variable, const std::string& value, const std::string& tag) {
  std::map<std::string, std::string> env;
  if (!value.empty()) env[variable] = value;
  return runScenario("capture", env, tag);
}

TEST(RecordForward, SameResultsErrorsAndVersionAsTheRealLibrary) {
  ScenarioRun run = runScenario("forward", {});
  EXPECT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  EXPECT_EQ(t.manifest.mode, "record");
  EXPECT_EQ(t.manifest.nccl_version, 22707);  // the real library's, not RankLens's header version
  EXPECT_NE(t.manifest.writer.find(FAKE_REAL_NCCL), std::string::npos) << t.manifest.writer;
  // The machine (format 1.7), for comparing a replay made elsewhere (an x86 /proc/cpuinfo names the processor).
  EXPECT_FALSE(t.manifest.cpu_model.empty());
  EXPECT_GE(t.manifest.cpus, 1);
  EXPECT_LE(t.manifest.cpus, static_cast<int>(std::thread::hardware_concurrency()));
  // InitAll's internal ncclCommInitRank calls stay inside the real library: two communicators, not four.
  ASSERT_EQ(t.comms.size(), 2u);
  EXPECT_EQ(t.comms[0].how, "initAll");
  EXPECT_EQ(t.comms[1].rank, 1);
  // Bcast is recorded once, as an in-place Broadcast (its internal ncclBroadcast call is not a second call).
  int broadcasts = 0;
  for (const Call& c : t.calls) broadcasts += c.op == static_cast<int>(Op::kBroadcast);
  EXPECT_EQ(broadcasts, 1);
  // The failed AllReduce (NULL communicator) is not in the trace.
  int allReduces = 0;
  for (const Call& c : t.calls) allReduces += c.op == static_cast<int>(Op::kAllReduce);
  EXPECT_EQ(allReduces, 2);      // one alone, one in the simulated group
  ASSERT_EQ(t.ends.size(), 3u);  // finalize, destroy, abort
  EXPECT_EQ(t.ends[0].how, "finalize");
  EXPECT_EQ(t.ends[2].how, "abort");
}

TEST(RecordCapture, CallsTimingsPayloadsGroupsAndLineage) {
  ScenarioRun run = runScenario("capture", {});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  ASSERT_EQ(t.comms.size(), 3u);  // two from InitAll, one split child (the NOCOLOR split creates none)
  const auto& child = t.comms[2];
  EXPECT_EQ(child.how, "split");
  EXPECT_EQ(child.parentId, 0);
  EXPECT_EQ(child.color, 3);
  EXPECT_EQ(child.key, 9);
  EXPECT_EQ(child.nranks, 1);  // asked from the real library after the split (the fake halves the parent)
  EXPECT_EQ(child.rank, 0);
  EXPECT_TRUE(child.worldRanks.empty());
  EXPECT_EQ(t.comms[0].worldRanks, (std::vector<int>{0, 1}));

  // Calls: comm 0: AllReduce seq 0, Send/Recv seq 0 to peer 1, big AllReduce seq 1 (the failed call consumed none);
  // comm 1: AllGather seq 0, AllReduce seq 1; child: AllReduce seq 0.
  ASSERT_EQ(t.calls.size(), 7u);
  EXPECT_EQ(t.calls[0].op, static_cast<int>(Op::kAllReduce));
  EXPECT_EQ(t.calls[0].bytes, 16u);
  EXPECT_EQ(t.calls[1].op, static_cast<int>(Op::kAllGather));
  EXPECT_EQ(t.calls[1].bytes, 32u);  // received: count x nranks
  EXPECT_EQ(t.calls[2].op, static_cast<int>(Op::kSend));
  EXPECT_EQ(t.calls[2].groupId, t.calls[3].groupId);
  EXPECT_NE(t.calls[2].groupId, 0u);
  EXPECT_EQ(t.calls[5].op, static_cast<int>(Op::kAllReduce));
  EXPECT_EQ(t.calls[5].seq, 1u);
  EXPECT_EQ(t.calls[5].commId, 0u);
  EXPECT_EQ(t.calls[6].commId, 2u);
  ASSERT_EQ(t.groupBegins.size(), 1u);
  ASSERT_EQ(t.groups.size(), 1u);
  EXPECT_EQ(t.groups[0].calls, 3u);

  // Timings: one per call outside groups (4), one per stream of the group (2); the fake spins 300 us per call.
  ASSERT_EQ(t.timings.size(), 6u);
  for (const auto& timing : t.timings) {
    EXPECT_FALSE(timing.captured);
    EXPECT_GE(timing.durationNs, 250'000) << "comm " << timing.commId << " seq " << timing.seq;
    EXPECT_EQ(timing.eventNs, timing.durationNs);  // host device: the work was done inside the call
    EXPECT_LT(timing.durationNs, 2'000'000'000);
  }
  int groupTimings = 0;
  for (const auto& timing : t.timings) {
    if (timing.groupId == 0) continue;
    ++groupTimings;
    // A group's stream is timed from its first call: the Send on stream B (2 calls, 2 x 300 us), the AllReduce on A.
    if (timing.stream == 0xb) {
      EXPECT_EQ(timing.op, static_cast<int>(Op::kSend));
      EXPECT_GE(timing.durationNs, 500'000);
    }
  }
  EXPECT_EQ(groupTimings, 2);
  // Gaps (Timing.gapNs) from a communicator's previous collective outside groups: only comm 0's big AllReduce has
  // one, from the end of its AllReduce seq 0, across the AllGather and the group (4 calls of 300 us).
  for (const auto& timing : t.timings) {
    if (timing.commId == 0 && timing.seq == 1 && timing.groupId == 0) {
      EXPECT_GE(timing.gapNs, 1'100'000);
      EXPECT_LT(timing.gapNs, 1'000'000'000);
    } else {
      EXPECT_EQ(timing.gapNs, -1) << "comm " << timing.commId << " seq " << timing.seq << " group " << timing.groupId;
    }
  }

  // Payloads: every received message up to 64 KiB (not the 128 KiB AllReduce, not the Send).
  ASSERT_EQ(t.payloads.size(), 5u);
  std::map<std::pair<uint64_t, int>, ranklens::trace::PayloadRef> byCall;
  for (const auto& p : t.payloads) byCall[{p.commId, p.op}] = p;
  ASSERT_TRUE(byCall.count({0, static_cast<int>(Op::kRecv)}));
  const auto recv = byCall[{0, static_cast<int>(Op::kRecv)}];
  EXPECT_EQ(recv.peer, 1);
  EXPECT_EQ(recv.count, 256u);
  std::vector<uint8_t> bytes;
  ranklens::trace::Problem problem;
  ASSERT_TRUE(t.reader->readPayload(recv, &bytes, &problem)) << problem.describe();
  EXPECT_EQ(bytes, std::vector<uint8_t>(256, 2));  // what the real library wrote: peer + 1
  const auto gather = byCall[{1, static_cast<int>(Op::kAllGather)}];
  ASSERT_TRUE(t.reader->readPayload(gather, &bytes, &problem)) << problem.describe();
  ASSERT_EQ(bytes.size(), 32u);
  float values[8];
  memcpy(values, bytes.data(), 32);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[7], 4.0f);
  EXPECT_EQ(t.stages.size(), 2u);
}

TEST(RecordCapture, PayloadPolicyNoneAllAndFilters) {
  ScenarioRun none = runScenario("capture", {{"RANKLENS_PAYLOADS", "none"}});
  ASSERT_EQ(none.status, 0) << none.output;
  Trace t = readTrace(none.traceDir);
  EXPECT_TRUE(t.payloads.empty());
  EXPECT_EQ(t.timings.size(), 6u);
  // The job's device memory as the recorder saw it (the host device's is the host's), for payload_device_bytes: auto.
  const uint64_t total = t.manifest.counters["device_memory_total_bytes"];
  EXPECT_GT(total, 0u);
  EXPECT_GT(t.manifest.counters["device_memory_least_free_bytes"], 0u);
  EXPECT_LE(t.manifest.counters["device_memory_least_free_bytes"], total);

  ScenarioRun all = runScenario("capture", {{"RANKLENS_PAYLOADS", "all"}});
  ASSERT_EQ(all.status, 0) << all.output;
  t = readTrace(all.traceDir);
  EXPECT_EQ(t.payloads.size(), 6u);  // the 128 KiB AllReduce too

  // Only Recv payloads, only in step 0 (the big AllReduce is in step 1 anyway).
  ScenarioRun filtered = runScenario("capture", {{"RANKLENS_PAYLOADS", "all"},
                                                 {"RANKLENS_PAYLOAD_OPS", "Recv,AllReduce"},
                                                 {"RANKLENS_PAYLOAD_STEPS", "0"},
                                                 {"RANKLENS_PAYLOAD_COMMS", "0"}});
  ASSERT_EQ(filtered.status, 0) << filtered.output;
  t = readTrace(filtered.traceDir);
  ASSERT_EQ(t.payloads.size(), 2u);  // comm 0, step 0: the first AllReduce and the Recv
  for (const auto& p : t.payloads) EXPECT_EQ(p.commId, 0u);

  // Staging memory too small for the 128 KiB message: skipped and counted, everything else kept.
  ScenarioRun small = runScenario("capture", {{"RANKLENS_PAYLOADS", "all"}, {"RANKLENS_STAGING_BYTES", "64KiB"}});
  ASSERT_EQ(small.status, 0) << small.output;
  t = readTrace(small.traceDir);
  EXPECT_EQ(t.payloads.size(), 5u);
  EXPECT_EQ(t.manifest.counters["payloads_skipped_too_large"], 1u);
}

// Steps 0-3, step 3's marker inside step 2's group: every call is recorded, every marker written.
TEST(RecordCapture, StepMarkerInsideAGroupKeepsEveryCall) {
  ScenarioRun run = runScenario("steps", {{"RANKLENS_PAYLOADS", "none"}});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  EXPECT_EQ(t.calls.size(), 10u);
  EXPECT_EQ(t.counter("calls_unrecorded"), ~0ull);  // not written: every call is recorded
  EXPECT_EQ(t.stages.size(), 4u);
}

// Payloads are compressed at payload_zstd_level (a fast level by default), recorded in each PayloadRef, and read back
// whatever the level.
TEST(RecordCapture, PayloadsAtTheConfiguredZstdLevel) {
  for (const char* level : {"", "3"}) {
    SCOPED_TRACE(std::string("RANKLENS_PAYLOAD_ZSTD_LEVEL '") + level + "'");
    ScenarioRun run = runCaptureWith("RANKLENS_PAYLOAD_ZSTD_LEVEL", level, *level ? "-level" : "-default");
    ASSERT_EQ(run.status, 0) << run.output;
    Trace t = readTrace(run.traceDir);
    ASSERT_EQ(t.payloads.size(), 5u);
    for (const auto& p : t.payloads) EXPECT_EQ(p.zstdLevel, *level ? 3 : -1);
    expectEveryPayloadReadable(t);
  }
}

// timing_clock: kernel. The fake real NCCL loads RankLens's library as its profiler plugin (NCCL_PROFILER_PLUGIN, set
// by record mode) and reports each task's channels with made-up GPU timestamps: a task's kernel time is
// 100 (channels - 1) + 1000 + bytes ns, tasks start 10 us apart (tests/support/fake_real_nccl.cc).
TEST(RecordKernelClock, DurationsAreNcclsKernelTimes) {
  ScenarioRun run = runScenario("capture", {{"RANKLENS_TIMING_CLOCK", "kernel"}, {"RANKLENS_PAYLOADS", "none"}});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  ASSERT_EQ(t.timings.size(), 6u);
  std::map<std::pair<uint64_t, int>, ranklens::trace::Timing> byCall;  // (comm, op) outside groups
  std::vector<ranklens::trace::Timing> grouped;
  for (const auto& timing : t.timings) {
    if (timing.groupId != 0)
      grouped.push_back(timing);
    else if (timing.durationNs < 100'000)
      byCall[{timing.commId, timing.op}] = timing;  // the big one: below
  }
  const int allReduce = static_cast<int>(Op::kAllReduce), allGather = static_cast<int>(Op::kAllGather);
  ASSERT_TRUE(byCall.count({0, allReduce}) && byCall.count({1, allGather})) << run.output;
  const ranklens::trace::Timing first = byCall[{0, allReduce}], gather = byCall[{1, allGather}];
  EXPECT_EQ(first.durationNs, 1116);  // 16 bytes, 2 channels
  EXPECT_EQ(first.clock, ranklens::trace::kClockKernel);
  EXPECT_EQ(first.eventNs, -1);
  EXPECT_EQ(gather.durationNs, 1116);
  ASSERT_EQ(grouped.size(), 2u);
  for (const auto& g : grouped) {
    EXPECT_EQ(g.clock, ranklens::trace::kClockKernel);
    // Stream B: Send then Recv, 10 us apart: from the Send's first channel to the Recv's last stop.
    if (g.stream == 0xb)
      EXPECT_EQ(g.durationNs, 10'000 + 1356);
    else
      EXPECT_EQ(g.durationNs, 1116);
  }
  int big = 0, child = 0;
  for (const auto& timing : t.timings) {
    if (timing.durationNs == 1100 + 131072 && timing.clock == ranklens::trace::kClockKernel) ++big;
    // The split child has one rank: NCCL launches no kernel for it, so it keeps CUDA events (here host clocks).
    if (timing.commId == 2) {
      ++child;
      EXPECT_EQ(timing.clock, ranklens::trace::kClockEvents);
      EXPECT_GE(timing.durationNs, 250'000);
    }
  }
  EXPECT_EQ(big, 1);
  EXPECT_EQ(child, 1);
  EXPECT_EQ(t.manifest.counters["kernel_clock_timed"], 5u);
  EXPECT_EQ(t.manifest.counters["kernel_clock_unmatched"], 0u);
  EXPECT_EQ(t.manifest.counters["kernel_clock_incomplete"], 0u);
}

// Calls whose payload is stored keep the kernel clock: their payloads go through spans that time nothing (no event
// on the calling thread but after a copy engine's copy). Every call is timed as without payloads, and every payload is
// the one a recording with CUDA events stores.
TEST(RecordKernelClock, StoredPayloadsKeepTheKernelClock) {
  ScenarioRun kernel = runScenario("capture", {{"RANKLENS_TIMING_CLOCK", "kernel"}}, "-kernel");
  ASSERT_EQ(kernel.status, 0) << kernel.output;
  ScenarioRun bare =
      runScenario("capture", {{"RANKLENS_TIMING_CLOCK", "kernel"}, {"RANKLENS_PAYLOADS", "none"}}, "-bare");
  ASSERT_EQ(bare.status, 0) << bare.output;
  ScenarioRun events = runScenario("capture", {}, "-events");
  ASSERT_EQ(events.status, 0) << events.output;
  Trace t = readTrace(kernel.traceDir), withoutPayloads = readTrace(bare.traceDir),
        withEvents = readTrace(events.traceDir);

  auto kernelTimings = [](const Trace& trace) {
    std::map<std::tuple<uint64_t, uint64_t, uint64_t>, int64_t> byCall;  // (comm, seq, stream): kernel duration
    for (const auto& timing : trace.timings)
      if (timing.clock == ranklens::trace::kClockKernel)
        byCall[{timing.commId, timing.seq, timing.stream}] = timing.durationNs;
    return byCall;
  };
  ASSERT_EQ(t.timings.size(), 6u);
  EXPECT_EQ(kernelTimings(t).size(), 5u) << "every call but the 1-rank child's";
  EXPECT_EQ(kernelTimings(t), kernelTimings(withoutPayloads));
  EXPECT_EQ(t.manifest.counters["kernel_clock_timed"], 5u);

  ASSERT_EQ(t.payloads.size(), 5u);
  ASSERT_EQ(withEvents.payloads.size(), 5u);
  EXPECT_EQ(t.counter("payloads_staged"), 5u);
  EXPECT_EQ(t.counter("payload_copy_failures"), 0u);
  for (size_t i = 0; i < t.payloads.size(); ++i) {
    const auto& p = t.payloads[i];
    const auto same = std::find_if(withEvents.payloads.begin(), withEvents.payloads.end(), [&](const auto& q) {
      return q.commId == p.commId && q.seq == p.seq && q.op == p.op && q.peer == p.peer;
    });
    ASSERT_NE(same, withEvents.payloads.end()) << "payload " << i;
    std::vector<uint8_t> ours, theirs;
    ranklens::trace::Problem problem;
    ASSERT_TRUE(t.reader->readPayload(p, &ours, &problem)) << problem.describe();
    ASSERT_TRUE(withEvents.reader->readPayload(*same, &theirs, &problem)) << problem.describe();
    EXPECT_EQ(ours, theirs) << "comm " << p.commId << " seq " << p.seq;
    EXPECT_FALSE(ours.empty());
  }
}

// A payload bigger than payload_copy_kernel_bytes goes through a copy engine, followed by an event: under the kernel
// clock too, and with every size there (0).
TEST(RecordKernelClock, CopyEnginePayloadsKeepTheKernelClock) {
  ScenarioRun run =
      runScenario("capture", {{"RANKLENS_TIMING_CLOCK", "kernel"}, {"RANKLENS_PAYLOAD_COPY_KERNEL_BYTES", "0"}});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  EXPECT_EQ(t.manifest.counters["kernel_clock_timed"], 5u);
  EXPECT_EQ(t.payloads.size(), 5u);
  EXPECT_EQ(t.counter("payload_copy_failures"), 0u);
  expectEveryPayloadReadable(t);
}

// A call on a 1-rank communicator has no NCCL kernel before its payload copy, so the copy takes a copy engine (a copy
// kernel there waits for an SM when the job's compute fills them) unless payload_copy_kernel_bytes_one_rank says
// otherwise; calls of several ranks keep the kernel. Every payload stored either way.
TEST(RecordPayloads, OneRankCallsCopyThroughTheCopyEngine) {
  for (const char* oneRank : {"", "64KiB"}) {
    SCOPED_TRACE(std::string("payload_copy_kernel_bytes_one_rank ") + (*oneRank ? oneRank : "default"));
    ScenarioRun run = runCaptureWith("RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK", oneRank,
                                     *oneRank ? "-one-rank-kernel" : "-one-rank-engine");
    ASSERT_EQ(run.status, 0) << run.output;
    Trace t = readTrace(run.traceDir);
    EXPECT_EQ(t.payloads.size(), 5u);
    EXPECT_EQ(t.counter("payloads_staged"), 5u);
    EXPECT_EQ(t.counter("payloads_copy_engine"), *oneRank ? 0u : 1u) << "the split child's call has one rank";
    EXPECT_EQ(t.counter("payload_copy_failures"), 0u);
    expectEveryPayloadReadable(t);
  }
}

// NCCL loads one profiler plugin: when the job already names one, RankLens says so and keeps CUDA events.
TEST(RecordKernelClock, AnotherProfilerPluginKeepsEvents) {
  ScenarioRun run = runScenario("capture", {{"RANKLENS_TIMING_CLOCK", "kernel"},
                                            {"RANKLENS_PAYLOADS", "none"},
                                            {"NCCL_PROFILER_PLUGIN", "/nonexistent/libnccl-profiler-x.so"},
                                            {"NCCL_DEBUG", "WARN"}});
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("timing_clock kernel is unavailable (NCCL_PROFILER_PLUGIN is already set"),
            std::string::npos)
      << run.output;
  Trace t = readTrace(run.traceDir);
  ASSERT_EQ(t.timings.size(), 6u);
  for (const auto& timing : t.timings) EXPECT_EQ(timing.clock, ranklens::trace::kClockEvents);
}

TEST(RecordNonBlocking, CommunicatorsAnnouncedAndTimedWhenReady) {
  ScenarioRun run = runScenario("nonblocking", {});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  ASSERT_EQ(t.comms.size(), 2u);
  EXPECT_EQ(t.comms[0].name, "nb-world");
  EXPECT_FALSE(t.comms[0].blocking);
  EXPECT_EQ(t.comms[0].nranks, 4);
  EXPECT_EQ(t.comms[0].rank, 2);
  EXPECT_EQ(t.comms[1].how, "split");
  EXPECT_EQ(t.comms[1].nranks, 2);  // learnt from the real library once the split completed
  EXPECT_FALSE(t.comms[1].blocking);
  ASSERT_EQ(t.timings.size(), 1u);
  EXPECT_GE(t.timings[0].durationNs, 250'000);
}

TEST(RecordErrors, MissingFunctionNamesPathAndVersion) {
  ScenarioRun run = runScenario("missing-symbol", {{"RANKLENS_REAL_NCCL", FAKE_REAL_NCCL_OLD}});
  EXPECT_EQ(run.status, 0) << run.output;
}

TEST(RecordErrors, NoRealNcclNamesTheFix) {
  ScenarioRun run = runScenario("no-real-nccl", {{"RANKLENS_REAL_NCCL", "/nonexistent/libnccl.so.2"}});
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("/nonexistent/libnccl.so.2 does not exist"), std::string::npos) << run.output;
}

// Discovery: LD_LIBRARY_PATH lists (1) a link to RankLens itself, (2) a copy of RankLens, (3) the fake real NCCL.
TEST(RecordDiscovery, SkipsItselfByInodeAndCopiesByContent) {
#if defined(__SANITIZE_THREAD__)
  // Discovery opens the copy to find RankLens's marker, then closes it; ThreadSanitizer's atexit interceptor keeps the
  // copy's static destructors past that dlclose and calls them at exit, in unmapped code (glibc alone runs them at
  // dlclose).
  GTEST_SKIP() << "ThreadSanitizer runs a dlclose'd library's atexit handlers at exit";
#endif
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, "discovery");
  ASSERT_EQ(system(("mkdir -p " + dir + "/self " + dir + "/copy && ln -s '" RANKLENS_LIB "' " + dir +
                    "/self/libnccl.so.2 && cp '" RANKLENS_LIB "' " + dir + "/copy/libnccl.so.2")
                       .c_str()),
            0);
  const std::string fakeDir = std::string(FAKE_REAL_NCCL).substr(0, std::string(FAKE_REAL_NCCL).rfind('/'));
  ScenarioRun run = runScenario("discover", {{"RANKLENS_REAL_NCCL", "<unset>"},
                                             {"NCCL_DEBUG", "INFO"},
                                             {"LD_LIBRARY_PATH", dir + "/self:" + dir + "/copy:" + fakeDir}});
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("version 22707"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("is this RankLens library itself"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("is a RankLens library, not the real NCCL"), std::string::npos) << run.output;
}

TEST(RecordDiscovery, FindsTheWheelOfTheActiveVirtualEnvironment) {
  const std::string venv = trace_test::freshDir(TEST_TMP_DIR, "venv");
  const std::string lib = venv + "/lib/python3.11/site-packages/nvidia/nccl/lib";
  ASSERT_EQ(system(("mkdir -p " + lib + " && cp '" FAKE_REAL_NCCL "' " + lib + "/").c_str()), 0);
  ScenarioRun run = runScenario("discover", {{"RANKLENS_REAL_NCCL", "<unset>"},
                                             {"VIRTUAL_ENV", venv},
                                             {"NCCL_DEBUG", "INFO"},
                                             {"LD_LIBRARY_PATH", "<unset>"}});
  EXPECT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("version 22707"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("nvidia-nccl wheel in $VIRTUAL_ENV"), std::string::npos) << run.output;
}

// A second recording into a directory holding the rank's trace would be lost whole (the library never overwrites a
// trace): its communicators are refused with the reason, and the first recording is left as it was.
TEST(RecordWriter, ADirectoryHoldingTheRanksTraceRefusesCommunicators) {
  ScenarioRun first = runScenario("capture", {});
  ASSERT_EQ(first.status, 0) << first.output;
  const size_t calls = readTrace(first.traceDir).calls.size();
  const std::string root = first.traceDir.substr(0, first.traceDir.rfind('/'));
  ScenarioRun second = runScenario("unwritable-trace", {{"RANKLENS_TRACE_DIR", root}});
  ASSERT_EQ(second.status, 0) << second.output;
  EXPECT_NE(second.output.find("last error: record: RANKLENS_TRACE_DIR: " + first.traceDir + ": already holds a trace"),
            std::string::npos)
      << second.output;
  EXPECT_NE(second.output.find("no communicator is created"), std::string::npos) << second.output;
  EXPECT_EQ(readTrace(first.traceDir).calls.size(), calls);
}

TEST(RecordWriter, AStageBeforeTheFirstCommunicatorGetsRecordModesTrace) {
  ScenarioRun run = runScenario("stage-first", {{"RANKLENS_PAYLOADS", "all"}, {"FAKE_REAL_NCCL_SPIN_US", "0"}});
  ASSERT_EQ(run.status, 0) << run.output;
  Trace t = readTrace(run.traceDir);
  EXPECT_EQ(t.manifest.nccl_version, 22707);  // the real library's, set up before the stage record opened the trace
  EXPECT_NE(t.manifest.writer.find(FAKE_REAL_NCCL), std::string::npos) << t.manifest.writer;
  EXPECT_EQ(t.manifest.records_dropped, 0u);
  EXPECT_EQ(t.calls.size(), 24u);
  EXPECT_EQ(t.payloads.size(), 24u);
  ASSERT_EQ(t.stages.size(), 1u);
}

// `ranklens record`'s closing lines from a rank's counters: which of staging or the compression threads bound a
// full-payload recording, and what to change. Whether a host-device run finds staging full is timing-dependent, so
// the "job" here copies in a trace whose manifest carries the counters a GPU recording wrote (GPT-2 small DDP on one
// H200, every payload kept).
std::string recordReport(const std::string& tag, const std::map<std::string, uint64_t>& counters) {
  namespace rt = ranklens::trace;
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, "report-" + tag + "-" + std::to_string(getpid()));
  std::string error;
  {
    rt::Manifest manifest;
    manifest.mode = "record";
    std::unique_ptr<rt::TraceWriter> writer;
    error = rt::TraceWriter::create(dir + "/made/rank0", manifest, rt::WriterOptions{}, &writer).message();
    EXPECT_NE(writer, nullptr) << error;
    if (!writer || !writer->close().isOk()) return "no trace: " + error;
  }
  // The writer's close() sets the payload counters from its own pool: put the recording's in afterwards.
  std::unique_ptr<rt::TraceReader> reader;
  error = rt::TraceReader::open(dir + "/made/rank0", rt::Limits{}, &reader).message();
  EXPECT_NE(reader, nullptr) << error;
  if (!reader) return "unreadable: " + error;
  rt::Manifest manifest = reader->manifest();
  reader.reset();
  for (const auto& [name, value] : counters) manifest.counters[name] = value;
  manifest.payload_raw_bytes = 15'435'015'920;  // 30 steps of GPT-2 small DDP's gradients
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, manifest);
  FILE* file = fopen((dir + "/made/rank0/manifest.msgpack").c_str(), "wb");
  EXPECT_NE(file, nullptr);
  if (!file) return "manifest not written";
  fwrite(buffer.data(), 1, buffer.size(), file);
  fclose(file);
  trace_test::ChildRun run = trace_test::runWithEnv(
      {}, "'" RANKLENS_CLI "' record --real-nccl '" FAKE_REAL_NCCL "' --trace '" + dir + "/trace' -- sh -c 'mkdir -p " +
              dir + "/trace && cp -r " + dir + "/made/rank0 " + dir + "/trace/'");
  EXPECT_EQ(run.status, 0) << run.output;
  return run.output;
}

// The compression threads' counters: `busySeconds` of stage time among 8 threads that had payloads for 2 s.
std::map<std::string, uint64_t> threadCounters(double busySeconds) {
  const uint64_t ns = static_cast<uint64_t>(busySeconds * 1e9);
  return {{"payload_threads", 8},       {"payload_active_ns", 2'000'000'000}, {"payload_copy_ns", 0},
          {"payload_copy_cpu_ns", 0},   {"payload_compress_ns", ns * 4 / 5},  {"payload_compress_cpu_ns", ns * 4 / 5},
          {"payload_write_ns", ns / 5}, {"payload_write_cpu_ns", ns / 5}};
}

TEST(RecordCommand, NamesTheCompressionThreadsWhenTheyBoundTheRecording) {
  auto counters = threadCounters(14.4);  // 14.4 of 16 thread-seconds: 90% busy
  counters["payloads_skipped_staging_full"] = 9;
  const std::string out = recordReport("threads", counters);
  EXPECT_NE(out.find("payloads_skipped_staging_full 9"), std::string::npos) << out;
  EXPECT_NE(out.find("9 payloads did not fit in staging (pinned memory, staging_bytes): raise RANKLENS_STAGING_BYTES"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("the 8 compression threads were busy 90% of the time they had payloads (0.93 CPU-s per GB of "
                     "payload): they, not staging, bound a long recording; give them free cores "
                     "(RANKLENS_PAYLOAD_THREADS)"),
            std::string::npos)
      << out;
}

TEST(RecordCommand, NamesStagingWhenTheJobWaitedAndTheThreadsHadRoom) {
  auto counters = threadCounters(7.6);  // 48% busy: something before them held the payloads
  counters["staging_wait_ns"] = 2'410'042'769;
  const std::string out = recordReport("staging", counters);
  EXPECT_NE(out.find("waited 2410.0 ms for staging"), std::string::npos) << out;
  EXPECT_NE(out.find("the job waited for room in staging to keep every payload: a larger RANKLENS_STAGING_BYTES"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("compression threads were busy"), std::string::npos) << out;
}

TEST(RecordCommand, SaysNothingOfBoundsWhenTheJobNeitherWaitedNorSkipped) {
  const std::string out = recordReport("quiet", threadCounters(15.0));  // busy, but the job kept its pace
  EXPECT_NE(out.find("Recorded 1 rank(s)"), std::string::npos) << out;
  EXPECT_EQ(out.find("compression threads were busy"), std::string::npos) << out;
  EXPECT_EQ(out.find("staging"), std::string::npos) << out;
}

}  // namespace

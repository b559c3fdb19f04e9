// SPDX-License-Identifier: Apache-2.0
// `ranklens compare` and `ranklens timeline` end to end, on small traces written with TraceWriter: a recorded rank
// and replays of it that are identical, have one changed count, have one extra call, or create an unrelated
// communicator first; checks the JSON numbers, the text report, exit codes and the timeline's events.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "ranklens/events.h"
#include "ranklens/trace.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ranklens::events::Call;
using ranklens::events::CommInit;
using ranklens::events::Op;
using ranklens::events::Stage;
using namespace ranklens::trace;

constexpr int kSteps = 10;
constexpr int64_t kStepNs = 10'000'000;
constexpr uint64_t kAllReduceCount = 1 << 20;  // float32: 4 MiB, a "training tensor"
constexpr uint64_t kStreamWorld = 0x1000, kStreamP2p = 0x2000, kStreamSplit = 0x3000;
// Relative step-time error of the replay per step; steps 0-4 are the warm-up (skipped by default), so their +100%
// must not show. Steps 5-9: signed median +5%, absolute median 10%.
const double kStepErrors[kSteps + 1] = {1.0, 1.0, 1.0, 1.0, 1.0, 0.1, -0.2, 0.05, 0.3, -0.1, 0.0};

struct TraceSpec {
  std::string mode = "record";
  int64_t baseNs = 1'000'000'000'000;
  bool withStepErrors = false;
  std::optional<uint64_t> changedAllReduceSeq;  // that AllReduce on the world communicator gets half the count
  bool extraCall = false;                       // one more AllReduce after the last step
  int steps = kSteps;
  const char* stepMarker = "step";                     // "optimizer": as the Python adapter marks steps
  bool unrelatedCommFirst = false;                     // communicator ids shift by one
  int64_t allReduceNs = 1'000'000;                     // Timing.durationNs of every AllReduce
  int allGatherClock = ranklens::trace::kClockEvents;  // kClockEstimated: a replay held the estimator's duration
  std::string cpuModel, gpuName;                       // the manifest's machine (format 1.7); "" / 0: unknown
  int cpus = 0;
};

// Rank 1 of 2. Per step k: world AllReduce (seq 2k, 4 MiB) and AllGather (seq 2k+1, 1 KiB), a group of Send and
// Recv with peer 0 (seq k, 16 KiB each), a Broadcast on a 1-rank split (seq k, 128 KiB); a Timing per collective
// and one for the group; "step" markers 0..kSteps.
void writeTrace(const std::string& rankDir, const TraceSpec& spec) {
  Manifest manifest;
  manifest.rank = 1;
  manifest.world_size = 2;
  manifest.mode = spec.mode;
  manifest.cpu_model = spec.cpuModel;
  manifest.cpus = spec.cpus;
  manifest.gpu_name = spec.gpuName;
  std::string error;
  std::unique_ptr<TraceWriter> writer;
  error = TraceWriter::create(rankDir, manifest, WriterOptions{}, &writer).message();
  ASSERT_TRUE(writer) << error;
  int64_t now = spec.baseNs;
  auto comm = [&](uint64_t id, int nranks, int rank, int64_t parent, const char* how) {
    CommInit c;
    c.commId = id;
    c.nranks = nranks;
    c.rank = rank;
    c.parentId = parent;
    c.how = how;
    c.timeNs = now++;
    ASSERT_TRUE(writer->append(RecordType::kCommInit, c));
  };
  const uint64_t shift = spec.unrelatedCommFirst ? 1 : 0;
  if (spec.unrelatedCommFirst) comm(0, 4, 2, -1, "init");
  const uint64_t world = shift, split = shift + 1;
  comm(world, 2, 1, -1, "init");
  comm(split, 1, 0, static_cast<int64_t>(world), "split");

  auto call = [&](uint64_t commId, uint64_t seq, Op op, int datatype, uint64_t count, int root, int64_t at,
                  uint64_t stream, uint64_t group, int nranks) {
    Call c;
    c.commId = commId;
    c.seq = seq;
    c.op = static_cast<int>(op);
    c.datatype = datatype;
    c.count = count;
    c.rootOrPeer = root;
    c.redop = op == Op::kAllReduce ? 0 : -1;
    c.stream = stream;
    c.groupId = group;
    c.nranks = nranks;
    c.rank = nranks == 1 ? 0 : 1;
    c.bytes = ranklens::events::receivedBytes(op, count, datatype, nranks, c.rank, root);
    c.timeNs = at;
    if (op == Op::kAllReduce) c.hostNs = static_cast<int64_t>(seq / 2 + 1) * 1000;  // step k: (k + 1) us
    ASSERT_TRUE(writer->append(RecordType::kCall, c));
  };
  auto timing = [&](uint64_t commId, uint64_t seq, Op op, uint64_t stream, uint64_t group, int64_t at, int64_t duration,
                    int peer, int clock = ranklens::trace::kClockEvents) {
    Timing t;
    t.commId = commId;
    t.seq = seq;
    t.op = static_cast<int>(op);
    t.stream = stream;
    t.groupId = group;
    t.startNs = at;
    t.durationNs = duration;
    t.peer = peer;
    t.clock = clock;
    ASSERT_TRUE(writer->append(RecordType::kTiming, t));
  };
  auto stage = [&](int64_t step, int64_t at) {
    ASSERT_TRUE(writer->append(RecordType::kStage, Stage{spec.stepMarker, step, at}));
    if (std::string(spec.stepMarker) == "optimizer") {  // the adapter's RANKLENS_ADAPTER_MARKS=all: never a step
      ASSERT_TRUE(writer->append(RecordType::kStage, Stage{"forward", step, at + 10}));
    }
  };

  int64_t stepStart = now + 1000;
  for (int k = 0; k < spec.steps; ++k) {
    stage(k, stepStart);
    const uint64_t arSeq = 2 * k;
    const uint64_t arCount = spec.changedAllReduceSeq == arSeq ? kAllReduceCount / 2 : kAllReduceCount;
    call(world, arSeq, Op::kAllReduce, 7, arCount, -1, stepStart + 100'000, kStreamWorld, 0, 2);
    timing(world, arSeq, Op::kAllReduce, kStreamWorld, 0, stepStart + 100'000, spec.allReduceNs, -1);
    call(world, arSeq + 1, Op::kAllGather, 9, 256, -1, stepStart + 200'000, kStreamWorld, 0, 2);
    timing(world, arSeq + 1, Op::kAllGather, kStreamWorld, 0, stepStart + 200'000, 100'000, -1, spec.allGatherClock);
    const uint64_t group = k + 1;
    call(world, k, Op::kSend, 7, 4096, 0, stepStart + 300'000, kStreamP2p, group, 2);
    call(world, k, Op::kRecv, 7, 4096, 0, stepStart + 300'001, kStreamP2p, group, 2);
    ASSERT_TRUE(
        writer->append(RecordType::kGroupEnd, ranklens::events::GroupEnd{group, 2, 0, stepStart + 300'002, 20'000}));
    timing(world, k, Op::kSend, kStreamP2p, group, stepStart + 300'000, 200'000, 0);
    call(split, k, Op::kBroadcast, 2, 32768, 0, stepStart + 400'000, kStreamSplit, 0, 1);
    timing(split, k, Op::kBroadcast, kStreamSplit, 0, stepStart + 400'000, 50'000, -1);
    const double error = spec.withStepErrors ? kStepErrors[k] : 0.0;
    stepStart += static_cast<int64_t>(std::llround(kStepNs * (1.0 + error)));
  }
  stage(spec.steps, stepStart);
  if (spec.extraCall)
    call(world, 2 * spec.steps, Op::kAllReduce, 7, kAllReduceCount, -1, stepStart + 1000, kStreamWorld, 0, 2);
  ASSERT_TRUE(writer->close().isOk()) << writer->lastError();
}

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `program args...` with stdout and stderr captured.
Result runProgram(const std::string& program, const std::vector<std::string>& args) {
  static int counter = 0;
  const std::string base =
      (fs::temp_directory_path() / ("ranklens-cmp-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
          .string();
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, (base + ".out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, (base + ".err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argvStrings = {program};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argvStrings) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Result result;
  pid_t pid = 0;
  if (posix_spawnp(&pid, program.c_str(), &actions, nullptr, argv.data(), environ) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    result.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  result.out = slurp(base + ".out");
  result.err = slurp(base + ".err");
  fs::remove(base + ".out");
  fs::remove(base + ".err");
  return result;
}

Result ranklens(const std::vector<std::string>& args) { return runProgram(RANKLENS_BIN, args); }

json parseJson(const std::string& text) {
  try {
    return json::parse(text);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "):\n" << text;
    return json();
  }
}

class CompareTimeline : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ranklens-compare-XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    root_ = pattern;
    TraceSpec replay;
    replay.mode = "replay";
    replay.baseNs = 7'000'000'000'000;  // another process's clock: nothing may depend on absolute times
    replay.withStepErrors = true;
    replay.allReduceNs = 1'200'000;
    writeTrace(path("recorded/rank1"), TraceSpec{});
    writeTrace(path("identical/rank1"), replay);
    TraceSpec changed = replay;
    changed.changedAllReduceSeq = 6;
    writeTrace(path("changed/rank1"), changed);
    TraceSpec extra = replay;
    extra.extraCall = true;
    writeTrace(path("extra/rank1"), extra);
    TraceSpec longer = replay;
    longer.steps = kSteps + 1;
    writeTrace(path("longer/rank1"), longer);
    TraceSpec estimated = replay;
    estimated.allGatherClock = ranklens::trace::kClockEstimated;
    writeTrace(path("estimated/rank1"), estimated);
    TraceSpec shifted = replay;
    shifted.unrelatedCommFirst = true;
    writeTrace(path("shifted/rank1"), shifted);
    TraceSpec optimizerMarks;
    optimizerMarks.stepMarker = "optimizer";
    writeTrace(path("optimizer-recorded/rank1"), optimizerMarks);
    optimizerMarks = replay;
    optimizerMarks.stepMarker = "optimizer";
    writeTrace(path("optimizer-replayed/rank1"), optimizerMarks);
    writeTrace(path("two/rank0"), TraceSpec{});
    writeTrace(path("two/rank1"), TraceSpec{});
    TraceSpec machine;
    machine.cpuModel = "Test CPU 9000";
    machine.cpus = 32;
    machine.gpuName = "NVIDIA H200";
    writeTrace(path("machine-recorded/rank1"), machine);
    TraceSpec sameMachine = replay;
    sameMachine.cpuModel = machine.cpuModel;
    sameMachine.cpus = machine.cpus;
    sameMachine.gpuName = machine.gpuName;
    writeTrace(path("machine-same/rank1"), sameMachine);
    TraceSpec otherMachine = sameMachine;
    otherMachine.cpus = 16;
    otherMachine.cpuModel = "Test CPU 7000";
    writeTrace(path("machine-other/rank1"), otherMachine);
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static std::string path(const std::string& relative) { return root_ + "/" + relative; }

  // `ranklens compare recorded/rank1 <replayed> --json -` and its document.
  static json compareJson(const std::string& replayed, int expectedRc, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"compare", path("recorded/rank1"), path(replayed), "--json", "-"};
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = ranklens(args);
    EXPECT_EQ(r.rc, expectedRc) << r.err;
    return parseJson(r.out);
  }
  static std::string root_;
};
std::string CompareTimeline::root_;

// ------------------------------------------------------------------------------------------------------ compare

TEST_F(CompareTimeline, IdenticalCallsMatchAndStepErrorsSkipWarmup) {
  const json doc = compareJson("identical/rank1", 0);
  EXPECT_EQ(doc["format_version"], "1.4");
  EXPECT_EQ(doc["match"], true);
  EXPECT_EQ(doc["estimated"]["count"], 0);
  EXPECT_EQ(doc["recorded"]["mode"], "record");
  EXPECT_EQ(doc["replayed"]["mode"], "replay");
  const json& raw = doc["signatures"]["raw"];
  EXPECT_EQ(raw["recorded_calls"], 5 * kSteps);
  EXPECT_EQ(raw["replayed_calls"], 5 * kSteps);
  EXPECT_EQ(raw["matched_calls"], 5 * kSteps);
  EXPECT_DOUBLE_EQ(raw["match_percent"].get<double>(), 100.0);
  const json& training = doc["signatures"]["training"];  // AllReduce (4 MiB) and Broadcast (128 KiB) only
  EXPECT_EQ(training["recorded_calls"], 2 * kSteps);
  EXPECT_EQ(training["above_bytes"], 65536);
  EXPECT_TRUE(doc["first_divergence"].is_null());
  EXPECT_EQ(doc["communicators"]["matched"].size(), 2u);

  const json& steps = doc["steps"];
  EXPECT_EQ(steps["recorded_markers"], kSteps + 1);
  EXPECT_EQ(steps["first_compared_step"], 5);
  EXPECT_EQ(steps["compared"], 5);
  EXPECT_NEAR(steps["median_relative_error"].get<double>(), 0.05, 1e-9);
  EXPECT_NEAR(steps["median_abs_relative_error"].get<double>(), 0.1, 1e-9);
  EXPECT_NEAR(steps["median_recorded_ns"].get<double>(), kStepNs, 1e-3);
  EXPECT_NEAR(steps["median_replayed_ns"].get<double>(), kStepNs * 1.05, 1e-3);

  bool sawAllReduce = false;
  for (const auto& op : doc["timing"]) {
    if (op["op"] != "AllReduce") continue;
    sawAllReduce = true;
    EXPECT_EQ(op["recorded_ns"], kSteps * 1'000'000);
    EXPECT_EQ(op["replayed_ns"], kSteps * 1'200'000);
    EXPECT_EQ(op["recorded_records"], kSteps);
  }
  EXPECT_TRUE(sawAllReduce) << doc["timing"].dump();

  // Host time as recorded: AllReduce 1..10 us (outside groups), each Send/Recv group 20 us; the others unknown.
  ASSERT_EQ(doc["recorded_host_time"].size(), 2u) << doc["recorded_host_time"].dump();
  const json& allReduce = doc["recorded_host_time"][0];
  EXPECT_EQ(allReduce["what"], "AllReduce");
  EXPECT_EQ(allReduce["calls"], kSteps);
  EXPECT_EQ(allReduce["sum_ns"], 55'000);
  EXPECT_EQ(allReduce["median_ns"], 6'000);
  EXPECT_EQ(allReduce["p90_ns"], 10'000);
  EXPECT_EQ(allReduce["max_ns"], 10'000);
  // host_time: own: twice the 10th percentile (2 us of 1..10 us) caps the rest: 1 + 2 + 3 + 4 + 6 x 4 us.
  EXPECT_EQ(allReduce["own_cap_ns"], 4'000);
  EXPECT_EQ(allReduce["own_sum_ns"], 34'000);
  const json& group = doc["recorded_host_time"][1];
  EXPECT_EQ(group["what"], "Group");
  EXPECT_EQ(group["calls"], kSteps);
  EXPECT_EQ(group["sum_ns"], kSteps * 20'000);
  EXPECT_EQ(group["own_sum_ns"], kSteps * 20'000);  // all alike: none above the cap
}

TEST_F(CompareTimeline, WarmupStepsOption) {
  const json doc = compareJson("identical/rank1", 0, {"--warmup-steps", "0"});
  EXPECT_EQ(doc["steps"]["compared"], kSteps);
  EXPECT_EQ(doc["steps"]["per_step"][0]["step"], 0);
  EXPECT_NEAR(doc["steps"]["per_step"][0]["relative_error"].get<double>(), 1.0, 1e-9);
}

TEST_F(CompareTimeline, AdapterOptimizerMarkersTimeStepsWhenNoStepMarkers) {
  const Result r =
      ranklens({"compare", path("optimizer-recorded/rank1"), path("optimizer-replayed/rank1"), "--json", "-"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json steps = parseJson(r.out)["steps"];
  EXPECT_EQ(steps["marker"], "optimizer");
  EXPECT_EQ(steps["compared"], 5);
  EXPECT_NEAR(steps["median_relative_error"].get<double>(), 0.05, 1e-9);
  // "step" markers on one side, "optimizer" on the other: two programs' marks, not compared.
  const json mixed = compareJson("optimizer-replayed/rank1", 0)["steps"];
  EXPECT_EQ(mixed["compared"], 0);
  EXPECT_EQ(mixed["replayed_marker"], "optimizer");
  const Result text = ranklens({"compare", path("recorded/rank1"), path("optimizer-replayed/rank1")});
  EXPECT_NE(text.out.find("not compared: the recorded trace marks steps with \"step\""), std::string::npos) << text.out;
}

TEST_F(CompareTimeline, ChangedCountIsTheFirstDivergence) {
  const json doc = compareJson("changed/rank1", 1);
  EXPECT_EQ(doc["match"], false);
  EXPECT_EQ(doc["signatures"]["raw"]["matched_calls"], 5 * kSteps - 1);
  EXPECT_NEAR(doc["signatures"]["raw"]["match_percent"].get<double>(), 98.0, 1e-9);
  EXPECT_NEAR(doc["signatures"]["training"]["match_percent"].get<double>(), 95.0, 1e-9);
  const json& d = doc["first_divergence"];
  ASSERT_FALSE(d.is_null());
  EXPECT_EQ(d["recorded_comm"], 0);
  EXPECT_EQ(d["sequence"], "collective");
  EXPECT_EQ(d["position"], 6);
  EXPECT_EQ(d["recorded"]["seq"], 6);
  EXPECT_EQ(d["recorded"]["op"], "AllReduce");
  EXPECT_EQ(d["recorded"]["count"], kAllReduceCount);
  EXPECT_EQ(d["replayed"]["count"], kAllReduceCount / 2);
  EXPECT_EQ(doc["divergent_sequences"], 1);
}

TEST_F(CompareTimeline, ExtraCallDivergesWhereTheRecordingEnds) {
  const json doc = compareJson("extra/rank1", 1);
  EXPECT_EQ(doc["signatures"]["raw"]["recorded_calls"], 5 * kSteps);
  EXPECT_EQ(doc["signatures"]["raw"]["replayed_calls"], 5 * kSteps + 1);
  EXPECT_NEAR(doc["signatures"]["raw"]["match_percent"].get<double>(), 100.0 * 50 / 51, 1e-9);
  const json& d = doc["first_divergence"];
  ASSERT_FALSE(d.is_null());
  EXPECT_EQ(d["position"], 2 * kSteps);
  EXPECT_TRUE(d["recorded"].is_null());
  EXPECT_EQ(d["replayed"]["seq"], 2 * kSteps);
}

// Five sequences run past the recording's end; the first divergence is the extra step's first call.
TEST_F(CompareTimeline, ExtraStepDivergesAtItsFirstCall) {
  const json doc = compareJson("longer/rank1", 1);
  EXPECT_EQ(doc["signatures"]["raw"]["replayed_calls"], 5 * (kSteps + 1));
  EXPECT_EQ(doc["divergent_sequences"], 4);  // world collectives, Send to 0, Recv from 0, split Broadcast
  const json& d = doc["first_divergence"];
  ASSERT_FALSE(d.is_null());
  EXPECT_EQ(d["replayed"]["op"], "AllReduce");
  EXPECT_EQ(d["replayed"]["seq"], 2 * kSteps);
  EXPECT_EQ(doc["steps"]["compared"], 5);  // step 10 is only in the replay
}

TEST_F(CompareTimeline, CommunicatorsMatchByIdentityNotId) {
  const json doc = compareJson("shifted/rank1", 0);
  const json& comms = doc["communicators"];
  ASSERT_EQ(comms["matched"].size(), 2u);
  EXPECT_EQ(comms["matched"][0]["recorded"], 0);
  EXPECT_EQ(comms["matched"][0]["replayed"], 1);
  EXPECT_EQ(comms["matched"][1]["replayed"], 2);
  ASSERT_EQ(comms["only_replayed"].size(), 1u);
  EXPECT_EQ(comms["only_replayed"][0]["nranks"], 4);
  EXPECT_DOUBLE_EQ(doc["signatures"]["raw"]["match_percent"].get<double>(), 100.0);
}

TEST_F(CompareTimeline, TextReportAndJsonFile) {
  const std::string jsonPath = path("changed.json");
  const Result r = ranklens({"compare", path("recorded/rank1"), path("changed/rank1"), "--json", jsonPath});
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.out.find("98.00%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("first divergence: comm #0 (replayed #0), collective call 6"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("count 524288"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("result: differ"), std::string::npos) << r.out;
  EXPECT_EQ(parseJson(slurp(jsonPath))["first_divergence"]["position"], 6);

  const Result same = ranklens({"compare", path("recorded/rank1"), path("identical/rank1")});
  EXPECT_EQ(same.rc, 0) << same.err;
  EXPECT_NE(same.out.find("first divergence: none"), std::string::npos) << same.out;
  EXPECT_NE(same.out.find("5 compared (from step 5"), std::string::npos) << same.out;
  const Result quiet = ranklens({"compare", path("recorded/rank1"), path("extra/rank1"), "--quiet"});
  EXPECT_EQ(quiet.rc, 1);
  EXPECT_EQ(quiet.out, "");
}

// A replay on another kind of machine (processor, CPU count or GPU, manifest format 1.7) is named beside the step
// times: a host-bound step runs at its machine's speed.
TEST_F(CompareTimeline, AReplayOnAnotherMachineIsNamedBesideTheStepTimes) {
  const Result other = ranklens({"compare", path("machine-recorded/rank1"), path("machine-other/rank1")});
  EXPECT_EQ(other.rc, 0) << other.err;
  EXPECT_NE(other.out.find("not comparable, so this error is no measure of the replay's timing fidelity:"),
            std::string::npos)
      << other.out;
  EXPECT_NE(other.out.find("the hosts differ (Test CPU 9000 against Test CPU 7000), and a host-bound step runs at "
                           "its machine's speed"),
            std::string::npos)
      << other.out;
  const Result otherJson =
      ranklens({"compare", path("machine-recorded/rank1"), path("machine-other/rank1"), "--json", "-"});
  const json doc = parseJson(otherJson.out);
  EXPECT_EQ(doc["machines_differ"], "CPU Test CPU 9000 against Test CPU 7000; CPUs 32 against 16");
  EXPECT_EQ(doc["recorded"]["cpus"], 32);
  EXPECT_EQ(doc["replayed"]["cpu_model"], "Test CPU 7000");
  EXPECT_EQ(doc["step_time_comparable"]["comparable"], false);
  bool otherHost = false;
  for (const auto& why : doc["step_time_comparable"]["reasons"]) otherHost = otherHost || why["brief"] == "other host";
  EXPECT_TRUE(otherHost) << doc["step_time_comparable"].dump();
  // The same GPU model and host: the error is judged.
  const Result same = ranklens({"compare", path("machine-recorded/rank1"), path("machine-same/rank1")});
  EXPECT_NE(same.out.find("comparable: the same GPU model (NVIDIA H200) and host, so this error measures the "
                          "replay's timing fidelity"),
            std::string::npos)
      << same.out;
  EXPECT_EQ(parseJson(ranklens({"compare", path("machine-recorded/rank1"), path("machine-same/rank1"), "--json", "-"})
                          .out)["step_time_comparable"]["comparable"],
            true);
  for (const char* replayed : {"machine-same/rank1", "identical/rank1"}) {  // the same machine; unknown (format 1.6)
    const Result same = ranklens({"compare", path("machine-recorded/rank1"), path(replayed)});
    EXPECT_EQ(same.out.find("the hosts differ"), std::string::npos) << replayed << "\n" << same.out;
  }
}

// Timing.clock kClockEstimated (a replay with timing: estimated or on_mismatch: estimate): the report lists those
// calls, the timeline marks their slices.
TEST_F(CompareTimeline, EstimatedDurationsAreListed) {
  const json doc = compareJson("estimated/rank1", 0);
  const json& e = doc["estimated"];
  EXPECT_EQ(e["count"], kSteps);
  EXPECT_EQ(e["replayed_timings"], 4 * kSteps);
  EXPECT_EQ(e["per_op"], json({{"AllGather", kSteps}}));
  ASSERT_EQ(e["calls"].size(), static_cast<size_t>(kSteps));
  EXPECT_EQ(e["calls"][1],
            json({{"comm", 0}, {"seq", 3}, {"op", "AllGather"}, {"peer", -1}, {"group", 0}, {"duration_ns", 100'000}}));
  const Result text = ranklens({"compare", path("recorded/rank1"), path("estimated/rank1")});
  EXPECT_NE(text.out.find("estimated durations: 10 of 40 replayed Timing records (no recorded duration: the "
                          "estimator's; AllGather 10)"),
            std::string::npos)
      << text.out;
  EXPECT_NE(text.out.find("replayed comm #0  seq 1"), std::string::npos) << text.out;
  const Result plain = ranklens({"compare", path("recorded/rank1"), path("identical/rank1")});
  EXPECT_EQ(plain.out.find("estimated durations"), std::string::npos) << plain.out;

  const std::string out = path("timeline-estimated.json");
  ASSERT_EQ(ranklens({"timeline", path("estimated/rank1"), "-o", out}).rc, 0);
  size_t marked = 0, slices = 0;
  const json timeline = parseJson(slurp(out));
  for (const auto& event : timeline["traceEvents"]) {
    if (event["ph"] != "X") continue;
    ++slices;
    const bool isEstimated = event["args"].value("estimated", false);
    EXPECT_EQ(isEstimated, event["name"] == "AllGather") << event.dump();
    marked += isEstimated;
  }
  EXPECT_EQ(marked, static_cast<size_t>(kSteps));
  EXPECT_EQ(slices, 4u * kSteps);
}

TEST_F(CompareTimeline, TraceRootsAndRankSelection) {
  // A root with one rank is that rank; with two, --rank picks one.
  EXPECT_EQ(ranklens({"compare", path("recorded"), path("identical"), "-q"}).rc, 0);
  const Result ambiguous = ranklens({"compare", path("two"), path("identical"), "-q"});
  EXPECT_EQ(ambiguous.rc, 2);
  EXPECT_NE(ambiguous.err.find("--rank"), std::string::npos) << ambiguous.err;
  EXPECT_EQ(ranklens({"compare", path("two"), path("identical"), "--rank", "1", "-q"}).rc, 0);
  const Result missing = ranklens({"compare", path("two"), path("identical"), "--rank", "5", "-q"});
  EXPECT_EQ(missing.rc, 2);
  EXPECT_NE(missing.err.find("no recording of rank 5 (recorded: rank0, rank1)"), std::string::npos) << missing.err;
}

TEST_F(CompareTimeline, UnreadableTraceAndBadUsageExitTwo) {
  const Result absent = ranklens({"compare", path("recorded/rank1"), path("nowhere")});
  EXPECT_EQ(absent.rc, 2);
  EXPECT_NE(absent.err.find(path("nowhere")), std::string::npos) << absent.err;
  fs::create_directories(path("broken/rank1"));
  std::ofstream(path("broken/rank1/manifest.msgpack")) << "not msgpack";
  const Result broken = ranklens({"compare", path("broken/rank1"), path("identical/rank1")});
  EXPECT_EQ(broken.rc, 2);
  EXPECT_NE(broken.err.find("manifest.msgpack"), std::string::npos) << broken.err;
  EXPECT_EQ(ranklens({"compare", path("recorded/rank1")}).rc, 2);
  EXPECT_EQ(ranklens({"compare", path("recorded/rank1"), path("identical/rank1"), "--warmup-steps", "x"}).rc, 2);
}

TEST_F(CompareTimeline, HelpExplainsEveryOption) {
  for (const char* command : {"compare", "timeline"}) {
    const Result r = ranklens({command, "--help"});
    EXPECT_EQ(r.rc, 0);
    EXPECT_NE(r.out.find("Examples:"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("Exit codes"), std::string::npos) << r.out;
  }
  const Result r = ranklens({"compare", "--help"});
  for (const char* option : {"--rank", "--warmup-steps", "--small-bytes", "--json", "--quiet"})
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  const Result t = ranklens({"timeline", "--help"});
  for (const char* option : {"--output", "--from-step", "--to-step"})
    EXPECT_NE(t.out.find(option), std::string::npos) << option;
}

// ------------------------------------------------------------------------------------------------------ timeline

size_t countPhase(const json& doc, int pid, const std::string& phase) {
  size_t n = 0;
  for (const auto& event : doc["traceEvents"]) n += event["pid"] == pid && event["ph"] == phase;
  return n;
}

TEST_F(CompareTimeline, TimelineHasAProcessPerTraceAndASlicePerTiming) {
  const std::string out = path("timeline.json");
  const Result r = ranklens({"timeline", path("recorded/rank1"), path("identical/rank1"), "-o", out});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = parseJson(slurp(out));
  EXPECT_EQ(doc["otherData"]["format"], "ranklens-timeline");
  // Per trace: 4 Timing records and 1 marker per step, the end marker, 3 streams.
  const size_t perTrace = 3 + 2 * 3 + 4 * kSteps + (kSteps + 1);
  EXPECT_EQ(doc["traceEvents"].size(), 2 * perTrace);
  std::map<int, std::string> processNames;
  std::set<std::string> threadNames;
  for (const auto& event : doc["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "process_name") processNames[event["pid"]] = event["args"]["name"];
    if (event["ph"] == "M" && event["name"] == "thread_name") threadNames.insert(event["args"]["name"]);
    if (event["ph"] == "X" || event["ph"] == "i") {
      EXPECT_GE(event["ts"].get<double>(), 0.0) << event.dump();
    }
    if (event["ph"] == "X" && event["name"] == "AllReduce" && event["pid"] == 1) {
      EXPECT_EQ(event["args"]["bytes"], kAllReduceCount * 4);
      EXPECT_EQ(event["dur"].get<double>(), 1000.0);  // 1 ms in µs
    }
    if (event["ph"] == "X" && event["name"] == "Send") {
      EXPECT_EQ(event["args"]["peer"], 0);
      EXPECT_EQ(event["args"]["bytes"], 4096 * 4);
    }
  }
  EXPECT_EQ(processNames[1], "record rank1");
  EXPECT_EQ(processNames[2], "replay rank1");
  EXPECT_TRUE(threadNames.count("stream 0x1000") && threadNames.count("stream 0x2000") &&
              threadNames.count("stream 0x3000"));
  EXPECT_EQ(countPhase(doc, 1, "X"), 4u * kSteps);
  EXPECT_EQ(countPhase(doc, 2, "i"), kSteps + 1u);

  // An independent parser agrees (the file is what Perfetto and chrome://tracing load).
  const Result py =
      runProgram("python3", {"-c", "import json, sys; print(len(json.load(open(sys.argv[1]))['traceEvents']))", out});
  if (py.rc == 127 || py.rc == -1) GTEST_SKIP() << "python3 not available";
  EXPECT_EQ(py.rc, 0) << py.err;
  EXPECT_EQ(py.out, std::to_string(2 * perTrace) + "\n");
}

TEST_F(CompareTimeline, OneRanksTimelineSaysItsRankForHolisticTraceAnalysis) {
  const Result one = ranklens({"timeline", path("recorded/rank1"), "-o", "-"});
  ASSERT_EQ(one.rc, 0) << one.err;
  const json doc = parseJson(one.out);
  ASSERT_TRUE(doc.contains("distributedInfo")) << one.out.substr(0, 300);
  EXPECT_EQ(doc["distributedInfo"]["rank"], 1);
  EXPECT_EQ(doc["distributedInfo"]["backend"], "nccl");
  EXPECT_GE(doc["distributedInfo"]["world_size"].get<int>(), 2);
  // Several ranks' traces in one file: HTA takes one rank per file, so none is claimed.
  const Result two = ranklens({"timeline", path("recorded/rank1"), path("identical/rank1"), "-o", "-"});
  ASSERT_EQ(two.rc, 0) << two.err;
  EXPECT_FALSE(parseJson(two.out).contains("distributedInfo"));
}

TEST_F(CompareTimeline, TimelineStepWindowAlignsTracesAtTheFirstStep) {
  const Result r = ranklens(
      {"timeline", path("recorded"), path("identical/rank1"), "-o", "-", "--from-step", "2", "--to-step", "4"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = parseJson(r.out);
  for (int pid : {1, 2}) {
    EXPECT_EQ(countPhase(doc, pid, "X"), 4u * 3) << pid;  // steps 2, 3, 4
    EXPECT_EQ(countPhase(doc, pid, "i"), 4u) << pid;      // markers 2..5 (5 ends step 4)
    double first = 1e300;
    for (const auto& event : doc["traceEvents"])
      if (event["pid"] == pid && event["ph"] == "i") first = std::min(first, event["ts"].get<double>());
    EXPECT_EQ(first, 0.0) << pid;
  }
  const Result unmarked = ranklens({"timeline", path("recorded"), "-o", "-", "--from-step", "50"});
  EXPECT_EQ(unmarked.rc, 1);
  EXPECT_NE(unmarked.err.find("step 50"), std::string::npos) << unmarked.err;
  EXPECT_EQ(ranklens({"timeline", path("nowhere"), "-o", "-"}).rc, 2);
  EXPECT_EQ(ranklens({"timeline", path("recorded"), "-o", "-", "--from-step", "4", "--to-step", "2"}).rc, 2);
}

}  // namespace

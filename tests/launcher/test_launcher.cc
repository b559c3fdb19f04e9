// SPDX-License-Identifier: Apache-2.0
// The launcher's multi-rank commands without a GPU: `ranklens run|record --share-gpu` (what each process of the job
// gets: share_gpu_probe prints it), the shared-GPU manifest flag and the timing replay's warning (record_scenario
// forwarding to the test suite's fake real NCCL), and `ranklens replay --ranks` (every rank of the shipped 2-rank
// trace replayed on the host device, the Slurm script, the report).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ranklens/trace.h"
#include "trace_test_support.h"

namespace {

using trace_test::runWithEnv;

struct ProbeLine {
  std::string who, pid, hostId, localRank, original, device;
};

std::vector<ProbeLine> probeLines(const std::string& output) {
  std::vector<ProbeLine> lines;
  const std::regex line(R"((parent|child) pid=(\d+) hostid=(\S+) lr=(\S+) orig=(\S+) dev=(\S+))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line); it != std::sregex_iterator(); ++it)
    lines.push_back({(*it)[1], (*it)[2], (*it)[3], (*it)[4], (*it)[5], (*it)[6]});
  return lines;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The placement library alone, as `ranklens --share-gpu` sets it up for `gpus` GPUs, around `command`.
trace_test::ChildRun placed(int gpus, const std::map<std::string, std::string>& extra, const std::string& command) {
  std::map<std::string, std::string> env = {{"LD_PRELOAD", SHARE_GPU_LIB},
                                            {"RANKLENS_SHARE_GPU", std::to_string(gpus)},
                                            {"RANKLENS_SHARE_GPU_VISIBLE", "(unset)"},
                                            {"CUDA_VISIBLE_DEVICES", "<unset>"},
                                            {"NCCL_HOSTID", "<unset>"},
                                            {"LOCAL_RANK", "<unset>"},
                                            {"RANKLENS_SHARE_GPU_LOCAL_RANK", "<unset>"}};
  for (const auto& [k, v] : extra) env[k] = v;
  return runWithEnv(env, command);
}

TEST(ShareGpu, EveryProcessAndForkedChildGetsItsOwnHostId) {
  const auto run =
      runWithEnv({{"NCCL_HOSTID", "<unset>"}, {"CUDA_VISIBLE_DEVICES", "<unset>"}},
                 "'" RANKLENS_CLI "' run --share-gpu -- sh -c 'LOCAL_RANK=0 " PROBE "; LOCAL_RANK=1 " PROBE "'");
  ASSERT_EQ(run.status, 0) << run.output;
  const auto lines = probeLines(run.output);
  ASSERT_EQ(lines.size(), 4u) << run.output;  // two ranks, each with a forked child
  std::set<std::string> ids;
  for (const ProbeLine& l : lines) {
    EXPECT_EQ(l.hostId.rfind("ranklens-share-gpu-", 0), 0u) << l.hostId;
    EXPECT_NE(l.hostId.find(std::to_string(std::stoi(l.pid))), std::string::npos) << l.hostId << " pid " << l.pid;
    ids.insert(l.hostId);
    EXPECT_EQ(l.localRank, "0");  // whatever the GPU count here, one GPU or none: every rank on GPU 0
  }
  EXPECT_EQ(ids.size(), 4u) << run.output;
  EXPECT_EQ(lines[0].original, "0");
  EXPECT_EQ(lines[2].original, "1");
  EXPECT_NE(run.output.find("NCCL connects them over sockets on lo"), std::string::npos) << run.output;
}

TEST(ShareGpu, LocalRanksSpreadOverTheGpusAndMpiRanksGetTheirDevice) {
  auto run = placed(2, {{"LOCAL_RANK", "3"}}, PROBE);
  auto lines = probeLines(run.output);
  ASSERT_EQ(lines.size(), 2u) << run.output;
  EXPECT_EQ(lines[0].localRank, "1");
  EXPECT_EQ(lines[0].original, "3");
  EXPECT_EQ(lines[0].device, "-");
  // A rank's wrapper (a shell) placed it already: the program it runs keeps that placement.
  run = placed(2, {{"LOCAL_RANK", "3"}}, "sh -c " PROBE);
  lines = probeLines(run.output);
  ASSERT_EQ(lines.size(), 2u) << run.output;
  EXPECT_EQ(lines[0].localRank, "1");
  EXPECT_EQ(lines[0].original, "3");
  // An MPI rank (nccl-tests picks its GPU from NCCL_TESTS_DEVICE): LOCAL_RANK is left alone.
  run = placed(2, {{"OMPI_COMM_WORLD_LOCAL_RANK", "5"}}, PROBE);
  lines = probeLines(run.output);
  ASSERT_EQ(lines.size(), 2u) << run.output;
  EXPECT_EQ(lines[0].device, "1");
  EXPECT_EQ(lines[0].localRank, "-");
  EXPECT_EQ(lines[0].original, "5");
  // Not a rank (torchrun's agent, mpirun): a host id, nothing placed.
  run = placed(2, {}, PROBE);
  lines = probeLines(run.output);
  ASSERT_EQ(lines.size(), 2u) << run.output;
  EXPECT_EQ(lines[0].localRank, "-");
  EXPECT_EQ(lines[0].original, "-");
}

TEST(ShareGpu, RefusesAHostIdOrAPinnedGpuThatTheJobSetsItself) {
  auto run = placed(1, {{"LOCAL_RANK", "1"}, {"NCCL_HOSTID", "node7"}}, PROBE);
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_TRUE(probeLines(run.output).empty()) << run.output;
  EXPECT_NE(run.output.find("NCCL_HOSTID=node7 was set by the job or its launcher"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("remove NCCL_HOSTID from the job's environment"), std::string::npos) << run.output;

  run = placed(1, {{"LOCAL_RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "1"}}, PROBE);
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("CUDA_VISIBLE_DEVICES is '1' but was (unset) at launch: the job pins a GPU per rank"),
            std::string::npos)
      << run.output;
  // The launch's own value is fine.
  run = placed(1, {{"LOCAL_RANK", "1"}, {"CUDA_VISIBLE_DEVICES", "0"}, {"RANKLENS_SHARE_GPU_VISIBLE", "0"}}, PROBE);
  EXPECT_EQ(run.status, 0) << run.output;

  run = placed(1, {{"RANKLENS_SHARE_GPU", "two"}}, PROBE);
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("RANKLENS_SHARE_GPU must be the number of GPUs"), std::string::npos) << run.output;

  // The launcher refuses before starting anything.
  run = runWithEnv({{"NCCL_HOSTID", "cluster-a"}}, "'" RANKLENS_CLI "' run --share-gpu -- " PROBE);
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_TRUE(probeLines(run.output).empty()) << run.output;
  EXPECT_NE(run.output.find("error: --share-gpu: NCCL_HOSTID is set (cluster-a)"), std::string::npos) << run.output;
  // Without the flag, `run` has nothing to do.
  run = runWithEnv({}, "'" RANKLENS_CLI "' run -- " PROBE);
  EXPECT_EQ(run.status, 2) << run.output;
  EXPECT_NE(run.output.find("--share-gpu is required"), std::string::npos) << run.output;
}

// A recording of record_scenario, forwarding to the fake real NCCL, with or without --share-gpu.
std::string recordScenario(const std::string& name, bool share) {
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, name + "-" + std::to_string(getpid()));
  const auto run = runWithEnv({{"RANKLENS_DEVICE", "host"},
                               {"FAKE_REAL_NCCL_SPIN_US", "300"},
                               {"NCCL_HOSTID", "<unset>"},
                               {"CUDA_VISIBLE_DEVICES", "<unset>"}},
                              "'" RANKLENS_CLI "' record " + std::string(share ? "--share-gpu " : "") +
                                  "--real-nccl '" FAKE_REAL_NCCL "' --trace '" + dir +
                                  "/trace' -- sh -c 'RANK=0 WORLD_SIZE=1 LOCAL_RANK=3 " RECORD_SCENARIO " forward'");
  EXPECT_EQ(run.status, 0) << run.output;
  return dir + "/trace";
}

TEST(ShareGpu, TheManifestSaysSoAndOnlyATimingReplayWarns) {
  const std::string shared = recordScenario("shared", true);
  const std::string own = recordScenario("own", false);
  const trace_test::Trace sharedTrace = trace_test::readTrace(shared + "/rank0");
  EXPECT_TRUE(sharedTrace.manifest.shared_gpu);
  EXPECT_EQ(sharedTrace.manifest.local_rank, 3);  // the launcher's, not the one mapped onto the GPU
  EXPECT_EQ(sharedTrace.manifest.env.at("LOCAL_RANK"), "0");
  const trace_test::Trace ownTrace = trace_test::readTrace(own + "/rank0");
  EXPECT_FALSE(ownTrace.manifest.shared_gpu);
  EXPECT_EQ(ownTrace.manifest.local_rank, 3);

  const std::string warning = "was recorded with its ranks sharing a GPU (ranklens record --share-gpu)";
  auto replay = [&](const std::string& trace, const std::string& fidelity) {
    return runWithEnv({}, "'" RANKLENS_CLI "' replay --trace '" + trace + "' --rank 0 --device host " + fidelity +
                              " --trace-dir '" + trace + "-replay" + fidelity.substr(fidelity.find(' ') + 1) +
                              "' -- true");
  };
  const auto timing = replay(shared, "--fidelity timing");
  EXPECT_EQ(count(timing.output, warning), 1u) << timing.output;
  EXPECT_EQ(count(replay(shared, "--fidelity value").output, warning), 0u);
  EXPECT_EQ(count(replay(shared, "--fidelity structure").output, warning), 0u);
  EXPECT_EQ(count(replay(own, "--fidelity timing").output, warning), 0u);
  // compare's JSON carries the flag, and doctor explains it.
  const auto compare = runWithEnv({}, "'" RANKLENS_CLI "' compare '" + shared + "' '" + own + "' --rank 0 --json -");
  EXPECT_NE(compare.output.find("\"shared_gpu\": true"), std::string::npos) << compare.output;
  const auto doctor = runWithEnv({}, "'" RANKLENS_CLI "' doctor --no-python --trace '" + shared + "'");
  EXPECT_NE(doctor.output.find("recorded with its ranks sharing a GPU (--share-gpu)"), std::string::npos)
      << doctor.output;
  EXPECT_NE(doctor.output.find("[ok  ] share GPU"), std::string::npos) << doctor.output;
}

// ------------------------------------------------------------------------------------------------ replay --ranks

const std::string kShipped = std::string(SOURCE_DIR) + "/examples/traces/minitrain-2xh200";

std::string replayRanks(const std::string& out, const std::string& options, int* status) {
  const auto run = runWithEnv({}, "'" RANKLENS_CLI "' replay --trace '" + kShipped + "' --device host --out '" + out +
                                      "' " + options + " -- '" MINITRAIN "' --steps 10");
  *status = run.status;
  return run.output;
}

TEST(ReplayRanks, EveryRankOneLineEachAndAReport) {
  const std::string out = trace_test::freshDir(TEST_TMP_DIR, "ranks-" + std::to_string(getpid())) + "/out";
  int status = -1;
  const std::string output = replayRanks(out, "--ranks all --parallel 2", &status);
  EXPECT_EQ(status, 0) << output;
  // Host device: the GPU time is accounted, not waited, so no step-time error is judged.
  const std::regex row(R"((\d) +0 +80/80 \(100%\) +none +n/a: host device +-)");
  std::set<std::string> ranks;
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator(); ++it)
    ranks.insert((*it)[1]);
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1"})) << output;
  EXPECT_NE(output.find("2 of 2 ranks replayed with exit code 0, every recorded call matched"), std::string::npos)
      << output;
  EXPECT_NE(output.find("[2/2] rank"), std::string::npos) << output;  // progress as ranks finish
  std::ifstream report(out + "/report.json");
  std::stringstream text;
  text << report.rdbuf();
  EXPECT_NE(text.str().find("\"pass\": true"), std::string::npos) << text.str();
  EXPECT_TRUE(ranklens::trace::holdsTrace(out + "/rank1"));

  // --report prints the same table again from --out, and a second run into it is refused.
  const std::string again = replayRanks(out, "--ranks all --report", &status);
  EXPECT_EQ(status, 0) << again;
  EXPECT_NE(again.find("2 of 2 ranks replayed"), std::string::npos) << again;
  const std::string refused = replayRanks(out, "--ranks 1", &status);
  EXPECT_EQ(status, 2) << refused;
  EXPECT_NE(refused.find("already holds a replay of rank 1"), std::string::npos) << refused;
}

TEST(ReplayRanks, AFailingRankIsSaidAndFailsTheWhole) {
  const std::string out = trace_test::freshDir(TEST_TMP_DIR, "ranks-fail-" + std::to_string(getpid())) + "/out";
  // Three steps of the recorded ten: the program ends early, 24 of 80 calls.
  const auto run = runWithEnv({}, "'" RANKLENS_CLI "' replay --trace '" + kShipped + "' --device host --out '" + out +
                                      "' --ranks 1 -- '" MINITRAIN "' --steps 3");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("24/80 (30.0%)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("0 of 1 ranks replayed"), std::string::npos) << run.output;
}

TEST(ReplayRanks, ATimeoutStopsARankAndADigestIsShown) {
  const std::string out = trace_test::freshDir(TEST_TMP_DIR, "ranks-timeout-" + std::to_string(getpid())) + "/out";
  const auto run = runWithEnv({}, "'" RANKLENS_CLI "' replay --trace '" + kShipped + "' --device host --out '" + out +
                                      "' --ranks 0 --rank-timeout 1 -- sh -c 'echo RANKLENS_DIGEST abc123; sleep 30'");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("rank 0 exited with status 124"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(stopped at --rank-timeout)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("abc123"), std::string::npos) << run.output;
}

TEST(ReplayRanks, WritesASlurmArrayInsteadOfRunning) {
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, "ranks-slurm-" + std::to_string(getpid()));
  int status = -1;
  const std::string output =
      replayRanks(dir + "/out", "--ranks 0-1 --parallel 16 --slurm " + dir + "/job.sbatch", &status);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("Submit it: sbatch " + dir + "/job.sbatch"), std::string::npos) << output;
  std::ifstream file(dir + "/job.sbatch");
  std::stringstream script;
  script << file.rdbuf();
  const std::string text = script.str();
  EXPECT_NE(text.find("#SBATCH --array=0-1%16"), std::string::npos) << text;
  EXPECT_NE(text.find("#SBATCH --gres=gpu:1"), std::string::npos) << text;
  EXPECT_NE(text.find("replay' '--trace' '" + kShipped + "' '--rank' \"$RANK\" '--trace-dir' '" + dir + "/out'"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("'--device' 'host' '--' '" MINITRAIN "' '--steps' '10' > '" + dir + "/out'/rank\"$RANK\".log"),
            std::string::npos)
      << text;
  EXPECT_FALSE(ranklens::trace::holdsTrace(dir + "/out/rank0"));  // nothing ran
  // The script runs as Slurm would run task 1 (SLURM_ARRAY_TASK_ID), then --report tells it.
  const auto task = runWithEnv({{"SLURM_ARRAY_TASK_ID", "1"}}, "bash '" + dir + "/job.sbatch'");
  EXPECT_EQ(task.status, 0) << task.output;
  const std::string table = replayRanks(dir + "/out", "--ranks 0-1 --report", &status);
  EXPECT_EQ(status, 1) << table;  // rank 0 never ran
  EXPECT_NE(table.find("not run (no "), std::string::npos) << table;
  EXPECT_NE(table.find("80/80 (100%)"), std::string::npos) << table;
  EXPECT_NE(table.find("1 of 2 ranks replayed"), std::string::npos) << table;
}

TEST(ReplayRanks, BadRankListsAreRefusedWithTheRecordingsRanks) {
  int status = -1;
  const std::string dir = trace_test::freshDir(TEST_TMP_DIR, "ranks-bad-" + std::to_string(getpid()));
  std::string output = replayRanks(dir + "/a", "--ranks 0,5", &status);
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("rank 5 is not in the recording (it holds 2 rank directories, ranks 0 to 1)"),
            std::string::npos)
      << output;
  output = replayRanks(dir + "/b", "--ranks 1-x", &status);
  EXPECT_EQ(status, 2) << output;
  EXPECT_NE(output.find("'1-x' is not a rank or a range"), std::string::npos) << output;
  output = replayRanks(dir + "/c", "--ranks all --parallel 0", &status);
  EXPECT_EQ(status, 2) << output;
  const auto noTrace = runWithEnv({}, "'" RANKLENS_CLI "' replay --ranks all -- true");
  EXPECT_EQ(noTrace.status, 2) << noTrace.output;
  EXPECT_NE(noTrace.output.find("give --trace DIR"), std::string::npos) << noTrace.output;
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// `ranklens replay` of one rank: its options, the checks made before the program starts (the command line, the
// recording, the library, the settings, the event directory), the environment the program runs in, and the report
// after it (the replay's counters, then the summary or the comparison with the recording). --ranks is
// replay_ranks.cc's.
#include <CLI/CLI.hpp>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <string>

#include "compare.h"
#include "launch.h"
#include "ranklens/config.h"
#include "ranklens/recording.h"
#include "ranklens/status.h"
#include "ranklens/trace.h"
#include "replay_command.h"
#include "summary.h"
#include "trace_log.h"

namespace ranklens {
namespace tools {

namespace {

namespace fs = std::filesystem;

// Whether the replay's events can be written under `dir` (created if missing): a path naming a file, a directory
// without write access or a read-only file system would otherwise let the job run to the end and leave no event
// log, the comparison after it reading nothing. A file is created and removed to find out (root ignores modes).
ranklens::Status eventDirectoryWritable(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    return Status::systemError(
        dir + ": cannot create the directory: " + (ec ? ec.message() : std::string("it is not a directory")));
  std::string probe = dir + "/.ranklens-write-check-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) return Status::systemError(dir + ": cannot write there: " + strerror(errno));
  const bool wrote = write(fd, "x", 1) == 1;
  const int writeErrno = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) return Status::systemError(dir + ": cannot write there: " + strerror(writeErrno));
  return Status::ok();
}

// Whether the replay's event log of `rankDir` was written whole (a manifest, closed); else why not, with the path.
Status eventLogComplete(const std::string& rankDir) {
  std::unique_ptr<ranklens::trace::TraceReader> reader;
  const Status opened = ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &reader);
  if (reader && reader->manifest().closed) return Status::ok();
  std::string why = reader ? rankDir + ": the event log was not closed" : opened.message();
  // The writer's own error (errno's text, the file) went to stderr when it failed; a full file system is named
  // here too, because that is what it most often is.
  struct statvfs fsStat;
  const std::string parent = fs::path(rankDir).parent_path().string();
  if (statvfs(parent.c_str(), &fsStat) == 0 && fsStat.f_bavail == 0)
    why += " (" + parent + ": " + strerror(ENOSPC) + ")";
  return Status::systemError(why);
}

std::string defaultTraceDir() {
  const char* tmp = getenv("TMPDIR");
  return freshDirectoryName(tmp && *tmp ? tmp : "/tmp", "ranklens");
}

// How faithful the replay of a recording was, from the counters the library left in the replay trace's manifest.
void printReplayCounters(const std::string& rankDir, bool ofRecording = true, bool valueFidelity = false) {
  std::unique_ptr<ranklens::trace::TraceReader> reader;
  if (!ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &reader).isOk()) return;
  const auto& c = reader->manifest().counters;
  auto get = [&](const char* name) -> unsigned long long {
    auto it = c.find(name);
    return it == c.end() ? 0 : it->second;
  };
  if (c.find("replay_calls") == c.end()) {
    std::cout << "\nReplay: no counters in " << rankDir << " (the program did not exit normally?)\n";
    return;
  }
  if (!ofRecording) {
    std::cout << "\nReplay without a recording: " << get("replay_calls") << " calls, each held for its estimate ("
              << get("replay_estimates_extrapolated") << " extrapolated beyond the history, "
              << get("replay_estimates_from_benchmarks")
              << " from nccl-tests samples); held on the call streams: " << std::fixed << std::setprecision(2)
              << get("replay_held_ns") / 1e6 << " ms in " << get("replay_holds") << " holds"
              << (reader->manifest().gpu_name.empty() ? " (host device: GPU time accounted, not waited)" : "") << "\n";
    if (get("replay_estimates_extrapolated") > 0)
      std::cout << "note: an extrapolated estimate had no sample of its operation and communicator size within a "
                   "factor of two of its bytes: it comes from a latency-bandwidth line in bus bytes at the history's "
                   "bandwidth (ranklens estimate query --history FILE --op OP --bytes B --nranks N shows each); "
                   "record a job of this size, or import the cluster's nccl-tests output at it (ranklens history "
                   "import-nccl-tests), to replace it\n";
    return;
  }
  std::cout << "\nReplay of the recording: " << get("replay_calls") << " calls, " << get("replay_calls_matched")
            << " matched, " << get("replay_mismatches") << " mismatched (" << get("replay_resyncs")
            << " resynchronised, " << get("replay_extra_calls") << " extra), " << get("replay_estimated")
            << " estimated (" << get("replay_estimates_extrapolated") << " extrapolated, "
            << get("replay_estimates_from_benchmarks") << " from nccl-tests samples, " << get("replay_untimed")
            << " recorded without a duration: captured in a CUDA graph or lost), " << get("replay_payloads_restored")
            << " payloads restored, " << get("replay_filled_without_payload")
            << " filled without payload; communicators " << get("replay_comms_matched") << " matched, "
            << get("replay_comms_unmatched") << " unmatched, " << get("replay_comms_rebound") << " rebound\n"
            << "Held on the call streams: " << std::fixed << std::setprecision(2) << get("replay_held_ns") / 1e6
            << " ms in " << get("replay_holds") << " holds";
  if (get("replay_holds_paced") > 0) std::cout << " (" << get("replay_holds_paced") << " paced by their peers)";
  std::cout << "; calling thread held " << get("replay_host_held_ns") / 1e6 << " ms"
            << (reader->manifest().gpu_name.empty() ? " (host device: GPU time accounted, not waited)" : "") << "\n";
  // A program that stops early (e.g. a rank that skipped training on a flag it did not receive) still exits 0.
  const unsigned long long recorded = get("replay_recorded_calls"), matched = get("replay_calls_matched");
  if (recorded > 0 && matched < recorded)
    std::cout << "warning: " << recorded - matched << " of the " << recorded
              << " recorded calls were not replayed: the program ended early or took another path (the first "
                 "divergence is in the comparison below)\n";
  if (get("replay_payload_failures") > 0)
    std::cout << "warning: " << get("replay_payload_failures")
              << " recorded payloads could not be restored (each named on stderr with its file, offset and reason): "
                 "the calls got the fill semantics (on_payload_error: warn) or failed (error); "
                 "rlpayload verify checks the trace\n";
  if (valueFidelity && get("replay_filled_without_payload") > 0)
    std::cout << "warning: " << get("replay_filled_without_payload")
              << " calls got the fill semantics for want of a recorded payload: at value fidelity this rank's values "
                 "are not the recorded run's from the first of them on (the warning before the run named it)\n";
}

// With --trace: the recording decides the world size, and a rank or world size that contradicts it is refused
// here, before the job starts (the library would refuse it too, but only after the job's own start-up). The
// recorded placement is reported: the replay runs as local rank 0 on this machine's GPU whatever it was.
// `restored` gets the recorded process settings (trace::kProcessSettingVariables) that the caller's environment
// does not set: a rank started alone, not by torchrun, would otherwise run, e.g., with every core as OpenMP threads
// where torchrun gave it one.
Status checkAgainstRecording(const ReplayOptions& o, int* worldSize, std::map<std::string, std::string>* restored) {
  std::string rankDir;
  if (Status resolved = resolveRankDirectory(o.trace, o.rank, &rankDir); !resolved.isOk())
    return Status::invalidArgument("--trace " + o.trace + ": " + resolved.message());
  std::unique_ptr<ranklens::trace::TraceReader> reader;
  const Status opened = ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &reader);
  if (!reader) return Status::corrupt("--trace " + o.trace + ": " + opened.message());
  const auto& m = reader->manifest();
  if (m.rank >= 0 && m.rank != o.rank)
    return Status::invalidArgument("--rank " + std::to_string(o.rank) + ", but " + rankDir +
                                   " is the recording of rank " + std::to_string(m.rank) + ": pass --rank " +
                                   std::to_string(m.rank) +
                                   ", or give the trace root (the directory holding rank<N>/)");
  if (m.world_size > 0 && *worldSize > 0 && *worldSize != m.world_size)
    return Status::invalidArgument("--world-size " + std::to_string(*worldSize) + " contradicts the recording (" +
                                   rankDir + " was recorded in a world of " + std::to_string(m.world_size) +
                                   "): drop --world-size or pass " + std::to_string(m.world_size));
  if (*worldSize < 1 && m.world_size < 1)
    return Status::invalidArgument(rankDir + " does not say its world size (WORLD_SIZE was not set when it was " +
                                   "recorded): pass --world-size N");
  if (*worldSize < 1) *worldSize = m.world_size;
  // Values and calls of a shared-GPU recording are a real run's; its durations are not (the ranks shared the SMs and
  // talked over sockets), and a timing replay holds each call for them.
  if (m.shared_gpu && (o.fidelity.empty() || o.fidelity == "timing"))
    std::cerr << "warning: " << rankDir << " was recorded with its ranks sharing a GPU (ranklens record "
              << "--share-gpu): its durations are not those of a rank with a GPU of its own, so this timing replay "
              << "holds calls for times no lone rank took; replay at value or structure fidelity for values and "
              << "calls, or record with one GPU per rank for step times\n";
  for (const char* name : ranklens::trace::kProcessSettingVariables) {
    auto recorded = m.env.find(name);
    if (recorded != m.env.end() && getenv(name) == nullptr) (*restored)[name] = recorded->second;
  }
  if (!o.quiet && !restored->empty()) {
    std::cerr << "ranklens: as recorded:";
    for (const auto& [name, value] : *restored) std::cerr << " " << name << "=" << value;
    std::cerr << " (set a variable to override it)\n";
  }
  if (!o.quiet)
    std::cerr << "ranklens: recording " << rankDir << ": rank " << m.rank << " of " << m.world_size
              << (m.host.empty() ? std::string() : ", host " + m.host)
              << (m.local_rank >= 0 ? ", local rank " + std::to_string(m.local_rank) : std::string())
              << (m.gpu_name.empty() ? std::string() : ", " + m.gpu_name) << (m.closed ? "" : " (not closed: crashed?)")
              << "\n";
  return Status::ok();
}

// Damage in the recording (the replay uses the records before it) and, for a value replay, the calls whose
// payloads the recording lacks (they run, but their values are not the recorded run's): said before the job starts
// (the library says it too, under NCCL_DEBUG).
void warnAboutRecording(const ReplayOptions& o, config::Fidelity fidelity) {
  std::unique_ptr<ranklens::trace::Recording> recording;
  if (!ranklens::trace::Recording::open(o.trace, o.rank, &recording).isOk())
    return;  // the library reports what it cannot open
  for (const auto& p : recording->problems())
    std::cerr << "warning: " << p.describe()
              << (p.skipped ? ": the record is skipped"
                            : ": the replay has only the records before it; a call after it differs from the recording")
              << "\n";
  if (ranklens::trace::InterruptedEdit edit; ranklens::trace::findInterruptedEdit(recording->directory(), &edit))
    std::cerr << "warning: " << edit.describe() << "\n";
  if (fidelity != config::Fidelity::kValue) return;
  const std::string gaps = ranklens::trace::describePayloadGaps(*recording);
  if (!gaps.empty()) std::cerr << "warning: " << gaps << "\n";
}

// What a one-rank replay runs: the world it joins, the library, the program's environment and settings, and where
// its events go.
struct ReplayPlan {
  int worldSize = -1;
  bool estimatesOnly = false;  // no --trace, --history: timing from the history's estimates
  std::string lib;
  std::map<std::string, std::string> env;
  config::Settings settings;
  std::string traceDir;
};

// The command line's own consistency, before anything is read.
Status checkReplayArguments(const ReplayOptions& o, bool estimatesOnly) {
  if (o.rank < 0)
    return Status::invalidArgument(
        "--rank R is required (or --ranks LIST with --trace to replay several ranks in turn)");
  if (o.command.empty())
    return Status::invalidArgument(
        "no program to run: give it after --, e.g. ranklens replay --rank 3 --world-size 8 -- python3 train.py");
  if (o.trace.empty() && !o.fidelity.empty() && o.fidelity != "structure" && !estimatesOnly)
    return Status::invalidArgument(
        "--fidelity " + o.fidelity + " replays a recording: give --trace DIR (the directory " +
        "`RANKLENS_MODE=record` wrote, or one rank<R> inside it)" +
        (o.fidelity == "timing" ? ", or --history FILE to hold every call for its estimate" : ""));
  // Per-rank state (peers, pacing chains, the launcher's tables) grows with the world size: a mistyped size would
  // grow to gigabytes before failing without a word on why. No NCCL job comes near this many ranks.
  constexpr int kMaxWorldSize = 1 << 17;
  if (o.worldSize > kMaxWorldSize)
    return Status::invalidArgument("--world-size " + std::to_string(o.worldSize) +
                                   ": more ranks than RankLens replays (at most " + std::to_string(kMaxWorldSize) +
                                   "); pass the recorded job's world size, or --trace to take it from the recording");
  return Status::ok();
}

// The program's environment: who it is in which world, the library, the settings the options stand for, and the
// Python adapter that hosts the lone rank's store.
// `recorded`: the recording's process settings, where these leave them unset.
void setReplayEnvironment(const ReplayOptions& o, const std::map<std::string, std::string>& recorded,
                          ReplayPlan* plan) {
  auto& env = plan->env;
  env = {
      {"RANKLENS_MODE", "replay"},
      {"RANKLENS_FIDELITY", "structure"},
      {"RANK", std::to_string(o.rank)},
      {"WORLD_SIZE", std::to_string(plan->worldSize)},
      // One GPU here: the original local rank does not exist on this machine.
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      // torch: no unique-id exchange through the store (there are no peers to send it).
      {"TORCH_NCCL_BCAST_UNIQUEID", "0"},
  };
  env.insert(recorded.begin(), recorded.end());
  if (plan->worldSize > 128) env["TORCH_NCCL_RANKS_PER_ROOT"] = std::to_string(plan->worldSize);
  if (!o.config.empty()) env["RANKLENS_CONFIG"] = fs::absolute(o.config).string();
  if (!o.fill.empty()) env["RANKLENS_FILL"] = o.fill;
  if (!o.device.empty()) env["RANKLENS_DEVICE"] = o.device;
  if (!o.groups.empty()) env["RANKLENS_GROUPS"] = o.groups;
  if (!o.mesh.empty()) env["RANKLENS_MESH"] = o.mesh;
  if (!o.meshColors.empty()) env["RANKLENS_MESH_COLORS"] = o.meshColors;
  if (!o.traceDir.empty()) env["RANKLENS_TRACE_DIR"] = o.traceDir;
  if (!o.trace.empty()) {
    env["RANKLENS_REPLAY_TRACE"] = fs::absolute(o.trace).string();
    env["RANKLENS_FIDELITY"] = o.fidelity.empty() ? "timing" : o.fidelity;
  } else if (plan->estimatesOnly) {
    env["RANKLENS_FIDELITY"] = "timing";
    env["RANKLENS_TIMING"] = "estimated";
  } else if (!o.fidelity.empty()) {
    env["RANKLENS_FIDELITY"] = o.fidelity;
  }
  if (!o.history.empty()) env["RANKLENS_HISTORY"] = fs::absolute(o.history).string();
  if (!o.onMismatch.empty()) env["RANKLENS_ON_MISMATCH"] = o.onMismatch;
  pointAtLibrary(plan->lib, o.override, &env);
  if (!o.noPythonAdapter) {
    const std::string adapter = findPythonAdapter();
    if (adapter.empty())
      std::cerr << "warning: the Python adapter (tools/python) was not found next to ranklens: a PyTorch job will "
                   "wait for its absent peers in init_process_group (install ranklens with its "
                   "share/ranklens/python)\n";
    else
      enablePythonAdapter(adapter, true, &env);
  }
}

// The world (from the recording when there is one), the library and the environment.
Status planReplay(const ReplayOptions& o, ReplayPlan* plan) {
  plan->estimatesOnly = o.trace.empty() && !o.history.empty() && (o.fidelity.empty() || o.fidelity == "timing");
  RL_CHECK(checkReplayArguments(o, plan->estimatesOnly));
  plan->worldSize = o.worldSize;
  std::map<std::string, std::string> recordedEnv;
  if (!o.trace.empty()) RL_CHECK(checkAgainstRecording(o, &plan->worldSize, &recordedEnv));
  if (plan->worldSize < 1 || o.rank < 0 || o.rank >= plan->worldSize)
    return Status::invalidArgument("--rank " + std::to_string(o.rank) + " --world-size " +
                                   std::to_string(plan->worldSize) +
                                   ": need 0 <= rank < world size (e.g. --rank 3 --world-size 8; with --trace the "
                                   "world size is the recording's)");
  RL_CHECK(usableLibrary(o.lib, &plan->lib));
  setReplayEnvironment(o, recordedEnv, plan);
  return Status::ok();
}

// Where the events go: a trace_dir from the config file or the caller's environment wins; otherwise a fresh
// directory. One that already holds this rank's trace is refused: the library writes no events over an earlier
// trace (it says so only under NCCL_DEBUG), and the summary or the comparison after the run would then read the
// earlier run's.
Status chooseEventDirectory(const ReplayOptions& o, ReplayPlan* plan) {
  plan->traceDir = plan->settings.trace_dir;
  if (plan->traceDir.empty() && !o.noEvents) plan->env["RANKLENS_TRACE_DIR"] = plan->traceDir = defaultTraceDir();
  if (const std::string rankDir = plan->traceDir + "/rank" + std::to_string(o.rank);
      !plan->traceDir.empty() && trace::holdsTrace(rankDir))
    return Status::invalidUsage("the event directory " + plan->traceDir + " already holds a trace of rank " +
                                std::to_string(o.rank) + " (" + rankDir +
                                "); choose a new --trace-dir (or trace_dir), or remove that one");
  return Status::ok();
}

// After the run: the summary of a structure replay, or how faithful the replay of a recording was (ranklens compare).
void printReplayReport(const ReplayOptions& o, const ReplayPlan& plan) {
  const std::string& traceDir = plan.traceDir;
  if (traceDir.empty() || !fs::exists(traceDir)) return;
  const std::string rankDir = traceDir + "/rank" + std::to_string(o.rank);
  if (o.trace.empty()) {
    if (plan.estimatesOnly) printReplayCounters(rankDir, false);
    std::cout << "\nSignature summary (" << traceDir << "):\n";
    printTraceSummary(traceDir, false, std::cout, std::cerr);
    return;
  }
  printReplayCounters(rankDir, true, plan.settings.fidelity == config::Fidelity::kValue);
  std::cout << "\nRecorded vs replayed (ranklens compare " << o.trace << " " << traceDir << " --rank " << o.rank
            << "):\n";
  CompareOptions compare;
  compare.recorded = o.trace;
  compare.replayed = traceDir;
  compare.rank = o.rank;
  runCompare(compare, std::cout, std::cerr);
}

// A failure before the program starts: said, and exit status 2 (`ranklens replay`'s "bad usage before it starts").
int failBeforeStart(const Status& status) {
  std::cerr << "error: " << status.message() << "\n";
  return 2;
}

// The options of a one-rank replay: who, in which world, against what recording, with which library. Returns
// --rank's option (--ranks excludes it).
CLI::Option* addOneRankOptions(CLI::App* cmd, ReplayOptions* o) {
  auto* rankOption = cmd->add_option("-r,--rank", o->rank, "Global rank to run");
  cmd->add_option("-n,--world-size", o->worldSize,
                  "World size of the original job (required without --trace; with it, the recording's)");
  cmd->add_option("-c,--config", o->config, "YAML settings file (RANKLENS_CONFIG)")->check(CLI::ExistingFile);
  cmd->add_option("-f,--fill", o->fill, "Receive-buffer semantics without a recording")
      ->check(CLI::IsMember({"clone", "keep", "zero", "poison"}));
  cmd->add_option("-d,--device", o->device, "Stream device")->check(CLI::IsMember({"auto", "cuda", "host"}));
  cmd->add_option("-g,--groups", o->groups,
                  "Split table as YAML flow text, e.g. '[{members: [0,2]}, {members: [1,3]}]' (RANKLENS_GROUPS)");
  cmd->add_option("--mesh", o->mesh,
                  "Device mesh, outermost dimension first, e.g. dp=8192,tp=2 or pp=4,dp=-1,tp=8: every split's "
                  "members for any rank at any world size, without a groups table (RANKLENS_MESH)");
  cmd->add_option("--mesh-colors", o->meshColors,
                  "Which split colors span which mesh dimensions when they are not torch's, e.g. tp=0-8191,dp=8192- "
                  "(RANKLENS_MESH_COLORS)");
  cmd->add_option("-t,--trace-dir", o->traceDir,
                  "Where the event log goes (default: trace_dir from the config, else a new $TMPDIR/ranklens-*)");
  cmd->add_flag("--no-events", o->noEvents,
                "Do not create the default event-log directory (a trace_dir from the config or environment still "
                "applies)");
  cmd->add_option("--trace", o->trace,
                  "Recorded trace to replay (RANKLENS_REPLAY_TRACE): the record run's trace directory, rank<R> is "
                  "picked by --rank; or a rank directory")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--fidelity", o->fidelity,
                  "structure (calls only), timing (+ recorded durations; default with --trace, or with --history "
                  "alone: estimated durations), value (+ recorded payloads)")
      ->check(CLI::IsMember({"structure", "timing", "value"}));
  cmd->add_option("--history", o->history,
                  "Duration history (`ranklens history build`; RANKLENS_HISTORY). Without --trace: timing fidelity, "
                  "every call held for its estimate (a job never recorded at this scale). With --trace: the "
                  "estimates for --on-mismatch estimate and timing: estimated")
      ->check(CLI::ExistingFile);
  cmd->add_option("--on-mismatch", o->onMismatch,
                  "A call the recording lacks: error (default), warn, estimate (RANKLENS_ON_MISMATCH)")
      ->check(CLI::IsMember({"error", "warn", "estimate"}));
  cmd->add_option("--lib", o->lib, "RankLens libnccl.so.2 to use (default: the one installed beside ranklens)");
  cmd->add_option("--override", o->override,
                  "How the program is made to load RankLens: LD_PRELOAD (pip-wheel PyTorch needs it), "
                  "LD_LIBRARY_PATH (programs linked without RPATH), or both")
      ->check(CLI::IsMember({"preload", "library-path", "both"}));
  cmd->add_flag("--no-python-adapter", o->noPythonAdapter,
                "Do not load the Python adapter (a store for the lone rank, optimizer-step markers; PYTHONPATH, "
                "MASTER_ADDR/PORT, TORCHELASTIC_USE_AGENT_STORE)");
  cmd->add_flag("-q,--quiet", o->quiet, "No launcher messages and no summary");
  return rankOption;
}

// --ranks and what goes with it: every rank of a recording, each alone, in turn or at once, here or as a Slurm array.
void addRanksOptions(CLI::App* cmd, ReplayOptions* o, CLI::Option* rankOption) {
  auto* ranksOption = cmd->add_option(
      "--ranks", o->ranks,
      "Replay these ranks of --trace, each alone, in turn (or --parallel at once), and print one line per rank: "
      "exit code, calls matched, first divergence, step-time error where meaningful, the program's digest. "
      "'all' or a list, e.g. 0,3,8-15");
  ranksOption->excludes(rankOption);
  cmd->add_option("--parallel", o->parallel,
                  "With --ranks: replays at once on this machine's GPU: a number, or auto (as many as its memory "
                  "holds, from the recorded memory use). Step-time errors are not judged when several replays share "
                  "the GPU")
      ->capture_default_str();
  cmd->add_option("--out", o->out,
                  "With --ranks: directory for each rank's log (rank<R>.log), replay trace (rank<R>/), exit code and "
                  "report.json (default: a new $TMPDIR/ranklens-replays-*)");
  cmd->add_option("--slurm", o->slurm,
                  "With --ranks: write a Slurm job array that replays one rank per task (sbatch FILE), instead of "
                  "running here; then print its table with --report")
      ->needs(ranksOption);
  cmd->add_flag("--report", o->reportOnly,
                "With --ranks and --out: print the table of replays already made there (after a Slurm array)")
      ->needs(ranksOption);
  cmd->add_option("--digest-prefix", o->digestPrefix,
                  "With --ranks: the last line of a rank's output that starts with this is shown as its digest "
                  "(e.g. a checksum of the parameters the program prints)")
      ->capture_default_str();
  cmd->add_option("--rank-timeout", o->rankTimeoutSeconds,
                  "With --ranks: stop a rank's replay after this many seconds (exit code 124); 0: no limit")
      ->check(CLI::NonNegativeNumber);
}

}  // namespace

int runReplay(const ReplayOptions& o) {
  if (!o.ranks.empty() || o.reportOnly || !o.slurm.empty()) return runReplayRanks(o);
  ReplayPlan plan;
  if (Status planned = planReplay(o, &plan); !planned.isOk()) return failBeforeStart(planned);
  // Check the configuration the child will see before starting it: a typo fails here, with its position (said
  // by checkSettings).
  if (!checkSettings(plan.env, &plan.settings).isOk()) return 2;
  if (Status chosen = chooseEventDirectory(o, &plan); !chosen.isOk()) return failBeforeStart(chosen);
  if (!o.trace.empty()) warnAboutRecording(o, plan.settings.fidelity);
  if (!o.quiet)
    std::cerr << "ranklens: replaying rank " << o.rank << " of " << plan.worldSize << " ("
              << config::toString(plan.settings.fidelity)
              << (plan.settings.replay_trace.empty() ? std::string() : " of " + plan.settings.replay_trace) << ", fill "
              << config::toString(plan.settings.fill) << ") with " << plan.lib << "\n"
              << "ranklens: events -> " << (plan.traceDir.empty() ? "(disabled)" : plan.traceDir) << "\n";
  if (!plan.traceDir.empty())
    if (Status writable = eventDirectoryWritable(plan.traceDir); !writable.isOk())
      return failBeforeStart(Status::systemError("the replay's event log cannot be written: " + writable.message() +
                                                 "; choose another --trace-dir (or trace_dir), or --no-events to "
                                                 "replay without one"));

  const int programExit = runCommand(plan.env, o.command);
  int exitCode = programExit;
  // A program that exits 0 while its event log could not be written (a full disk) is not a successful replay: the
  // counters and the comparison below would be missing or another run's.
  // (No rank directory at all: the program made no NCCL call, so there were no events to write.)
  if (const std::string rankDir = plan.traceDir + "/rank" + std::to_string(o.rank);
      exitCode == 0 && !plan.traceDir.empty() && fs::exists(rankDir)) {
    if (Status complete = eventLogComplete(rankDir); !complete.isOk()) {
      std::cerr << "error: the replay's event log is incomplete: " << complete.message()
                << " (the library's error above says why); free space or choose another --trace-dir, and run again\n";
      exitCode = 1;
    }
  }
  if (!o.quiet) {
    std::cerr << "ranklens: " << o.command[0] << " exited with status " << programExit << "\n";
    printReplayReport(o, plan);
  }
  return exitCode;
}

CLI::App* addReplayCommand(CLI::App& app, ReplayOptions* o) {
  auto* cmd = app.add_subcommand("replay", "Run a program as rank R of a virtual N-rank world (structure replay)");
  addRanksOptions(cmd, o, addOneRankOptions(cmd, o));
  cmd->add_option("command", o->command, "The program and its arguments (after --)");
  cmd->footer(
      "Examples:\n"
      "  ranklens replay --rank 3 --world-size 8 -- ./my_nccl_program                   (structure, no recording)\n"
      "  ranklens replay --trace /scratch/run42 --rank 1 --fidelity value -- python3 train.py\n"
      "  ranklens replay --trace /scratch/run42 --ranks all --parallel 4 --fidelity value -- python3 train.py\n"
      "  ranklens replay --trace /scratch/run42 --ranks 0-511 --slurm replay.sbatch --out /scratch/replays -- "
      "python3 train.py\n"
      "Exit code: the program's (128+N if killed by signal N, 127 if it cannot start, 2 for bad usage); with --ranks\n"
      "  0 when every rank exited 0 with every recorded call matched and nothing diverged, else 1.\n"
      "docs/tools.md describes the summary and --ranks' table; docs/config.md every variable it sets.");
  return cmd;
}

}  // namespace tools
}  // namespace ranklens

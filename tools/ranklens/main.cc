// SPDX-License-Identifier: Apache-2.0
// ranklens: run a program as rank r of an N-rank job on this machine, with RankLens's libnccl.so.2 in place of
// NCCL; summarise the events it wrote; show the effective configuration.
// Exit codes: the program's own exit code for `replay` (1 if it exited 0 but its event log could not be written
// whole; 2 if the event directory cannot be written, before the run); 0 success, 1 runtime failure, 2 bad usage otherwise.
#include <CLI/CLI.hpp>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iomanip>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "../cli_text.h"
#include "compare.h"
#include "launch.h"
#include "doctor_command.h"
#include "estimate_command.h"
#include "fr_export.h"
#include "fr_import.h"
#include "record_command.h"
#include "replay_command.h"
#include "ranklens/config.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"
#include "summary.h"
#include "waits_command.h"
#include "trace_log.h"
#include "timeline.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using ranklens::tools::ReplayOptions;
constexpr const char* kVersion = "0.1.0";

// Whether the replay's events can be written under `dir` (created if missing): a path naming a file, a directory
// without write access or a read-only file system would otherwise let the job run to the end and leave no event
// log, the comparison after it reading nothing. A file is created and removed to find out (root ignores modes).
bool eventDirectoryWritable(const std::string& dir, std::string* error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    *error = dir + ": cannot create the directory: " + (ec ? ec.message() : std::string("it is not a directory"));
    return false;
  }
  std::string probe = dir + "/.ranklens-write-check-XXXXXX";
  const int fd = mkstemp(probe.data());
  if (fd < 0) {
    *error = dir + ": cannot write there: " + strerror(errno);
    return false;
  }
  const bool wrote = write(fd, "x", 1) == 1;
  const int writeErrno = errno;
  close(fd);
  unlink(probe.c_str());
  if (!wrote) {
    *error = dir + ": cannot write there: " + strerror(writeErrno);
    return false;
  }
  return true;
}

// Whether the replay's event log of `rankDir` was written whole (a manifest, closed); else why not, with the path.
bool eventLogComplete(const std::string& rankDir, std::string* error) {
  std::string readError;
  auto reader = ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &readError);
  if (reader && reader->manifest().closed) return true;
  *error = reader ? rankDir + ": the event log was not closed" : readError;
  // The writer's own error (errno's text, the file) went to stderr when it failed; a full file system is named
  // here too, because that is what it most often is.
  struct statvfs fsStat;
  const std::string parent = fs::path(rankDir).parent_path().string();
  if (statvfs(parent.c_str(), &fsStat) == 0 && fsStat.f_bavail == 0)
    *error += " (" + parent + ": " + strerror(ENOSPC) + ")";
  return false;
}

std::string defaultTraceDir() {
  const char* tmp = getenv("TMPDIR");
  return ranklens::tools::freshDirectoryName(tmp && *tmp ? tmp : "/tmp", "ranklens");
}

// How faithful the replay of a recording was, from the counters the library left in the replay trace's manifest.
void printReplayCounters(const std::string& rankDir, bool ofRecording = true, bool valueFidelity = false) {
  std::string error;
  auto reader = ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &error);
  if (!reader) return;
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
              << get("replay_estimates_from_benchmarks") << " from nccl-tests samples); held on the call streams: "
              << std::fixed << std::setprecision(2) << get("replay_held_ns") / 1e6 << " ms in "
              << get("replay_holds") << " holds"
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
            << " recorded without a duration: captured in a CUDA graph or lost), "
            << get("replay_payloads_restored") << " payloads restored, " << get("replay_filled_without_payload")
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
bool checkAgainstRecording(const ReplayOptions& o, int* worldSize, std::map<std::string, std::string>* restored) {
  std::string rankDir, error;
  if (!ranklens::tools::resolveRankDirectory(o.trace, o.rank, &rankDir, &error)) {
    std::cerr << "error: --trace " << o.trace << ": " << error << "\n";
    return false;
  }
  auto reader = ranklens::trace::TraceReader::open(rankDir, ranklens::trace::Limits{}, &error);
  if (!reader) {
    std::cerr << "error: --trace " << o.trace << ": " << error << "\n";
    return false;
  }
  const auto& m = reader->manifest();
  if (m.rank >= 0 && m.rank != o.rank) {
    std::cerr << "error: --rank " << o.rank << ", but " << rankDir << " is the recording of rank " << m.rank
              << ": pass --rank " << m.rank << ", or give the trace root (the directory holding rank<N>/)\n";
    return false;
  }
  if (m.world_size > 0 && *worldSize > 0 && *worldSize != m.world_size) {
    std::cerr << "error: --world-size " << *worldSize << " contradicts the recording (" << rankDir
              << " was recorded in a world of " << m.world_size << "): drop --world-size or pass " << m.world_size
              << "\n";
    return false;
  }
  if (*worldSize < 1 && m.world_size < 1) {
    std::cerr << "error: " << rankDir << " does not say its world size (WORLD_SIZE was not set when it was "
              << "recorded): pass --world-size N\n";
    return false;
  }
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
  return true;
}

// A value replay of a recording that lacks payloads runs, but its values are not the recorded run's: said before
// the job starts (the library says it too, under NCCL_DEBUG).
void warnOfPayloadGaps(const ReplayOptions& o) {
  std::string error;
  auto recording = ranklens::trace::Recording::open(o.trace, o.rank, &error);
  if (!recording) return;  // the library reports what it cannot open
  const std::string gaps = ranklens::trace::describePayloadGaps(*recording);
  if (!gaps.empty()) std::cerr << "warning: " << gaps << "\n";
}

int runReplay(const ReplayOptions& o) {
  if (!o.ranks.empty() || o.reportOnly || !o.slurm.empty()) return ranklens::tools::runReplayRanks(o);
  if (o.rank < 0) {
    std::cerr << "error: --rank R is required (or --ranks LIST with --trace to replay several ranks in turn)\n";
    return 2;
  }
  if (o.command.empty()) {
    std::cerr << "error: no program to run: give it after --, e.g. ranklens replay --rank 3 --world-size 8 -- "
                 "python3 train.py\n";
    return 2;
  }
  // Without --trace: structure, or with --history timing from estimates.
  const bool estimatesOnly = o.trace.empty() && !o.history.empty() && (o.fidelity.empty() || o.fidelity == "timing");
  if (o.trace.empty() && !o.fidelity.empty() && o.fidelity != "structure" && !estimatesOnly) {
    std::cerr << "error: --fidelity " << o.fidelity << " replays a recording: give --trace DIR (the directory "
              << "`RANKLENS_MODE=record` wrote, or one rank<R> inside it)"
              << (o.fidelity == "timing" ? ", or --history FILE to hold every call for its estimate" : "") << "\n";
    return 2;
  }
  // Per-rank state (peers, pacing chains, the launcher's tables) grows with the world size: a mistyped size would
  // grow to gigabytes before failing without a word on why. No NCCL job comes near this many ranks.
  constexpr int kMaxWorldSize = 1 << 17;
  if (o.worldSize > kMaxWorldSize) {
    std::cerr << "error: --world-size " << o.worldSize << ": more ranks than RankLens replays (at most "
              << kMaxWorldSize << "); pass the recorded job's world size, or --trace to take it from the recording\n";
    return 2;
  }
  int worldSize = o.worldSize;
  std::map<std::string, std::string> recordedEnv;
  if (!o.trace.empty() && !checkAgainstRecording(o, &worldSize, &recordedEnv)) return 2;
  if (worldSize < 1 || o.rank < 0 || o.rank >= worldSize) {
    std::cerr << "error: --rank " << o.rank << " --world-size " << worldSize
              << ": need 0 <= rank < world size (e.g. --rank 3 --world-size 8; with --trace the world size is the "
                 "recording's)\n";
    return 2;
  }
  std::string unusable;
  const std::string lib = ranklens::tools::usableLibrary(o.lib, &unusable);
  if (lib.empty()) {
    std::cerr << "error: " << unusable << "\n";
    return 2;
  }
  std::map<std::string, std::string> env = {
      {"RANKLENS_MODE", "replay"}, {"RANKLENS_FIDELITY", "structure"},
      {"RANK", std::to_string(o.rank)}, {"WORLD_SIZE", std::to_string(worldSize)},
      // One GPU here: the original local rank does not exist on this machine.
      {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"},
      // torch: no unique-id exchange through the store (there are no peers to send it).
      {"TORCH_NCCL_BCAST_UNIQUEID", "0"},
  };
  env.insert(recordedEnv.begin(), recordedEnv.end());
  if (worldSize > 128) env["TORCH_NCCL_RANKS_PER_ROOT"] = std::to_string(worldSize);
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
  } else if (estimatesOnly) {
    env["RANKLENS_FIDELITY"] = "timing";
    env["RANKLENS_TIMING"] = "estimated";
  } else if (!o.fidelity.empty()) {
    env["RANKLENS_FIDELITY"] = o.fidelity;
  }
  if (!o.history.empty()) env["RANKLENS_HISTORY"] = fs::absolute(o.history).string();
  if (!o.onMismatch.empty()) env["RANKLENS_ON_MISMATCH"] = o.onMismatch;
  ranklens::tools::pointAtLibrary(lib, o.override, &env);
  if (!o.noPythonAdapter) {
    const std::string adapter = ranklens::tools::findPythonAdapter();
    if (adapter.empty())
      std::cerr << "warning: the Python adapter (tools/python) was not found next to ranklens: a PyTorch job will "
                   "wait for its absent peers in init_process_group (install ranklens with its share/ranklens/python)\n";
    else
      ranklens::tools::enablePythonAdapter(adapter, true, &env);
  }

  // Check the configuration the child will see before starting it: a typo fails here, with its position.
  ranklens::config::LoadResult loaded;
  if (!ranklens::tools::checkSettings(env, &loaded)) return 2;
  // A trace_dir from the config file or the caller's environment wins; otherwise events go to a fresh directory.
  std::string traceDir = loaded.settings.trace_dir;
  if (traceDir.empty() && !o.noEvents) env["RANKLENS_TRACE_DIR"] = traceDir = defaultTraceDir();
  // The library writes no events over an earlier trace (it says so only under NCCL_DEBUG), and the summary or the
  // comparison after the run would then read the earlier run's: refuse before starting.
  if (const std::string rankDir = traceDir + "/rank" + std::to_string(o.rank);
      !traceDir.empty() && ranklens::trace::holdsTrace(rankDir)) {
    std::cerr << "error: the event directory " << traceDir << " already holds a trace of rank " << o.rank << " ("
              << rankDir << "); choose a new --trace-dir (or trace_dir), or remove that one\n";
    return 2;
  }
  if (!o.trace.empty() && loaded.settings.fidelity == ranklens::config::Fidelity::kValue) warnOfPayloadGaps(o);
  if (!o.quiet)
    std::cerr << "ranklens: replaying rank " << o.rank << " of " << worldSize << " ("
              << ranklens::config::toString(loaded.settings.fidelity)
              << (loaded.settings.replay_trace.empty() ? std::string() : " of " + loaded.settings.replay_trace)
              << ", fill " << ranklens::config::toString(loaded.settings.fill) << ") with " << lib << "\n"
              << "ranklens: events -> " << (traceDir.empty() ? "(disabled)" : traceDir) << "\n";

  if (std::string error; !traceDir.empty() && !eventDirectoryWritable(traceDir, &error)) {
    std::cerr << "error: the replay's event log cannot be written: " << error
              << "; choose another --trace-dir (or trace_dir), or --no-events to replay without one\n";
    return 2;
  }

  const int programExit = ranklens::tools::runCommand(env, o.command);
  int exitCode = programExit;
  // A program that exits 0 while its event log could not be written (a full disk) is not a successful replay: the
  // counters and the comparison below would be missing or another run's.
  // (No rank directory at all: the program made no NCCL call, so there were no events to write.)
  if (std::string error, rankDir = traceDir + "/rank" + std::to_string(o.rank);
      exitCode == 0 && !traceDir.empty() && fs::exists(rankDir) && !eventLogComplete(rankDir, &error)) {
    std::cerr << "error: the replay's event log is incomplete: " << error
              << " (the library's error above says why); free space or choose another --trace-dir, and run again\n";
    exitCode = 1;
  }
  if (!o.quiet) {
    std::cerr << "ranklens: " << o.command[0] << " exited with status " << programExit << "\n";
    if (!traceDir.empty() && fs::exists(traceDir)) {
      if (o.trace.empty()) {
        if (estimatesOnly) printReplayCounters(traceDir + "/rank" + std::to_string(o.rank), false);
        std::cout << "\nSignature summary (" << traceDir << "):\n";
        ranklens::tools::printTraceSummary(traceDir, false, std::cout, std::cerr);
      } else {
        // A replayed recording: how faithful it was, call by call and step by step (ranklens compare).
        const std::string rankDir = traceDir + "/rank" + std::to_string(o.rank);
        printReplayCounters(rankDir, true, loaded.settings.fidelity == ranklens::config::Fidelity::kValue);
        std::cout << "\nRecorded vs replayed (ranklens compare " << o.trace << " " << traceDir << " --rank " << o.rank
                  << "):\n";
        ranklens::tools::CompareOptions compare;
        compare.recorded = o.trace;
        compare.replayed = traceDir;
        compare.rank = o.rank;
        ranklens::tools::runCompare(compare, std::cout, std::cerr);
      }
    }
  }
  return exitCode;
}

// docs/config.md's table of settings, one line each (a test holds the two together).
int printSettingsTable() {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char c : text) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  std::cout << "| key | environment variable | values | default | what it does |\n| --- | --- | --- | --- | --- |\n";
  for (const auto& row : ranklens::config::describe(ranklens::config::Settings{}))
    std::cout << "| `" << row.key << "` | `" << row.env << "` | " << cell(row.values) << " | "
              << (row.default_value.empty() ? std::string("empty") : "`" + row.default_value + "`") << " | "
              << cell(row.help) << " |\n";
  return 0;
}

int runDumpConfig(const std::string& configPath, bool markdown) {
  if (markdown) return printSettingsTable();
  if (!configPath.empty()) setenv("RANKLENS_CONFIG", configPath.c_str(), 1);
  auto loaded = ranklens::config::loadFromEnvironment([](const char* n) { return getenv(n); });
  if (!loaded.ok) {
    std::cerr << "error: " << loaded.error << "\n";
    return 1;
  }
  for (const auto& w : loaded.warnings) std::cerr << "warning: " << w << "\n";
  std::cout << std::left;
  for (const auto& row : ranklens::config::describe(loaded.settings))
    std::cout << std::setw(15) << row.key << " = " << std::setw(24) << row.value << "  (" << row.set_by
              << "; default " << (row.default_value.empty() ? "\"\"" : row.default_value) << "; env " << row.env
              << ")\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RankLens: run one rank of a distributed NCCL job alone, with its peers' effects restored at the "
               "NCCL boundary."};
  app.set_version_flag("--version", kVersion);
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  ranklens record --trace /scratch/run42 -- torchrun --nproc-per-node 2 train.py\n"
      "  ranklens record --share-gpu --trace /tmp/run4 --payloads all -- torchrun --nproc-per-node 4 train.py\n"
      "  ranklens replay --trace /tmp/run4 --ranks all --fidelity value -- python3 train.py\n"
      "  ranklens replay --rank 3 --world-size 8 -- ./my_nccl_program\n"
      "  ranklens replay --rank 37 --world-size 64 --fill poison -- python3 train.py\n"
      "  ranklens replay --rank 1 --trace /scratch/run42 --fidelity value -- python3 train.py\n"
      "  ranklens trace summary /tmp/ranklens-1700000000-1234\n"
      "  ranklens compare /scratch/run42/rank3 /tmp/ranklens-1700000000-1234/rank3 --json compare.json\n"
      "  ranklens timeline /scratch/run42/rank3 /tmp/ranklens-1700000000-1234/rank3 -o rank3.json\n"
      "  ranklens dump-config --config ranklens.yaml\n"
      "  ranklens doctor --python /opt/venv/bin/python --trace /scratch/run42\n"
      "  ranklens history build /scratch/run42 /scratch/run43 -o cluster.hist\n"
      "  ranklens estimate eval --history cluster.hist --target transfer\n"
      "  ranklens history import-nccl-tests all_reduce_64ranks.log -o cluster.hist --append\n"
      "Exit codes: record and replay return the program's exit code (128+N if killed by signal N; 127 if it cannot start;\n"
      "  2 for bad usage before it starts); compare 0 match, 1 differ; other commands 0 ok, 1 failure; all 2 for\n"
      "  bad usage (compare and timeline: also for an unreadable trace).\n"
      "Settings: docs/config.md (RANKLENS_* variables > YAML file > defaults).");

  ReplayOptions replay;
  auto* rp = app.add_subcommand("replay", "Run a program as rank R of a virtual N-rank world (structure replay)");
  auto* rankOption = rp->add_option("-r,--rank", replay.rank, "Global rank to run");
  rp->add_option("-n,--world-size", replay.worldSize,
                 "World size of the original job (required without --trace; with it, the recording's)");
  rp->add_option("-c,--config", replay.config, "YAML settings file (RANKLENS_CONFIG)")->check(CLI::ExistingFile);
  rp->add_option("-f,--fill", replay.fill, "Receive-buffer semantics without a recording")
      ->check(CLI::IsMember({"clone", "keep", "zero", "poison"}));
  rp->add_option("-d,--device", replay.device, "Stream device")->check(CLI::IsMember({"auto", "cuda", "host"}));
  rp->add_option("-g,--groups", replay.groups,
                 "Split table as YAML flow text, e.g. '[{members: [0,2]}, {members: [1,3]}]' (RANKLENS_GROUPS)");
  rp->add_option("--mesh", replay.mesh,
                 "Device mesh, outermost dimension first, e.g. dp=8192,tp=2 or pp=4,dp=-1,tp=8: every split's "
                 "members for any rank at any world size, without a groups table (RANKLENS_MESH)");
  rp->add_option("--mesh-colors", replay.meshColors,
                 "Which split colors span which mesh dimensions when they are not torch's, e.g. tp=0-8191,dp=8192- "
                 "(RANKLENS_MESH_COLORS)");
  rp->add_option("-t,--trace-dir", replay.traceDir,
                 "Where the event log goes (default: trace_dir from the config, else a new $TMPDIR/ranklens-*)");
  rp->add_flag("--no-events", replay.noEvents,
               "Do not create the default event-log directory (a trace_dir from the config or environment still "
               "applies)");
  rp->add_option("--trace", replay.trace,
                 "Recorded trace to replay (RANKLENS_REPLAY_TRACE): the record run's trace directory, rank<R> is "
                 "picked by --rank; or a rank directory")
      ->check(CLI::ExistingDirectory);
  rp->add_option("--fidelity", replay.fidelity,
                 "structure (calls only), timing (+ recorded durations; default with --trace, or with --history "
                 "alone: estimated durations), value (+ recorded payloads)")
      ->check(CLI::IsMember({"structure", "timing", "value"}));
  rp->add_option("--history", replay.history,
                 "Duration history (`ranklens history build`; RANKLENS_HISTORY). Without --trace: timing fidelity, "
                 "every call held for its estimate (a job never recorded at this scale). With --trace: the "
                 "estimates for --on-mismatch estimate and timing: estimated")
      ->check(CLI::ExistingFile);
  rp->add_option("--on-mismatch", replay.onMismatch,
                 "A call the recording lacks: error (default), warn, estimate (RANKLENS_ON_MISMATCH)")
      ->check(CLI::IsMember({"error", "warn", "estimate"}));
  rp->add_option("--lib", replay.lib, "RankLens libnccl.so.2 to use (default: the one installed beside ranklens)");
  rp->add_option("--override", replay.override,
                 "How the program is made to load RankLens: LD_PRELOAD (pip-wheel PyTorch needs it), "
                 "LD_LIBRARY_PATH (programs linked without RPATH), or both")
      ->check(CLI::IsMember({"preload", "library-path", "both"}));
  rp->add_flag("--no-python-adapter", replay.noPythonAdapter,
               "Do not load the Python adapter (a store for the lone rank, optimizer-step markers; PYTHONPATH, "
               "MASTER_ADDR/PORT, TORCHELASTIC_USE_AGENT_STORE)");
  rp->add_flag("-q,--quiet", replay.quiet, "No launcher messages and no summary");
  auto* ranksOption = rp->add_option(
      "--ranks", replay.ranks,
      "Replay these ranks of --trace, each alone, in turn (or --parallel at once), and print one line per rank: "
      "exit code, calls matched, first divergence, step-time error where meaningful, the program's digest. "
      "'all' or a list, e.g. 0,3,8-15");
  ranksOption->excludes(rankOption);
  rp->add_option("--parallel", replay.parallel,
                 "With --ranks: replays at once on this machine's GPU: a number, or auto (as many as its memory "
                 "holds, from the recorded memory use). Step-time errors are not judged when several replays share "
                 "the GPU")
      ->capture_default_str();
  rp->add_option("--out", replay.out,
                 "With --ranks: directory for each rank's log (rank<R>.log), replay trace (rank<R>/), exit code and "
                 "report.json (default: a new $TMPDIR/ranklens-replays-*)");
  rp->add_option("--slurm", replay.slurm,
                 "With --ranks: write a Slurm job array that replays one rank per task (sbatch FILE), instead of "
                 "running here; then print its table with --report")
      ->needs(ranksOption);
  rp->add_flag("--report", replay.reportOnly,
               "With --ranks and --out: print the table of replays already made there (after a Slurm array)")
      ->needs(ranksOption);
  rp->add_option("--digest-prefix", replay.digestPrefix,
                 "With --ranks: the last line of a rank's output that starts with this is shown as its digest "
                 "(e.g. a checksum of the parameters the program prints)")
      ->capture_default_str();
  rp->add_option("--rank-timeout", replay.rankTimeoutSeconds,
                 "With --ranks: stop a rank's replay after this many seconds (exit code 124); 0: no limit")
      ->check(CLI::NonNegativeNumber);
  rp->add_option("command", replay.command, "The program and its arguments (after --)");
  rp->footer(
      "Examples:\n"
      "  ranklens replay --rank 3 --world-size 8 -- ./my_nccl_program                   (structure, no recording)\n"
      "  ranklens replay --trace /scratch/run42 --rank 1 --fidelity value -- python3 train.py\n"
      "  ranklens replay --trace /scratch/run42 --ranks all --parallel 4 --fidelity value -- python3 train.py\n"
      "  ranklens replay --trace /scratch/run42 --ranks 0-511 --slurm replay.sbatch --out /scratch/replays -- "
      "python3 train.py\n"
      "Exit code: the program's (128+N if killed by signal N, 127 if it cannot start, 2 for bad usage); with --ranks\n"
      "  0 when every rank exited 0 with every recorded call matched and nothing diverged, else 1.\n"
      "docs/tools.md describes the summary and --ranks' table; docs/config.md every variable it sets.");

  ranklens::tools::RecordOptions recordOptions;
  auto* record = ranklens::tools::addRecordCommand(app, &recordOptions);

  ranklens::tools::RunOptions runOptions;
  auto* run = ranklens::tools::addRunCommand(app, &runOptions);

  ranklens::tools::DoctorOptions doctorOptions;
  auto* doctor = ranklens::tools::addDoctorCommand(app, &doctorOptions);

  ranklens::tools::EstimateOptions estimateOptions;
  const auto estimateCommands = ranklens::tools::addEstimateCommands(app, &estimateOptions);

  auto* trace = app.add_subcommand("trace", "Inspect event logs");
  trace->require_subcommand(1);
  std::string summaryDir;
  bool summaryJson = false;
  auto* summary = trace->add_subcommand("summary", "Per rank: communicators and call signatures with counts/bytes");
  summary->add_option("dir", summaryDir, "Trace directory (or one rank<R> directory)")->required();
  summary->add_flag("--json", summaryJson, "Machine-readable output");
  ranklens::tools::WaitsOptions waitsOptions;
  auto* waits = ranklens::tools::addWaitsCommand(*trace, &waitsOptions);

  ranklens::tools::CompareOptions compareOptions;
  auto* compare = ranklens::tools::addCompareCommand(app, &compareOptions);
  ranklens::tools::ImportOptions importOptions;
  auto* importFr = ranklens::tools::addImportCommand(app, &importOptions);
  ranklens::tools::ExportOptions exportOptions;
  auto* exportFr = ranklens::tools::addExportCommand(app, &exportOptions);
  ranklens::tools::TimelineOptions timelineOptions;
  auto* timeline = ranklens::tools::addTimelineCommand(app, &timelineOptions);

  std::string configPath;
  bool markdown = false;
  auto* dump = app.add_subcommand("dump-config", "Show every setting: value, where it came from, default");
  dump->add_option("-c,--config", configPath, "YAML settings file (else RANKLENS_CONFIG)");
  dump->add_flag("--markdown", markdown, "Print the table of every setting (docs/config.md's) instead");

  if (!ranklens::tools::knownSubcommands(app, argc, argv)) return 2;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = ranklens::tools::reportParseError(app, e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (rp->parsed()) return runReplay(replay);
    if (record->parsed()) return ranklens::tools::runRecord(recordOptions);
    if (run->parsed()) return ranklens::tools::runRun(runOptions);
    if (doctor->parsed()) return ranklens::tools::runDoctor(doctorOptions);
    if (estimateCommands.build->parsed()) return ranklens::tools::runHistoryBuild(estimateOptions);
    if (estimateCommands.importNcclTests->parsed()) return ranklens::tools::runHistoryImportNcclTests(estimateOptions);
    if (estimateCommands.eval->parsed()) return ranklens::tools::runEstimateEval(estimateOptions);
    if (estimateCommands.query->parsed()) return ranklens::tools::runEstimateQuery(estimateOptions);
    if (summary->parsed()) return ranklens::tools::printTraceSummary(summaryDir, summaryJson, std::cout, std::cerr);
    if (waits->parsed()) return ranklens::tools::runWaits(waitsOptions);
    if (compare->parsed()) return ranklens::tools::runCompare(compareOptions, std::cout, std::cerr);
    if (importFr->parsed()) return ranklens::tools::runImport(importOptions, std::cout, std::cerr);
    if (exportFr->parsed()) return ranklens::tools::runExport(exportOptions, std::cout, std::cerr);
    if (timeline->parsed()) return ranklens::tools::runTimeline(timelineOptions, std::cerr);
    if (dump->parsed()) return runDumpConfig(configPath, markdown);
  } catch (const std::exception& e) {  // a bug, or a record that decodes into nonsense: say so, do not abort
    std::cerr << "error: internal error: " << e.what() << " (please report it with the command line)\n";
    return 1;
  }
  return 2;
}

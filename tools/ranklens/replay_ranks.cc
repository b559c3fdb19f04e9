// SPDX-License-Identifier: Apache-2.0
// `ranklens replay --trace T --ranks LIST -- program`: every listed rank of a recording replayed alone, each by its
// own `ranklens replay --rank R` (so that one rank's crash or hang cannot take the others with it), in turn or a few
// at once, then one line per rank. `--slurm FILE` writes the same per-rank command as a job array instead, and
// `--report` prints the table of replays already made (by the array) into --out.
//
// --out holds, per rank R: rank<R>/ (the replay's own trace), rank<R>.log (everything the replay printed: the
// launcher's report and the program's output), rank<R>.exit (its exit code, and whether other replays shared the GPU),
// rank<R>.compare.json (`ranklens compare` of recording and replay); and report.json, the table's numbers.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare.h"
#include "launch.h"
#include "ranklens/trace.h"
#include "replay_command.h"

extern char** environ;

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

volatile std::sig_atomic_t interrupted = 0;
void onInterrupt(int) { interrupted = 1; }

std::string selfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "ranklens";
  buf[n] = '\0';
  return buf;
}

// "all" (the recording's ranks) or "0,3,8-15"; each rank must have been recorded.
bool parseRanks(const std::string& spec, const std::set<int>& recorded, int worldSize, std::vector<int>* ranks,
                std::string* error) {
  if (spec == "all") {
    ranks->assign(recorded.begin(), recorded.end());
    if (worldSize > 0 && static_cast<int>(recorded.size()) < worldSize)
      std::cerr << "warning: the recording holds " << recorded.size() << " of its " << worldSize
                << " ranks: replaying those\n";
    return !ranks->empty() || (*error = "the recording holds no rank directory", false);
  }
  std::stringstream in(spec);
  std::string item;
  std::set<int> chosen;
  while (std::getline(in, item, ',')) {
    long lo = -1, hi = -1;
    char* end = nullptr;
    lo = std::strtol(item.c_str(), &end, 10);
    if (end != item.c_str() && *end == '-')
      hi = std::strtol(end + 1, &end, 10);
    else
      hi = lo;
    if (item.empty() || *end != '\0' || lo < 0 || hi < lo || hi > INT_MAX) {
      *error = "--ranks: '" + item + "' is not a rank or a range (e.g. all, 3, 0,2,5-7)";
      return false;
    }
    for (long r = lo; r <= hi; ++r) {
      if (!recorded.count(static_cast<int>(r))) {
        *error = "--ranks: rank " + std::to_string(r) + " is not in the recording (it holds " +
                 std::to_string(recorded.size()) + " rank directories" +
                 (recorded.empty()
                      ? std::string()
                      : ", ranks " + std::to_string(*recorded.begin()) + " to " + std::to_string(*recorded.rbegin())) +
                 ")";
        return false;
      }
      chosen.insert(static_cast<int>(r));
    }
  }
  ranks->assign(chosen.begin(), chosen.end());
  return !ranks->empty() || (*error = "--ranks: no rank given", false);
}

// What --ranks needs of the recording besides its ranks and world size: the device memory each rank took (for
// --parallel auto).
struct RecordedRank {
  uint64_t deviceBytesUsed = 0;  // 0: unknown
};

bool readRecording(const std::string& trace, int* worldSize, std::map<int, RecordedRank>* ranks, std::string* error) {
  for (const std::string& dir : trace::rankDirectories(trace)) {
    std::string why;
    std::unique_ptr<trace::TraceReader> reader;
    why = trace::TraceReader::open(dir, trace::Limits{}, &reader).message();
    if (!reader) {
      *error = dir + ": " + why;
      return false;
    }
    const trace::Manifest& m = reader->manifest();
    if (m.rank < 0) continue;
    RecordedRank& r = (*ranks)[m.rank];
    const auto total = trace::counterValue(m, trace::counter::kDeviceMemoryTotal);
    const auto leastFree = trace::counterValue(m, trace::counter::kDeviceMemoryLeastFree);
    if (total && leastFree && *total > *leastFree) r.deviceBytesUsed = *total - *leastFree;
    if (m.world_size > 0) *worldSize = m.world_size;
  }
  if (ranks->empty()) {
    *error = trace + " holds no recorded rank (rank<R>/ directories with a manifest)";
    return false;
  }
  return true;
}

// --parallel auto: as many replays as fit in this GPU's memory by the most any rank took while recorded (a shared
// GPU's recording counts the other ranks too, so this errs towards fewer), and no more than a replay per four cores
// (each decodes payloads on worker threads).
int autoParallel(const std::map<int, RecordedRank>& recorded, size_t ranks) {
  uint64_t need = 0;
  for (const auto& [rank, r] : recorded) need = std::max(need, r.deviceBytesUsed);
  const uint64_t have = gpuMemoryBytes();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency() / 4));
  int n = 1;
  if (need > 0 && have > 0) n = static_cast<int>(std::max<uint64_t>(1, have * 9 / 10 / need));
  n = std::min({n, cores, static_cast<int>(ranks)});
  std::cerr << "ranklens: --parallel auto: " << n << " replays at once ("
            << (need && have ? "a rank took " + std::to_string(need >> 20) + " MiB while recorded, the GPU has " +
                                   std::to_string(have >> 20) + " MiB"
                             : std::string("the recording does not say how much GPU memory a rank took"))
            << ", " << std::thread::hardware_concurrency() << " cores)\n";
  return n;
}

// ------------------------------------------------------------------------------------------------ running

struct Running {
  int rank;
  pid_t pid;
  std::chrono::steady_clock::time_point start;
  bool terminated = false;
};

pid_t spawnRank(const std::vector<std::string>& args, const std::string& logPath, std::string* error) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, logPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: a timeout or Ctrl-C stops the rank's whole process tree.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &files, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    *error = std::string("cannot start ") + argv[0] + ": " + strerror(rc);
    return -1;
  }
  return pid;
}

void writeExitFile(const std::string& out, int rank, int exitCode, double seconds, bool concurrent) {
  std::ofstream(out + "/rank" + std::to_string(rank) + ".exit")
      << json{{"exit", exitCode}, {"seconds", std::round(seconds * 10) / 10}, {"concurrent", concurrent}}.dump()
      << "\n";
}

int exitCodeOf(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// ------------------------------------------------------------------------------------------------ report

struct RankResult {
  int rank = -1;
  std::optional<int> exitCode;
  bool concurrent = false;
  double seconds = -1;
  uint64_t recordedCalls = 0, matchedCalls = 0;
  bool compared = false, diverged = false, match = false;
  std::string divergence, stepError, digest, problem;
};

std::string lastDigest(const std::string& logPath, const std::string& prefix) {
  std::ifstream in(logPath);
  std::string line, digest;
  while (std::getline(in, line))
    if (!prefix.empty() && line.compare(0, prefix.size(), prefix) == 0) {
      digest = line.substr(prefix.size());
      digest.erase(0, digest.find_first_not_of(" :=\t"));
    }
  return digest;
}

std::string percent(double v) {
  std::ostringstream s;
  s << std::showpos << std::fixed << std::setprecision(2) << v * 100 << "%";
  return s.str();
}

// The step-time error where it says something about the replay, else why not (compare's own judgement, and
// whether other replays shared the GPU).
std::string judgeStepTime(const json& c, const RankResult& r) {
  const json& judged = c["step_time_comparable"];
  if (judged.is_object() && !judged.value("comparable", true) && !judged["reasons"].empty())
    return "n/a: " + judged["reasons"][0].value("brief", "not comparable");
  if (r.concurrent) return "n/a: replays shared the GPU";
  const json& median = c["steps"]["median_relative_error"];
  if (!median.is_number()) return "n/a: no steps compared";
  return percent(median.get<double>());
}

RankResult resultOf(const ReplayOptions& o, int rank) {
  RankResult r;
  r.rank = rank;
  const std::string base = o.out + "/rank" + std::to_string(rank);
  if (std::ifstream exitFile(base + ".exit"); exitFile) {
    const json e = json::parse(exitFile, nullptr, false);
    if (e.is_object() && e.contains("exit") && e["exit"].is_number_integer()) {
      r.exitCode = e["exit"].get<int>();
      r.concurrent = e.value("concurrent", false);
      r.seconds = e.value("seconds", -1.0);
    }
  }
  r.digest = lastDigest(base + ".log", o.digestPrefix);
  if (!r.exitCode) {
    r.problem = "not run (no " + base + ".exit)";
    return r;
  }
  if (!trace::holdsTrace(base)) {
    r.problem = "no replay trace (" + base + "/): see " + base + ".log";
    return r;
  }
  CompareOptions compare;
  compare.recorded = o.trace;
  compare.replayed = o.out;
  compare.rank = rank;
  compare.quiet = true;
  compare.jsonPath = base + ".compare.json";
  std::ostringstream ignored, errors;
  if (runCompare(compare, ignored, errors) == 2) {
    r.problem = "comparison failed: " + errors.str();
    return r;
  }
  std::ifstream in(compare.jsonPath);
  const json c = json::parse(in, nullptr, false);
  if (!c.is_object()) {
    r.problem = "comparison unreadable: " + compare.jsonPath;
    return r;
  }
  r.compared = true;
  r.match = c.value("match", false);
  r.recordedCalls = c["signatures"]["raw"].value("recorded_calls", 0ull);
  r.matchedCalls = c["signatures"]["raw"].value("matched_calls", 0ull);
  if (const json& d = c["first_divergence"]; d.is_object()) {
    r.diverged = true;
    const json& rec = d["recorded"];
    const json& rep = d["replayed"];
    std::ostringstream s;
    s << "comm #" << d.value("recorded_comm", -1) << " " << d.value("sequence", "") << " call "
      << d.value("position", -1) << ": recorded "
      << (rec.is_object() ? rec.value("op", "?") + " " + std::to_string(rec.value("count", 0ull)) : "nothing")
      << ", replayed "
      << (rep.is_object() ? rep.value("op", "?") + " " + std::to_string(rep.value("count", 0ull)) : "nothing");
    r.divergence = s.str();
  }
  r.stepError = judgeStepTime(c, r);
  return r;
}

bool passed(const RankResult& r) {
  return r.problem.empty() && r.exitCode == 0 && r.compared && r.match && r.matchedCalls == r.recordedCalls;
}

void printLine(const RankResult& r, std::ostream& out) {
  out << std::left << std::setw(6) << r.rank << std::setw(6)
      << (r.exitCode ? std::to_string(*r.exitCode) : std::string("-"));
  if (!r.problem.empty()) {
    out << r.problem << (r.digest.empty() ? "" : "; digest " + r.digest) << "\n" << std::right;
    return;
  }
  std::ostringstream calls;
  calls << r.matchedCalls << "/" << r.recordedCalls;
  if (r.recordedCalls > 0)
    calls << " (" << std::fixed << std::setprecision(r.matchedCalls == r.recordedCalls ? 0 : 1)
          << 100.0 * static_cast<double>(r.matchedCalls) / static_cast<double>(r.recordedCalls) << "%)";
  out << std::setw(20) << calls.str() << std::setw(12) << (r.diverged ? "yes" : "none") << std::setw(32) << r.stepError
      << (r.digest.empty() ? "-" : r.digest) << "\n";
  if (r.diverged) out << "      first divergence: " << r.divergence << "\n";
  out << std::right;
}

void printHeader(std::ostream& out) {
  out << std::left << std::setw(6) << "rank" << std::setw(6) << "exit" << std::setw(20) << "calls matched"
      << std::setw(12) << "diverged" << std::setw(32) << "step-time error"
      << "digest\n"
      << std::right;
}

int report(const ReplayOptions& o, const std::vector<int>& ranks) {
  std::vector<RankResult> results;
  for (int rank : ranks) results.push_back(resultOf(o, rank));
  std::cout << "\nReplays of " << o.trace << " (" << results.size() << " ranks; logs and traces in " << o.out << "):\n";
  printHeader(std::cout);
  json rows = json::array();
  size_t ok = 0;
  for (const RankResult& r : results) {
    printLine(r, std::cout);
    ok += passed(r);
    rows.push_back({{"rank", r.rank},
                    {"exit", r.exitCode ? json(*r.exitCode) : json(nullptr)},
                    {"recorded_calls", r.recordedCalls},
                    {"matched_calls", r.matchedCalls},
                    {"first_divergence", r.diverged ? json(r.divergence) : json(nullptr)},
                    {"step_time_error", r.stepError},
                    {"digest", r.digest.empty() ? json(nullptr) : json(r.digest)},
                    {"seconds", r.seconds},
                    {"problem", r.problem.empty() ? json(nullptr) : json(r.problem)},
                    {"pass", passed(r)}});
  }
  std::set<std::string> digests;
  for (const RankResult& r : results)
    if (!r.digest.empty()) digests.insert(r.digest);
  std::cout << ok << " of " << results.size()
            << " ranks replayed with exit code 0, every recorded call matched and nothing diverged";
  if (!digests.empty()) std::cout << "; " << digests.size() << " distinct digest(s)";
  std::cout << "\n";
  std::ofstream(o.out + "/report.json")
      << json{{"trace", o.trace}, {"out", o.out}, {"ranks", rows}, {"pass", ok == results.size()}}.dump(2) << "\n";
  return ok == results.size() ? 0 : 1;
}

// ------------------------------------------------------------------------------------------------ Slurm

int writeSlurm(const ReplayOptions& o, const std::vector<int>& ranks, int parallel) {
  const std::string ranksFile = o.out + "/ranks.txt";
  {
    std::ofstream list(ranksFile);
    for (int r : ranks) list << r << "\n";
    if (!list.flush()) {
      std::cerr << "error: cannot write " << ranksFile << "\n";
      return 2;
    }
  }
  std::vector<std::string> args = oneRankArguments(o, "$RANK", o.out);
  std::string command = quote(selfExecutable());
  for (const auto& a : args) command += " " + (a == "$RANK" ? std::string("\"$RANK\"") : quote(a));
  std::ofstream script(o.slurm);
  script << "#!/bin/bash\n"
         << "# Replays the recording " << o.trace << " one rank per array task, each alone on one GPU.\n"
         << "# Written by `ranklens replay --ranks " << o.ranks << " --slurm`. Submit it with: sbatch " << o.slurm
         << "\n# When every task has ended, print the table (exit codes, calls matched, divergence, digests):\n"
         << "#   " << quote(selfExecutable()) << " replay --trace " << quote(o.trace) << " --ranks " << quote(o.ranks)
         << " --out " << quote(o.out) << " --report\n"
         << "# Slurm's MaxArraySize (1001 by default) bounds the array: split longer rank lists with --ranks.\n"
         << "#SBATCH --job-name=ranklens-replay\n"
         << "#SBATCH --array=0-" << ranks.size() - 1 << "%" << parallel << "\n"
         << "#SBATCH --ntasks=1\n"
         << "#SBATCH --gres=gpu:1\n"
         << "#SBATCH --output=" << o.out << "/slurm-%A_%a.out\n"
         << "set -u\n"
         << "RANK=$(sed -n \"$((SLURM_ARRAY_TASK_ID + 1))p\" " << quote(ranksFile) << ")\n"
         << "cd " << quote(fs::current_path().string()) << "\n"
         << "start=$(date +%s)\n"
         << command << " > " << quote(o.out) << "/rank\"$RANK\".log 2>&1\n"
         << "status=$?\n"
         << "printf '{\"exit\": %d, \"seconds\": %d, \"concurrent\": false}\\n' \"$status\" \"$(( $(date +%s) - start "
            "))\" > "
         << quote(o.out) << "/rank\"$RANK\".exit\n"
         << "exit $status\n";
  if (!script.flush()) {
    std::cerr << "error: cannot write " << o.slurm << "\n";
    return 2;
  }
  chmod(o.slurm.c_str(), 0755);
  std::cout << "Wrote " << o.slurm << ": a job array of " << ranks.size() << " tasks (at most " << parallel
            << " at once), one rank each, output in " << o.out << ".\n"
            << "Submit it: sbatch " << o.slurm << "\n"
            << "Then: ranklens replay --trace " << o.trace << " --ranks " << o.ranks << " --out " << o.out
            << " --report\n";
  return 0;
}

// ------------------------------------------------------------------------------------------------ local

int runLocally(const ReplayOptions& o, const std::vector<int>& ranks, int parallel) {
  const std::string self = selfExecutable();
  // Each replay of a Python job picks a free port for its lone rank's store; a MASTER_PORT from the environment
  // would give replays running at once the same one.
  if (parallel > 1 && getenv("MASTER_PORT") != nullptr) unsetenv("MASTER_PORT");
  struct sigaction stop {};
  stop.sa_handler = onInterrupt;
  sigaction(SIGINT, &stop, nullptr);
  sigaction(SIGTERM, &stop, nullptr);
  std::vector<Running> running;
  size_t next = 0, done = 0;
  const auto timeout = std::chrono::duration<double>(o.rankTimeoutSeconds);
  std::cerr << "ranklens: replaying " << ranks.size() << " rank(s) of " << o.trace << ", " << parallel
            << " at a time; logs in " << o.out << "\n";
  while ((next < ranks.size() || !running.empty())) {
    while (!interrupted && next < ranks.size() && static_cast<int>(running.size()) < parallel) {
      const int rank = ranks[next++];
      std::vector<std::string> args = oneRankArguments(o, std::to_string(rank), o.out);
      args.insert(args.begin(), self);
      std::string error;
      const pid_t pid = spawnRank(args, o.out + "/rank" + std::to_string(rank) + ".log", &error);
      if (pid < 0) {
        std::cerr << "error: rank " << rank << ": " << error << "\n";
        writeExitFile(o.out, rank, 127, 0, false);
        ++done;
        continue;
      }
      running.push_back({rank, pid, std::chrono::steady_clock::now()});
    }
    if (interrupted) {
      for (const Running& r : running) kill(-r.pid, SIGTERM);
    }
    for (size_t i = 0; i < running.size();) {
      Running& r = running[i];
      int status = 0;
      const pid_t got = waitpid(r.pid, &status, WNOHANG);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      if (got == r.pid) {
        const int exitCode = r.terminated ? 124 : exitCodeOf(status);
        writeExitFile(o.out, r.rank, exitCode, seconds, parallel > 1);
        ++done;
        std::cerr << "ranklens: [" << done << "/" << ranks.size() << "] rank " << r.rank << " exited with status "
                  << exitCode << " after " << std::fixed << std::setprecision(1) << seconds << " s"
                  << (r.terminated ? " (stopped at --rank-timeout)" : "") << std::defaultfloat << "\n";
        running.erase(running.begin() + static_cast<long>(i));
        continue;
      }
      if (o.rankTimeoutSeconds > 0 && !r.terminated && seconds > timeout.count()) {
        kill(-r.pid, SIGTERM);
        r.terminated = true;
      } else if (r.terminated && seconds > timeout.count() + 10) {
        kill(-r.pid, SIGKILL);
      }
      ++i;
    }
    if (!running.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (interrupted && running.empty()) break;
  }
  if (interrupted) {
    std::cerr << "ranklens: interrupted; " << done << " of " << ranks.size() << " ranks replayed\n";
    return 130;
  }
  return -1;  // go on to the report
}

}  // namespace

std::vector<std::string> oneRankArguments(const ReplayOptions& o, const std::string& rank,
                                          const std::string& traceDir) {
  std::vector<std::string> args = {"replay", "--trace", o.trace, "--rank", rank, "--trace-dir", traceDir};
  auto add = [&](const char* flag, const std::string& value) {
    if (!value.empty()) args.insert(args.end(), {flag, value});
  };
  add("--config", o.config.empty() ? "" : fs::absolute(o.config).string());
  add("--fill", o.fill);
  add("--device", o.device);
  add("--groups", o.groups);
  add("--mesh", o.mesh);
  add("--mesh-colors", o.meshColors);
  add("--fidelity", o.fidelity);
  add("--on-mismatch", o.onMismatch);
  add("--history", o.history.empty() ? "" : fs::absolute(o.history).string());
  add("--lib", o.lib.empty() ? "" : fs::absolute(o.lib).string());
  if (o.override != "both") add("--override", o.override);
  if (o.noPythonAdapter) args.push_back("--no-python-adapter");
  args.push_back("--");
  args.insert(args.end(), o.command.begin(), o.command.end());
  return args;
}

int runReplayRanks(const ReplayOptions& o) {
  if (o.trace.empty()) {
    std::cerr << "error: --ranks replays ranks of a recording: give --trace DIR (the directory `ranklens record` "
                 "wrote)\n";
    return 2;
  }
  if (o.command.empty() && !o.reportOnly) {
    std::cerr << "error: no program to run: give it after --, e.g. ranklens replay --trace DIR --ranks all -- "
                 "python3 train.py\n";
    return 2;
  }
  if (o.reportOnly && o.out.empty()) {
    std::cerr << "error: --report prints the table of replays made into --out DIR: give --out\n";
    return 2;
  }
  if (o.worldSize > 0 || !o.traceDir.empty() || o.noEvents) {
    std::cerr << "error: with --ranks, each rank's world size is the recording's and its events go to --out; "
                 "drop --world-size, --trace-dir and --no-events\n";
    return 2;
  }
  int worldSize = -1;
  std::map<int, RecordedRank> recorded;
  std::string error;
  if (!readRecording(o.trace, &worldSize, &recorded, &error)) {
    std::cerr << "error: --trace " << error << "\n";
    return 2;
  }
  std::set<int> have;
  for (const auto& [rank, r] : recorded) have.insert(rank);
  std::vector<int> ranks;
  if (!parseRanks(o.ranks.empty() ? "all" : o.ranks, have, worldSize, &ranks, &error)) {
    std::cerr << "error: " << error << "\n";
    return 2;
  }
  int parallel = 1;
  if (o.parallel == "auto") {
    parallel = o.reportOnly ? 1 : autoParallel(recorded, ranks.size());
  } else {
    char* end = nullptr;
    const long n = std::strtol(o.parallel.c_str(), &end, 10);
    if (o.parallel.empty() || *end != '\0' || n < 1 || n > 4096) {
      std::cerr << "error: --parallel " << o.parallel << ": a number from 1, or auto\n";
      return 2;
    }
    parallel = static_cast<int>(n);
  }
  ReplayOptions resolved = o;
  resolved.trace = fs::absolute(o.trace).lexically_normal().string();
  if (resolved.out.empty()) {
    const char* tmp = getenv("TMPDIR");
    resolved.out = freshDirectoryName(tmp && *tmp ? tmp : "/tmp", "ranklens-replays");
  }
  resolved.out = fs::absolute(resolved.out).lexically_normal().string();
  if (o.reportOnly) return report(resolved, ranks);
  std::error_code ec;
  fs::create_directories(resolved.out, ec);
  if (ec) {
    std::cerr << "error: --out " << resolved.out << ": " << ec.message() << "\n";
    return 2;
  }
  for (int rank : ranks)
    if (trace::holdsTrace(resolved.out + "/rank" + std::to_string(rank))) {
      std::cerr << "error: --out " << resolved.out << " already holds a replay of rank " << rank
                << "; choose a new directory (or --report to print its table)\n";
      return 2;
    }
  if (!o.slurm.empty()) return writeSlurm(resolved, ranks, parallel);
  if (const int stopped = runLocally(resolved, ranks, parallel); stopped >= 0) return stopped;
  return report(resolved, ranks);
}

}  // namespace tools
}  // namespace ranklens

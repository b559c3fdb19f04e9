// SPDX-License-Identifier: Apache-2.0
#include "record_command.h"

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>

#include "launch.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;

namespace {
constexpr const char* kShareGpuHelp =
    "Let the job's ranks share this machine's GPU(s): each process gets its own NCCL_HOSTID (NCCL then accepts "
    "several ranks on one GPU and connects them over sockets on the loopback interface) and LOCAL_RANK is mapped "
    "onto the GPUs there are (local rank % GPUs), so scripts that call torch.cuda.set_device(LOCAL_RANK) run "
    "unchanged. Values and calls are a real run's; step times are not a lone rank's (the ranks share the SMs)";

// --share-gpu for record and run: the environment, or false with the error printed.
bool addShareGpu(const std::string& lib, bool quiet, std::map<std::string, std::string>* env) {
  std::string summary;
  if (Status shared = shareGpus(lib, env, &summary); !shared.isOk()) {
    std::cerr << "error: " << shared.message() << "\n";
    return false;
  }
  if (!quiet) std::cerr << "ranklens: " << summary << "\n";
  return true;
}
}  // namespace

CLI::App* addRecordCommand(CLI::App& app, RecordOptions* o) {
  auto* cmd = app.add_subcommand(
      "record", "Run a job with every rank recording its NCCL calls, GPU durations and payloads to --trace");
  cmd->add_option("-t,--trace", o->trace,
                  "Trace directory; each rank writes <trace>/rank<RANK>/ (default: ./ranklens-trace-<time>-<pid>)");
  cmd->add_option("-p,--payloads", o->payloads,
                  "Received buffers to store: none (timing only), small (<= payload_max_bytes, default), all")
      ->check(CLI::IsMember({"none", "small", "all"}));
  cmd->add_option("--timing-clock", o->timingClock,
                  "Where each call's GPU duration comes from (RANKLENS_TIMING_CLOCK): events (CUDA events around the "
                  "call, default) or kernel (NCCL's own kernel timestamps through its profiler plugin interface: "
                  "kernel time exactly, no events on the calling thread; NCCL then profiles every call)")
      ->check(CLI::IsMember({"events", "kernel"}));
  cmd->add_option("-c,--config", o->config, "YAML settings file (RANKLENS_CONFIG)")->check(CLI::ExistingFile);
  cmd->add_option("--real-nccl", o->realNccl,
                  "The real libnccl.so.2 to forward to (RANKLENS_REAL_NCCL; default: discovered, docs/config.md)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--lib", o->lib, "RankLens libnccl.so.2 to use (default: the one installed beside ranklens)");
  cmd->add_option("--override", o->override,
                  "How the job is made to load RankLens: LD_PRELOAD (pip-wheel PyTorch needs it), LD_LIBRARY_PATH "
                  "(programs linked without RPATH), or both")
      ->check(CLI::IsMember({"preload", "library-path", "both"}));
  cmd->add_flag("-q,--quiet", o->quiet, "No launcher messages and no per-rank report");
  cmd->add_flag("--share-gpu", o->shareGpu, kShareGpuHelp);
  cmd->add_option("command", o->command, "The launcher or program and its arguments (after --)")->required();
  cmd->footer(
      "The environment reaches every process the command starts on this machine (torchrun, mpirun on one node,\n"
      "a plain program). mpirun across nodes: export the variables (-x LD_PRELOAD -x RANKLENS_MODE\n"
      "-x RANKLENS_TRACE_DIR ...); Slurm's srun passes the environment by default.\n"
      "Examples:\n"
      "  ranklens record --trace /scratch/run42 -- torchrun --nproc-per-node 8 train.py\n"
      "  ranklens record --share-gpu --trace /tmp/run4 --payloads all -- torchrun --nproc-per-node 4 train.py\n"
      "  ranklens record --trace /scratch/run42 --payloads all -- torchrun --nproc-per-node 2 train.py\n"
      "  ranklens record --trace /scratch/nt --real-nccl /usr/lib/x86_64-linux-gnu/libnccl.so.2 -- "
      "./all_reduce_perf -g 2 -c 1\n"
      "Then: ranklens replay --trace /scratch/run42 --rank R -- <the same script>");
  return cmd;
}

namespace {

// Compression threads busier than this while they had payloads to work on are taken as what bound a recording: held
// back by something before them (the writer's queue) they are busy about half that time, bound themselves most of it.
constexpr double kThreadsBoundShare = 0.75;

// One line per rank directory: what the manifest says was written, and whether the writer closed it; then what to
// change where staging lost payloads or held the job back.
void reportRanks(const std::string& traceDir) {
  uint64_t skippedFull = 0, tooLarge = 0, waitNs = 0;
  trace::CompressionLoad busiest;  // of the ranks that waited for staging or skipped payloads for a full one
  const std::vector<std::string> ranks = trace::rankDirectories(traceDir);
  if (ranks.empty()) {
    std::cerr << "ranklens: no rank wrote a trace under " << traceDir
              << ": did the job call NCCL? Was RankLens loaded (ranklens doctor; LD_PRELOAD for pip-wheel PyTorch)?\n";
    return;
  }
  std::cout << "\nRecorded " << ranks.size() << " rank(s) under " << traceDir << ":\n";
  for (const auto& rankDir : ranks) {
    const fs::path dir(rankDir);
    std::string error;
    std::unique_ptr<trace::TraceReader> reader;
    error = trace::TraceReader::open(rankDir, trace::Limits{}, &reader).message();
    if (!reader) {
      std::cout << "  " << dir.filename().string() << ": unreadable: " << error << "\n";
      continue;
    }
    const trace::Manifest& m = reader->manifest();
    std::cout << "  " << std::left << std::setw(8) << dir.filename().string() << " " << m.records_written
              << " records, " << m.payloads_written << " payloads (" << m.payload_compressed_bytes / (1 << 20)
              << " MiB on disk)";
    if (m.records_dropped || m.payloads_dropped)
      std::cout << ", DROPPED " << m.records_dropped << " records / " << m.payloads_dropped << " payloads";
    namespace shown = trace::counter;
    auto counterOf = [&](const char* name) { return trace::counterValue(m, name).value_or(0); };
    for (const char* counter :
         {shown::kPayloadsSkippedStagingFull, shown::kPayloadsSkippedTooLarge, shown::kTimingErrors,
          shown::kKernelClockUnmatched, shown::kKernelClockIncomplete, shown::kCallsUnrecorded})
      if (const uint64_t n = counterOf(counter); n > 0) std::cout << ", " << counter << " " << n;
    const uint64_t rankSkippedFull = counterOf(shown::kPayloadsSkippedStagingFull);
    const uint64_t rankWaitNs = counterOf(shown::kStagingWaitNs);
    skippedFull += rankSkippedFull;
    tooLarge += counterOf(shown::kPayloadsSkippedTooLarge);
    if (rankWaitNs > 0) {
      std::cout << ", waited " << std::fixed << std::setprecision(1) << rankWaitNs / 1e6 << " ms for staging";
      std::cout.unsetf(std::ios_base::floatfield);
      waitNs += rankWaitNs;
    }
    if (const trace::CompressionLoad load = trace::compressionLoad(m);
        load.known && (rankWaitNs > 0 || rankSkippedFull > 0) && load.busyShare > busiest.busyShare)
      busiest = load;
    if (!m.closed) std::cout << ", NOT CLOSED (the process died: complete records are kept, counters may be stale)";
    std::cout << "\n";
  }
  if (tooLarge > 0)
    std::cout << "  " << tooLarge
              << " payloads were larger than all of staging (staging_bytes): " << trace::advice::kStagingTooSmall
              << "\n";
  if (skippedFull > 0)
    std::cout << "  " << skippedFull
              << " payloads did not fit in staging (pinned memory, staging_bytes): " << trace::advice::kStagingFull
              << "\n";
  // Staging absorbs bursts; when the compression threads were busy most of the time they had payloads, they bound
  // the recording (GPT-2 small DDP: about ten steps absorbed, then 1.7-2.7x the job's step time).
  if (busiest.busyShare >= kThreadsBoundShare) {
    std::cout << "  the " << busiest.threads << " compression threads were busy " << std::fixed << std::setprecision(0)
              << 100 * busiest.busyShare << "% of the time they had payloads";
    if (busiest.cpuSecondsPerGB > 0)  // compressionLoad leaves it out for too few bytes to make a rate
      std::cout << " (" << std::setprecision(2) << busiest.cpuSecondsPerGB << " CPU-s per GB of payload)";
    std::cout << ": they, not staging, bound a long recording; give them free cores (RANKLENS_PAYLOAD_THREADS) or "
              << "store fewer steps (RANKLENS_PAYLOAD_STEPS)\n"
              << std::defaultfloat;
  } else if (skippedFull == 0 && waitNs > 0)
    std::cout << "  the job waited for room in staging to keep every payload: a larger RANKLENS_STAGING_BYTES "
              << "shortens the wait\n";
}

}  // namespace

int runRecord(const RecordOptions& o) {
  std::string lib;
  if (Status usable = usableLibrary(o.lib, &lib); !usable.isOk()) {
    std::cerr << "error: " << usable.message() << "\n";
    return 2;
  }
  const std::string traceDir =
      fs::absolute(o.trace.empty() ? freshDirectoryName(".", "ranklens-trace") : o.trace).lexically_normal();
  if (const std::vector<std::string> held = trace::rankDirectories(traceDir); !held.empty()) {
    std::cerr << "error: --trace " << traceDir << " already holds a recording ("
              << fs::path(held[0]).filename().string() << "); choose a new directory\n";
    return 2;
  }
  std::map<std::string, std::string> env = {{"RANKLENS_MODE", "record"}, {"RANKLENS_TRACE_DIR", traceDir}};
  if (!o.payloads.empty()) env["RANKLENS_PAYLOADS"] = o.payloads;
  if (!o.timingClock.empty()) env["RANKLENS_TIMING_CLOCK"] = o.timingClock;
  if (!o.config.empty()) env["RANKLENS_CONFIG"] = fs::absolute(o.config).string();
  if (!o.realNccl.empty()) env["RANKLENS_REAL_NCCL"] = fs::absolute(o.realNccl).string();
  pointAtLibrary(lib, o.override, &env);
  if (o.shareGpu && !addShareGpu(lib, o.quiet, &env)) return 2;
  if (const std::string adapter = findPythonAdapter(); !adapter.empty())
    enablePythonAdapter(adapter, false, &env);  // optimizer-step markers in every rank's trace
  config::Settings settings;
  if (!checkSettings(env, &settings).isOk()) return 2;
  if (!o.quiet)
    std::cerr << "ranklens: recording (payloads " << config::toString(settings.payloads) << ", timing clock "
              << config::toString(settings.timing_clock) << ") to " << traceDir << " with " << lib << "\n";
  const int exitCode = runCommand(env, o.command);
  if (!o.quiet) {
    std::cerr << "ranklens: " << o.command[0] << " exited with status " << exitCode << "\n";
    reportRanks(traceDir);
  }
  return exitCode;
}

CLI::App* addRunCommand(CLI::App& app, RunOptions* o) {
  auto* cmd = app.add_subcommand("run",
                                 "Run a job on the real NCCL with its ranks sharing this machine's GPU(s) "
                                 "(--share-gpu), recording nothing: a multi-rank test on one GPU");
  cmd->add_flag("--share-gpu", o->shareGpu, kShareGpuHelp)->required();
  cmd->add_option("--lib", o->lib,
                  "RankLens's libnccl.so.2, beside which the placement library is found (default: "
                  "the one installed beside ranklens); the job itself runs on its own NCCL");
  cmd->add_flag("-q,--quiet", o->quiet, "No launcher messages");
  cmd->add_option("command", o->command, "The launcher or program and its arguments (after --)")->required();
  cmd->footer(
      "Examples:\n"
      "  ranklens run --share-gpu -- torchrun --standalone --nproc-per-node 4 train.py\n"
      "  ranklens run --share-gpu -- mpirun -np 8 ./all_reduce_perf -b 8 -e 1M -g 1 -c 1\n"
      "Then record the same command: ranklens record --share-gpu --trace DIR -- <the command>");
  return cmd;
}

int runRun(const RunOptions& o) {
  const std::string lib = findLibrary(o.lib);
  if (lib.empty()) {
    std::cerr << "error: " << libraryNotFound() << "\n";
    return 2;
  }
  std::map<std::string, std::string> env;
  if (!addShareGpu(lib, o.quiet, &env)) return 2;
  const int exitCode = runCommand(env, o.command);
  if (!o.quiet) std::cerr << "ranklens: " << o.command[0] << " exited with status " << exitCode << "\n";
  return exitCode;
}

}  // namespace tools
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// `ranklens replay`: run a program as rank R of an N-rank world against virtual peers (replay_command.cc), or, with
// --ranks, every rank of a recording in turn (replay_ranks.cc).
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ranklens {
namespace tools {

struct ReplayOptions {
  int rank = -1, worldSize = -1;
  std::string lib, config, fill, device, groups, mesh, meshColors, traceDir, trace, fidelity, onMismatch, history,
      override = "both";
  bool noEvents = false, quiet = false, noPythonAdapter = false;
  std::vector<std::string> command;
  // --ranks: replay several ranks of --trace, each alone, and print one line per rank.
  std::string ranks;           // "all" or a list such as "0,3,8-15"
  std::string parallel = "1";  // replays at once: a number, or "auto" (as many as the GPU's memory holds)
  std::string out;             // per-rank logs, replay traces and report.json; default a fresh directory
  std::string slurm;           // write an sbatch job array to this file instead of running
  std::string digestPrefix = "RANKLENS_DIGEST";  // a program's line starting with this is its digest
  double rankTimeoutSeconds = 0;                 // 0: none
  bool reportOnly = false;                       // --report: the table of an earlier --out (after a Slurm array)
};

// The arguments after the program name for one rank's `ranklens replay` (what --ranks runs per rank and what the
// Slurm script runs per array task): the options of `o` that apply to one rank, then `--rank <rank>`, then
// `--trace-dir <traceDir>`, then `--` and the program.
std::vector<std::string> oneRankArguments(const ReplayOptions& o, const std::string& rank, const std::string& traceDir);

// Declares `ranklens replay` and its options (filled into `options` when parsed).
CLI::App* addReplayCommand(CLI::App& app, ReplayOptions* options);

// One rank (or, with --ranks, --report or --slurm, runReplayRanks): the program's exit code; 2 for bad usage before
// it starts; 1 when it exited 0 but its event log could not be written whole.
int runReplay(const ReplayOptions& o);

// --ranks: 0 when every replayed rank exited 0 with every recorded call matched and nothing diverged, 1 otherwise,
// 2 for bad usage.
int runReplayRanks(const ReplayOptions& o);

}  // namespace tools
}  // namespace ranklens

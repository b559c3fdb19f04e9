// SPDX-License-Identifier: Apache-2.0
// `ranklens record`: run a job (torchrun, mpirun, srun, a plain program) with RankLens's library in record mode, so
// that every rank the launcher starts writes <trace>/rank<R>/, then say what each rank wrote.
// `ranklens run --share-gpu`: run a job on the real NCCL with its ranks sharing this machine's GPUs (no recording).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ranklens {
namespace tools {

struct RecordOptions {
  std::string trace, payloads, timingClock, config, realNccl, lib, override = "both";
  bool quiet = false, shareGpu = false;
  std::vector<std::string> command;
};

CLI::App* addRecordCommand(CLI::App& app, RecordOptions* options);
int runRecord(const RecordOptions& options);

struct RunOptions {
  std::string lib;
  bool shareGpu = false, quiet = false;
  std::vector<std::string> command;
};

CLI::App* addRunCommand(CLI::App& app, RunOptions* options);
int runRun(const RunOptions& options);

}  // namespace tools
}  // namespace ranklens

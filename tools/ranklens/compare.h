// SPDX-License-Identifier: Apache-2.0
// `ranklens compare`: how closely a replayed rank reproduced a recorded one (communicators, call signatures, first
// divergence, step times, communication time).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <ostream>
#include <string>

namespace ranklens {
namespace tools {

struct CompareOptions {
  std::string recorded, replayed;  // rank directories, or trace roots (then `rank`, or exactly one rank inside)
  int rank = -1;
  int64_t warmupSteps = 5;
  uint64_t smallBytes = 65536;  // calls above this size are "training tensors"
  std::string jsonPath;         // "-": JSON on stdout instead of the table
  bool quiet = false;
};

CLI::App* addCompareCommand(CLI::App& app, CompareOptions* options);
// 0: every call signature matched and nothing diverged; 1: they differ; 2: a trace cannot be read.
int runCompare(const CompareOptions& options, std::ostream& out, std::ostream& err);

}  // namespace tools
}  // namespace ranklens

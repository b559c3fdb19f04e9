// SPDX-License-Identifier: Apache-2.0
// `ranklens trace waits`: in a recorded job, how long each rank waited for its peers in the collectives, per step,
// and which rank the others wait for.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace ranklens {
namespace tools {

struct WaitsOptions {
  std::string dir;
  std::string json;
  int warmupSteps = 5;
};

CLI::App* addWaitsCommand(CLI::App& trace, WaitsOptions* options);
int runWaits(const WaitsOptions& options);

}  // namespace tools
}  // namespace ranklens

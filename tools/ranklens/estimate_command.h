// SPDX-License-Identifier: Apache-2.0
// `ranklens history build` (collect duration samples from recorded runs) and `ranklens estimate eval|query` (how
// well the estimator predicts them; one estimate).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ranklens {
namespace tools {

struct EstimateOptions {
  std::vector<std::string> traces;
  std::string output, history, json, op = "AllReduce";
  bool append = false;
  int neighbours = 8;
  double maxDistance = 1.0;
  uint64_t bytes = 0;
  int nranks = 2;
  bool crossesNodes = false;
  std::string role;
  int stepOccurrence = -1;  // query --step-occurrence; -1: not given
  double stepPhase = -1;    // query --step-phase; -1: not given
  std::string target;  // transfer | observed; empty: transfer, or observed when the history has no transfer times
};

struct EstimateCommands {
  CLI::App* build = nullptr;
  CLI::App* eval = nullptr;
  CLI::App* query = nullptr;
};
EstimateCommands addEstimateCommands(CLI::App& app, EstimateOptions* options);
int runHistoryBuild(const EstimateOptions& options);
int runEstimateEval(const EstimateOptions& options);
int runEstimateQuery(const EstimateOptions& options);

}  // namespace tools
}  // namespace ranklens

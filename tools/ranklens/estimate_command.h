// SPDX-License-Identifier: Apache-2.0
// `ranklens history build` (collect duration samples from recorded runs), `ranklens history import-nccl-tests`
// (samples from the cluster's nccl-tests output) and `ranklens estimate eval|query` (how well the estimator predicts
// them, or another history's; one estimate).
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
  std::string target;       // transfer | observed; empty: transfer, or observed when the history has no transfer times
  std::string against;      // eval --against: the history whose samples are estimated from --history
  std::vector<std::string> logs;  // import-nccl-tests
  std::string importOp;
  int importNranks = -1, importRanksPerNode = -1;
};

struct EstimateCommands {
  CLI::App* build = nullptr;
  CLI::App* importNcclTests = nullptr;
  CLI::App* eval = nullptr;
  CLI::App* query = nullptr;
};
EstimateCommands addEstimateCommands(CLI::App& app, EstimateOptions* options);
int runHistoryBuild(const EstimateOptions& options);
int runHistoryImportNcclTests(const EstimateOptions& options);
int runEstimateEval(const EstimateOptions& options);
int runEstimateQuery(const EstimateOptions& options);

}  // namespace tools
}  // namespace ranklens

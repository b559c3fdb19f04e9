// SPDX-License-Identifier: Apache-2.0
// Duration samples from nccl-tests output (`ranklens history import-nccl-tests`): the benchmark every cluster runs
// at acceptance, often at the full scale that was never recorded. Each result row of each test becomes two samples
// (out-of-place and in-place time) of the communicator the device list describes: its size, and whether it spans
// nodes (more than one host). These are transfer times with nothing computed beside them (HistorySample::benchmark):
// they give the estimator the cluster's bandwidth across nodes, which a one-node recording cannot.
#pragma once

#include <string>
#include <vector>

#include "ranklens/estimator.h"

namespace ranklens {
namespace timing {

struct NcclTestsOptions {
  // For output without its header (a pasted table, nccl-tests older than 2.x's "Collective test starting"):
  std::string op;         // events::opName ("AllReduce", ...) of a test without its name (a named test's is its own)
  int nranks = -1;        // communicator size of a test without its device list ("#  Rank  N ... on HOST ...")
  int ranksPerNode = -1;  // -1: the most ranks listed on one host
};

// One test of the output, as imported.
struct NcclTestsRun {
  std::string test;  // "all_reduce_perf"
  int line = 0;      // where it starts (1-based)
  int op = 0;        // events::Op
  int nranks = 0, nodes = 0, ranksPerNode = 0;
  bool crossesNodes = false;
  size_t rows = 0;                      // result rows read
  size_t samples = 0;                   // samples added
  size_t rowsWrong = 0;                 // rows left out: nccl-tests found wrong results (#wrong > 0)
  size_t rowsEmpty = 0;                 // rows left out: 0 bytes
  uint64_t minBytes = 0, maxBytes = 0;  // of the samples (received bytes)
  double peakBusGBps = 0;  // the highest bus bandwidth of its samples (nccl-tests' busbw): a check on the import
  bool graph = false;      // measured with CUDA graph launches (-G): no host launch time in it
};

// Appends one run per test found in `text` (nccl-tests' stdout; `name` is its file, for History::runs and messages)
// and a sample per result row and placement. False with "<name>:<line>: <reason>" and `history` unchanged when the
// output cannot be read as nccl-tests results, or holds nothing to import, or a run of this file is already in the
// history. Accepts the outputs of nccl-tests 2.x (column order from its header line; `mpirun --tag-output` prefixes;
// several tests one after another) and its JSON output (-J, a text starting with '{'; messages then name the place in
// the JSON, e.g. "results[3]", instead of a line).
bool importNcclTests(const std::string& text, const std::string& name, const NcclTestsOptions& options,
                     History* history, std::vector<NcclTestsRun>* runs, std::string* error);

}  // namespace timing
}  // namespace ranklens

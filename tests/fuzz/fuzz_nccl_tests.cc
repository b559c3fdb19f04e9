// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: importNcclTests on arbitrary text (nccl-tests logs are pasted, concatenated, cut short). What it
// accepts are samples the estimator can use -- positive transfer times of known operations on communicators of at
// least one rank, marked as benchmarks, each naming a run it added -- and estimates from them are durations; what it
// refuses leaves the history as it was and says where and why.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/nccl_tests_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::timing;
  const std::string text(reinterpret_cast<const char*>(data), size);
  NcclTestsOptions pasted;  // the second way in: a table with the operation and communicator given
  pasted.op = "AllGather";
  pasted.nranks = 12;
  pasted.ranksPerNode = 8;
  for (const NcclTestsOptions& options : {NcclTestsOptions{}, pasted}) {
    History history;
    history.runs.push_back("/scratch/run42/rank0");
    std::vector<NcclTestsRun> runs;
    std::string error;
    if (!importNcclTests(text, "fuzz.log", options, &history, &runs, &error)) {
      check(!error.empty() && error.rfind("fuzz.log", 0) == 0);
      check(history.runs.size() == 1 && history.samples.empty() && runs.empty());
      continue;
    }
    check(!history.samples.empty() && history.runs.size() == 1 + runs.size());
    for (const HistorySample& s : history.samples) {
      check(s.benchmark && s.durationNs > 0 && s.transferNs == s.durationNs && s.nranks >= 1);
      check(s.op >= 0 && s.op <= static_cast<int>(ranklens::events::Op::kRecv));
      check(s.run >= 1 && s.run < history.runs.size());
    }
    const Estimator estimator(history, {});
    for (size_t i = 0; i < history.samples.size() && i < 64; ++i) {
      const HistorySample& s = history.samples[i];
      check(estimator.estimate(s.op, s.nranks, s.crossesNodes, s.bytes).durationNs >= 0);
      check(estimator.estimate(s.op, s.nranks * 8, true, s.bytes * 3 + 1).durationNs >= 0);
    }
  }
  return 0;
}

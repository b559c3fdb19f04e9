// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parseHistory on arbitrary bytes, then the estimator on what it accepts. A history that parses
// gives, for either target, estimates that are durations (never negative) for its own samples and for queries at
// their places and phases; small ones are evaluated whole (leave one call and one job out).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "ranklens/estimator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::timing;
  History history;
  std::string error;
  if (!(error = parseHistory(reinterpret_cast<const char*>(data), size, "fuzz.hist", &history).message()).empty()) {
    check(!error.empty());
    return 0;
  }
  if (history.samples.size() > 4096) return 0;  // each input stays fast
  for (EstimateTarget target : {EstimateTarget::kTransfer, EstimateTarget::kObserved}) {
    Estimator::Options options;
    options.target = target;
    const Estimator estimator(history, options);
    const size_t asked = std::min<size_t>(history.samples.size(), 256);
    for (size_t i = 0; i < asked; ++i) {
      const HistorySample& s = history.samples[i];
      check(estimator.estimateWithout(i).durationNs >= 0);
      check(
          estimator.estimate(s.op, s.nranks, s.crossesNodes, s.bytes, s.role, s.grouped, s.stepOccurrence, s.stepPhase)
              .durationNs >= 0);
      check(estimator.estimate(s.op, s.nranks, s.crossesNodes, s.bytes + 1, "", s.grouped).durationNs >= 0);
    }
    if (history.samples.size() <= 64) {
      const Evaluation ev = evaluate(history, options);
      for (const auto& [row, stats] : ev.leaveOneRunOut) check(stats.count > 0 && stats.median >= 0);
    }
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
#include "ranklens/duration_fit.h"

#include <algorithm>

namespace ranklens {
namespace timing {

// Ordinary least squares of duration on bytes. A negative slope or intercept (noise, one size only) degrades to the
// mean duration as a constant, which is what the samples support.
bool LatencyBandwidthFit::solve(const std::vector<const DurationSample*>& samples, Line* out) {
  if (samples.empty()) return false;
  const double n = static_cast<double>(samples.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const DurationSample* s : samples) {
    const double x = static_cast<double>(s->bytes), y = static_cast<double>(s->durationNs);
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  const double denominator = n * sxx - sx * sx;
  Line line;
  if (samples.size() >= 2 && denominator > 0) {
    line.nsPerByte = (n * sxy - sx * sy) / denominator;
    line.latencyNs = (sy - line.nsPerByte * sx) / n;
  }
  if (!(samples.size() >= 2 && denominator > 0) || line.nsPerByte < 0 || line.latencyNs < 0) {
    line.nsPerByte = 0;
    line.latencyNs = sy / n;
  }
  *out = line;
  return true;
}

void LatencyBandwidthFit::fit(const std::vector<DurationSample>& samples) {
  models_.clear();
  std::map<std::pair<int, int>, std::vector<const DurationSample*>> groups;
  for (const DurationSample& s : samples) {
    if (s.durationNs < 0) continue;
    groups[{s.op, s.nranks}].push_back(&s);
    groups[{s.op, -1}].push_back(&s);
    groups[{-1, -1}].push_back(&s);
  }
  for (const auto& [key, group] : groups) {
    Line line;
    if (solve(group, &line)) models_[key] = line;
  }
}

int64_t LatencyBandwidthFit::estimateNs(int op, int nranks, uint64_t bytes) const {
  for (const auto& key : {std::make_pair(op, nranks), std::make_pair(op, -1), std::make_pair(-1, -1)}) {
    auto it = models_.find(key);
    if (it != models_.end())
      return static_cast<int64_t>(it->second.latencyNs + it->second.nsPerByte * static_cast<double>(bytes));
  }
  return 20'000 + static_cast<int64_t>(static_cast<double>(bytes) / 100.0);  // 100 GB/s = 0.01 ns/byte
}

}  // namespace timing
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
#include "ranklens/duration_fit.h"

#include <algorithm>

#include "ranklens/events.h"

namespace ranklens {
namespace timing {

BytesLine fitBytesLine(const std::vector<WeightedPoint>& points) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const WeightedPoint& p : points) {
    sw += p.weight;
    sx += p.weight * p.bytes;
    sy += p.weight * p.ns;
    sxx += p.weight * p.bytes * p.bytes;
    sxy += p.weight * p.bytes * p.ns;
  }
  BytesLine line;
  line.meanBytes = sx / sw;
  line.meanNs = sy / sw;
  const double variance = sxx / sw - line.meanBytes * line.meanBytes;
  if (variance > 1e-9 * (line.meanBytes * line.meanBytes + 1))
    line.nsPerByte = std::max(0.0, (sxy / sw - line.meanBytes * line.meanNs) / variance);
  return line;
}

double busBytes(int op, int nranks, uint64_t bytes) {
  using events::Op;
  const double n = std::max(nranks, 1), b = static_cast<double>(bytes);
  switch (static_cast<Op>(op)) {
    case Op::kAllReduce:
      return b * 2 * (n - 1) / n;
    case Op::kAllGather:
    case Op::kAlltoAll:
    case Op::kGather:
      return b * (n - 1) / n;  // received: n chunks
    case Op::kReduceScatter:
    case Op::kScatter:
      return b * (n - 1);  // received: one chunk
    default:
      return b;  // Broadcast, Reduce, Send, Recv
  }
}

// Ordinary least squares of duration on (bus) bytes. A negative latency (large messages only, whose line through
// their spread points below zero) becomes a line through the origin: their bandwidth is what the samples support.
LatencyBandwidthFit::Line LatencyBandwidthFit::solve(const std::vector<const DurationSample*>& samples) {
  std::vector<WeightedPoint> points;
  for (const DurationSample* s : samples)
    points.push_back({busBytes(s->op, s->nranks, s->bytes), static_cast<double>(s->durationNs), 1.0});
  const BytesLine fitted = fitBytesLine(points);
  Line line{fitted.at(0), fitted.nsPerByte};
  if (line.latencyNs < 0) {
    double xy = 0, xx = 0;
    for (const WeightedPoint& p : points) {
      xy += p.bytes * p.ns;
      xx += p.bytes * p.bytes;
    }
    line = xx > 0 ? Line{0, xy / xx} : Line{fitted.meanNs, 0};
  }
  for (const WeightedPoint& p : points) line.maxBusBytes = std::max(line.maxBusBytes, p.bytes);
  return line;
}

void LatencyBandwidthFit::fit(const std::vector<DurationSample>& samples) {
  models_.clear();
  std::map<std::tuple<int, int, int>, std::vector<const DurationSample*>> groups;
  for (const DurationSample& s : samples) {
    if (s.durationNs < 0) continue;
    const int locality = s.crossesNodes ? 1 : 0;
    for (int l : {locality, -1}) {
      groups[{s.op, s.nranks, l}].push_back(&s);
      groups[{s.op, -1, l}].push_back(&s);
      groups[{-1, -1, l}].push_back(&s);
    }
  }
  for (const auto& [key, group] : groups) models_[key] = solve(group);
}

int64_t LatencyBandwidthFit::estimateNs(int op, int nranks, bool crossesNodes, uint64_t bytes) const {
  const double bus = busBytes(op, nranks, bytes);
  const int locality = crossesNodes ? 1 : 0;
  const Line* chosen = nullptr;
  const Line* widest[2] = {nullptr, nullptr};  // [1]: of this locality
  for (const auto& key :
       {std::make_tuple(op, nranks, locality), std::make_tuple(op, -1, locality), std::make_tuple(op, nranks, -1),
        std::make_tuple(op, -1, -1), std::make_tuple(-1, -1, locality), std::make_tuple(-1, -1, -1)}) {
    auto it = models_.find(key);
    if (it == models_.end()) continue;
    const Line* line = &it->second;
    for (int same : {0, 1}) {
      if (same && std::get<2>(key) != locality) continue;
      if (widest[same] == nullptr || line->maxBusBytes > widest[same]->maxBusBytes) widest[same] = line;
    }
    if (bus <= 2 * line->maxBusBytes) {
      chosen = line;
      break;
    }
  }
  // Beyond every line's range: the widest of this locality (another's bandwidth is not this one's), else any.
  if (chosen == nullptr) chosen = widest[1] != nullptr ? widest[1] : widest[0];
  if (chosen != nullptr) return static_cast<int64_t>(chosen->latencyNs + chosen->nsPerByte * bus);
  return 20'000 + static_cast<int64_t>(bus / 100.0);  // 100 GB/s = 0.01 ns/byte
}

}  // namespace timing
}  // namespace ranklens

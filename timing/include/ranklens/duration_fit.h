// SPDX-License-Identifier: Apache-2.0
// A latency-bandwidth model of collective durations fitted to recorded calls: duration = latency + bus bytes / bus
// bandwidth per (op, communicator size), by least squares: the estimator's fallback when no sample is near
// (estimator.h). Bus bytes are nccl-tests' (the bytes each rank moves over its busiest link: an all-reduce's
// 2(n-1)/n of its size), so that a fit of one operation or size of communicator carries over to another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

namespace ranklens {
namespace timing {

// Weighted least squares of duration on bytes, as the line through the weighted means; the slope is never negative
// (a duration does not shrink with size: a negative fitted slope is noise), and one distinct size gives slope 0.
struct BytesLine {
  double meanBytes = 0, meanNs = 0, nsPerByte = 0;
  double at(double bytes) const { return meanNs + nsPerByte * (bytes - meanBytes); }
};
struct WeightedPoint {
  double bytes = 0, ns = 0, weight = 1;
};
BytesLine fitBytesLine(const std::vector<WeightedPoint>& points);  // points not empty, weights > 0

// nccl-tests' bus bytes of a call that receives `bytes` (events::receivedBytes) on a communicator of `nranks`.
double busBytes(int op, int nranks, uint64_t bytes);

struct DurationSample {
  int op = 0;
  int nranks = 0;
  uint64_t bytes = 0;
  int64_t durationNs = 0;
  bool crossesNodes = false;  // the communicator spans nodes
};

class LatencyBandwidthFit {
 public:
  void fit(const std::vector<DurationSample>& samples);
  // Falls back from (op, nranks, locality) to the op's communicators of any size with the same locality, then of
  // either locality, then to all ops (in bus bytes), and to a fixed 20 us + 100 GB/s of bus bytes when nothing was
  // fitted: a communicator that spans nodes takes its bandwidth from others that did (nccl-tests imports, multi-node
  // recordings) before any of one node. A line is used only up to twice the largest bus bytes it was fitted to (a
  // slope between two small messages is protocol latency, not bandwidth); beyond every line's range, the line that
  // saw the largest.
  int64_t estimateNs(int op, int nranks, bool crossesNodes, uint64_t bytes) const;
  size_t models() const { return models_.size(); }

 private:
  struct Line {
    double latencyNs = 0, nsPerByte = 0;
    double maxBusBytes = 0;  // the largest sample it was fitted to
  };
  static Line solve(const std::vector<const DurationSample*>& samples);
  // (op, nranks, locality): nranks -1 any size, op -1 any op, locality 1 spans nodes, 0 within one, -1 either.
  std::map<std::tuple<int, int, int>, Line> models_;
};

}  // namespace timing
}  // namespace ranklens

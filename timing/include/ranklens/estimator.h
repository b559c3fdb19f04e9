// SPDX-License-Identifier: Apache-2.0
// Collective durations estimated from recorded history: samples (op, bytes, communicator size, locality, role,
// duration) collected from any number of recorded runs; an estimate is a local weighted linear regression of duration
// on bytes (latency + bytes / bandwidth, locally) over the nearest samples in log2(bytes) of the same (op, size, locality) -- the same role preferred -- and falls back
// to a latency-bandwidth fit when the nearest sample is too far away. Every estimate says how far its neighbours
// were and whether it extrapolates.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ranklens {
namespace trace {
class Recording;
struct Manifest;
}  // namespace trace
namespace timing {

struct HistorySample {
  int op = 0;
  int datatype = 0;
  uint64_t bytes = 0;
  int nranks = 0;
  bool crossesNodes = false;  // the communicator spans more ranks than one node holds (LOCAL_WORLD_SIZE)
  std::string role;           // the communicator's name (commName) when the framework sets one, e.g. "tp", "dp"
  bool grouped = false;       // the duration is a group's on one stream (several calls)
  int64_t durationNs = 0;
  uint32_t run = 0;           // index into History::runs
  MSGPACK_DEFINE_ARRAY(op, datatype, bytes, nranks, crossesNodes, role, grouped, durationNs, run)
};

struct History {
  std::string format = "ranklens-history";
  int version = 1;
  std::vector<std::string> runs;  // the recorded rank directories the samples came from
  std::vector<HistorySample> samples;
  MSGPACK_DEFINE_MAP(format, version, runs, samples)
};

// Adds every timed call of a recorded rank directory (calls outside groups; for groups, the first call on each
// stream with the group's duration, marked grouped). False with `error` when the trace cannot be read; a rank
// directory already in the history is refused (appending twice would double its weight).
bool addRecordedRun(const std::string& rankDir, History* history, std::string* error);
// The same for a recording already open (replay: the replayed recording is its own history).
bool addRecordedRun(const trace::Recording& recording, History* history, std::string* error);
// Whether a communicator of `nranks` spans nodes in the recorded job (more ranks than its LOCAL_WORLD_SIZE).
bool crossesNodes(const trace::Manifest& manifest, int nranks);
bool saveHistory(const std::string& path, const History& history, std::string* error);
bool loadHistory(const std::string& path, History* history, std::string* error);

struct Estimate {
  int64_t durationNs = 0;
  double distance = 0;     // |log2(bytes) - log2(nearest sample's bytes)|: 1.0 = a factor of two away
  int neighbours = 0;      // samples used
  bool extrapolated = false;  // outside the sampled size range of its neighbourhood, or too far from any sample
  bool found = false;      // false: no sample of this op at all (a fixed 20 us + 100 GB/s guess)
  const char* method = "";  // "local-regression" | "latency-bandwidth" | "default"
};

class Estimator {
 public:
  struct Options {
    int neighbours = 8;          // k nearest samples in log2(bytes)
    double maxDistance = 1.0;    // beyond this (log2 units) the latency-bandwidth fit is used, marked extrapolated
    int64_t excludeRun = -1;     // leave-one-run-out: ignore this run's samples
  };
  Estimator(const History& history, const Options& options);
  ~Estimator();
  Estimate estimate(int op, int nranks, bool crossesNodes, uint64_t bytes, const std::string& role = "") const;
  // Leave-one-out: the estimate of sample `index` of the history without that sample.
  Estimate estimateWithout(size_t index) const;
  size_t samples() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Leave-one-out over calls and leave-one-run-out over runs: relative errors |estimate - duration| / duration.
struct ErrorStats {
  size_t count = 0;
  double median = 0, p90 = 0;
};
struct Evaluation {
  // key: "<op> <size class>", plus "all"
  std::map<std::string, ErrorStats> leaveOneOut, leaveOneRunOut;
  size_t extrapolatedLoo = 0, extrapolatedLoro = 0;
};
Evaluation evaluate(const History& history, const Estimator::Options& options);
const char* sizeClass(uint64_t bytes);  // "<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB"

}  // namespace timing
}  // namespace ranklens

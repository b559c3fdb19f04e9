// SPDX-License-Identifier: Apache-2.0
// Collective durations estimated from recorded history: samples (op, bytes, communicator size, locality, role,
// duration) collected from any number of recorded jobs. A rank's recorded duration includes the time its collective
// waited for the slowest peer; the history also keeps each call's transfer time, the shortest duration any rank of
// the job measured for that same collective (the last rank to arrive waits for nobody). An estimate of a sampled size
// is the typical value of its samples of the same (op, communicator size, locality) -- the same role preferred: the
// median of transfer times, the 10%-trimmed mean of observed durations (replay sums those over a step) -- and,
// between sampled sizes, a local weighted regression of those values on bytes (latency + bytes / bandwidth, locally)
// over the nearest sizes in log2(bytes), falling back to a latency-bandwidth fit when the nearest size is too far
// away. Samples imported from nccl-tests (benchmark samples, tools/nccl_tests) are neighbours only where no
// recorded call of the same communicator is near: recorded calls ran beside the program's compute. Every estimate
// says how far its neighbours were and whether it extrapolates.
#pragma once

#include <msgpack.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/status.h"

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
  int64_t durationNs = 0;     // what this rank measured (including the wait for its peers)
  uint32_t run = 0;           // index into History::runs
  // Version 2: the shortest duration of this collective over the job's recorded ranks (-1: not known, e.g. P2P or
  // only one rank of the job recorded); a 1-rank communicator's own duration.
  int64_t transferNs = -1;
  // Version 3: where in its training step the call was made (host time since the step's "step" marker over the
  // step's length, 0..1; -1 outside marked steps), and whether a call on another stream of the rank was still
  // running (by its submission time plus its recorded duration) when this one was submitted.
  double stepPhase = -1;
  bool otherStreamsBusy = false;
  // Version 4: which occurrence of its op and size (and grouping) in its step the call was on its rank: 0 the
  // first, -1 outside marked steps. The same place in another run of the same program: its neighbour of choice.
  int stepOccurrence = -1;
  // Version 5: measured by a benchmark (nccl-tests, `ranklens history import-nccl-tests`), not in a training step:
  // every rank arrived together, nothing computed beside it, so its duration is a transfer time. The latency-
  // bandwidth fallback uses such samples although they lie outside marked steps.
  bool benchmark = false;
  MSGPACK_DEFINE_ARRAY(op, datatype, bytes, nranks, crossesNodes, role, grouped, durationNs, run, transferNs, stepPhase,
                       otherStreamsBusy, stepOccurrence, benchmark)
};

// Counts which occurrence of its op, size and grouping each call is in its training step
// (HistorySample::stepOccurrence): `history build` and a replay count alike, so that a replayed call asks for the
// place its recorded counterparts were sampled at. -1 before the first step starts and after leave().
class StepOccurrences {
 public:
  // A step starts; `timeNs` is its marker's host time (monotonic), -1 when the caller does not track phases.
  void startStep(int64_t timeNs = -1) {
    counts_.clear();
    previousLengthNs_ = inStep_ && timeNs >= 0 && stepStartNs_ >= 0 ? timeNs - stepStartNs_ : -1;
    stepStartNs_ = timeNs;
    inStep_ = true;
  }
  void leave() {
    inStep_ = false;
    stepStartNs_ = previousLengthNs_ = -1;
  }
  int next(int op, uint64_t bytes, bool grouped) { return inStep_ ? counts_[{op, bytes, grouped}]++ : -1; }
  // Where in the current step `timeNs` falls (HistorySample::stepPhase), over the previous step's length: a running
  // step's own length is not known yet. -1 in the first step, outside steps, or without times.
  double phase(int64_t timeNs) const {
    if (!inStep_ || previousLengthNs_ <= 0 || timeNs < stepStartNs_) return -1;
    return static_cast<double>(timeNs - stepStartNs_) / static_cast<double>(previousLengthNs_);
  }

 private:
  std::map<std::tuple<int, uint64_t, bool>, int> counts_;
  bool inStep_ = false;
  int64_t stepStartNs_ = -1, previousLengthNs_ = -1;
};

// The history format written now. 1: no transferNs (read as -1); 2: no stepPhase, otherStreamsBusy; 3: no
// stepOccurrence; 4: no benchmark.
constexpr int kHistoryVersion = 5;

// How History::runs names a run imported from nccl-tests output, and whether a run is one.
constexpr const char* kNcclTestsRunPrefix = "nccl-tests:";
bool isBenchmarkRun(const std::string& run);

struct History {
  std::string format = "ranklens-history";
  int version = kHistoryVersion;
  // The recorded rank directories the samples came from, and "nccl-tests:<file>:<test>" for imported benchmarks.
  std::vector<std::string> runs;
  std::vector<HistorySample> samples;
  MSGPACK_DEFINE_MAP(format, version, runs, samples)
};

// The recorded job a rank directory belongs to: its parent directory when it is named rank<N>, else itself (an
// imported benchmark run is a job of its own).
std::string jobOf(const std::string& rankDir);

// Adds every timed call of the recorded ranks of one job (calls outside groups; for groups, the first call on each
// stream with the group's duration, marked grouped), with the transfer time of each collective found on several of
// them (calls are paired by communicator -- creation call, size, color and order -- and sequence). Fails when a
// trace cannot be read; a rank directory already in the history is refused (appending twice would double its
// weight), and nothing is added then.
Status addRecordedJob(const std::vector<std::string>& rankDirs, History* history);
Status addRecordedJob(const std::vector<const trace::Recording*>& ranks, History* history);
// One rank alone (replay: the replayed recording is its own history).
Status addRecordedRun(const std::string& rankDir, History* history);
Status addRecordedRun(const trace::Recording& recording, History* history);
// Whether a communicator of `nranks` spans nodes in the recorded job (more ranks than its LOCAL_WORLD_SIZE, -1 when
// the manifest does not say).
int localWorldSize(const trace::Manifest& manifest);
bool crossesNodes(int localWorldSize, int nranks);
// Whether any sample of a communicator of several ranks carries a transfer time (EstimateTarget::kTransfer).
bool hasTransferTimes(const History& history);
Status saveHistory(const std::string& path, const History& history);
Status loadHistory(const std::string& path, History* history);
// A history file's bytes (`name` in messages): fails with the reason -- the sample and what is wrong with it -- when
// it is not a history this RankLens reads, or a sample could mislead the estimator.
Status parseHistory(const char* data, size_t size, const std::string& name, History* history);

struct Estimate {
  int64_t durationNs = 0;
  double distance = 0;        // |log2(bytes) - log2(nearest sample's bytes)|: 1.0 = a factor of two away
  int neighbours = 0;         // samples used
  bool extrapolated = false;  // outside the sampled size range of its neighbourhood, or too far from any sample
  bool found = false;         // false: no sample of this op at all (a fixed 20 us + 100 GB/s guess)
  bool benchmark = false;     // from benchmark samples (nccl-tests imports): no recorded call was near
  // "same-place median" | "same-place trimmed mean" | "same-size median" | "same-size trimmed mean" |
  // "local-regression" | "latency-bandwidth" | "default"
  const char* method = "";
};

enum class EstimateTarget {
  kObserved,  // the duration a rank measured, waiting for its peers included
  kTransfer,  // the collective's own time: the shortest over the job's ranks (what replay holds by default)
};
const char* toString(EstimateTarget target);

class Estimator {
 public:
  struct Options {
    int neighbours = 8;        // k nearest sampled sizes in log2(bytes)
    double maxDistance = 1.0;  // beyond this (log2 units) the latency-bandwidth fit is used, marked extrapolated
    std::string excludeJob;    // leave-one-job-out: ignore the samples of this job's ranks (jobOf)
    EstimateTarget target = EstimateTarget::kTransfer;
  };
  Estimator(const History& history, const Options& options);
  ~Estimator();
  // grouped: a group's time on one stream, `op` its first call's and `bytes` all its calls' on that stream (what
  // the history samples of groups hold). stepOccurrence (HistorySample::stepOccurrence, -1 unknown): when at least
  // kSamePlace samples of the same op, size, grouping and role were made at that place of their steps, their typical
  // value ("same-place"): the same call of another run of the program, which overlapped the same compute.
  // stepPhase (HistorySample::stepPhase, -1 unknown) narrows those to the ones made within kSamePhase of it, or the
  // kSamePlace nearest in phase when fewer are that near. Another configuration of the same program (another
  // micro-batch, the same buckets) makes the same calls at the same places, but beside other compute and at another
  // phase; another run of the same configuration makes them at the same phase.
  Estimate estimate(int op, int nranks, bool crossesNodes, uint64_t bytes, const std::string& role = "",
                    bool grouped = false, int stepOccurrence = -1, double stepPhase = -1) const;
  static constexpr size_t kSamePlace = 3;
  static constexpr double kSamePhase = 0.02;
  // Leave-one-out: the estimate of sample `index` of the history without that sample.
  Estimate estimateWithout(size_t index) const;
  size_t samples() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Leave-one-out over calls and leave-one-run-out over recorded jobs (all ranks of a job left out together: they
// share transfer times): relative errors |estimate - value| / value for options.target, of recorded calls (benchmark
// samples are neighbours, never judged).
struct ErrorStats {
  size_t count = 0;
  double median = 0, p90 = 0;
};
struct Evaluation {
  // key: "<op> <size class>", "all", and by context: "all, step 0-25%" .. "all, outside marked steps", "all,
  // other streams busy" / "idle", and by the rule that estimated: "all, by same-place median" (Estimate::method)
  std::map<std::string, ErrorStats> leaveOneOut, leaveOneRunOut;
  size_t extrapolatedLoo = 0, extrapolatedLoro = 0;
  size_t jobs = 0;           // recorded jobs in the history
  size_t benchmarkRuns = 0;  // imported nccl-tests runs (neighbours only: not judged)
};
Evaluation evaluate(const History& history, const Estimator::Options& options);
// Every recorded call of `judged` (a sample with a value for `target`, not a benchmark's) estimated by `estimator`,
// built from another history, none left out: relative errors in evaluate's rows. `extrapolated` counts the
// estimates that extrapolated.
std::map<std::string, ErrorStats> evaluateAgainst(const Estimator& estimator, const History& judged,
                                                  EstimateTarget target, size_t* extrapolated);
const char* sizeClass(uint64_t bytes);  // "<64KiB", "64KiB-1MiB", "1-16MiB", ">=16MiB"
// The rows of the error tables (evaluate, and any other estimate judged the same way): "<op> <size class>".
std::string errorClass(const HistorySample& sample);
// "all, step 0-25%" .. "all, step 75-100%", or "all, outside marked steps": the sample's step phase.
std::string contextClass(const HistorySample& sample);
// Count, median and p90 of relative errors.
ErrorStats errorStats(std::vector<double> relativeErrors);

}  // namespace timing
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// Estimates from a History (estimator.h: the rules) and their evaluation, leaving out one call or one job.
#include "ranklens/estimator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "ranklens/duration_fit.h"
#include "ranklens/events.h"

namespace ranklens {
namespace timing {

bool isBenchmarkRun(const std::string& run) { return run.rfind(kNcclTestsRunPrefix, 0) == 0; }

std::string jobOf(const std::string& rankDir) {
  if (isBenchmarkRun(rankDir)) return rankDir;
  std::string dir = rankDir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const size_t slash = dir.rfind('/');
  const std::string base = slash == std::string::npos ? dir : dir.substr(slash + 1);
  if (base.rfind("rank", 0) != 0) return dir;
  return slash == std::string::npos ? std::string(".") : slash == 0 ? std::string("/") : dir.substr(0, slash);
}

bool crossesNodes(int localWorldSize, int nranks) { return localWorldSize > 0 && nranks > localWorldSize; }

// ----------------------------------------------------------------------------------------------------- estimator

const char* toString(EstimateTarget target) { return target == EstimateTarget::kTransfer ? "transfer" : "observed"; }

namespace {

int64_t valueOf(const HistorySample& s, EstimateTarget target) {
  return target == EstimateTarget::kTransfer ? s.transferNs : s.durationNs;
}

// Every sample of one size, sorted. What the size stands for: a transfer time is the collective's own time, and its
// median is the typical one; an observed duration includes waits for peers, and replay sums them over a step, so
// their mean, with the top and bottom 10% trimmed (warm-up, stragglers), is what a held stream should average.
struct SizePoint {
  double x = 0;  // log2(bytes + 1)
  uint64_t bytes = 0;
  std::vector<int64_t> values;  // sorted
  int64_t typical = -1;         // typicalValue() of all values, computed once
};

// typicalValue of `values` without one occurrence of `excluded` (none when `exclude` is false); -1 when nothing is
// left. The median is the upper one for an even count.
int64_t typicalValue(const std::vector<int64_t>& values, EstimateTarget target, bool exclude, int64_t excluded) {
  const size_t n = values.size() - (exclude ? 1 : 0);
  if (values.empty() || n == 0) return -1;
  const size_t at = exclude
                        ? static_cast<size_t>(std::lower_bound(values.begin(), values.end(), excluded) - values.begin())
                        : values.size();
  auto remaining = [&](size_t i) { return i < at ? values[i] : values[i + 1]; };  // i-th value left
  if (target == EstimateTarget::kTransfer) return remaining(n / 2);
  const size_t trim = n / 10;
  double sum = 0;
  for (size_t i = trim; i < n - trim; ++i) sum += static_cast<double>(remaining(i));
  return static_cast<int64_t>(std::llround(sum / static_cast<double>(n - 2 * trim)));
}

using Key = std::tuple<int, int, bool, bool>;                  // op, nranks, crossesNodes, grouped
using PlaceKey = std::tuple<Key, std::string, uint64_t, int>;  // + role, bytes, stepOccurrence

// The samples made at one place of their steps: their values sorted, and by step phase (samples without a phase
// left out of those).
struct PlaceSamples {
  std::vector<int64_t> values;
  std::vector<std::pair<double, int64_t>> byPhase;  // (stepPhase, value), sorted
};

// The typical value of values in any order (reordered).
int64_t typicalOfUnsorted(std::vector<int64_t>* values, EstimateTarget target) {
  if (target == EstimateTarget::kTransfer) {  // the median (the upper middle), without sorting all
    auto middle = values->begin() + static_cast<std::ptrdiff_t>(values->size() / 2);
    std::nth_element(values->begin(), middle, values->end());
    return *middle;
  }
  std::sort(values->begin(), values->end());
  return typicalValue(*values, target, false, 0);
}

struct Neighbourhood {
  std::vector<SizePoint> all;                            // by x
  std::map<std::string, std::vector<SizePoint>> byRole;  // by x
};

double log2Bytes(uint64_t bytes) { return std::log2(static_cast<double>(bytes) + 1.0); }

std::vector<SizePoint> sizePoints(std::map<uint64_t, std::vector<int64_t>>&& bySize, EstimateTarget target) {
  std::vector<SizePoint> points;
  for (auto& [bytes, values] : bySize) {
    std::sort(values.begin(), values.end());
    const int64_t typical = typicalValue(values, target, false, 0);
    points.push_back({log2Bytes(bytes), bytes, std::move(values), typical});
  }
  return points;  // std::map iterates by bytes: sorted by x
}

}  // namespace

struct Estimator::Impl {
  Options options;
  std::map<Key, Neighbourhood> groups;      // recorded calls
  std::map<Key, Neighbourhood> benchmarks;  // benchmark samples (HistorySample::benchmark)
  std::map<PlaceKey, PlaceSamples> places;
  LatencyBandwidthFit fit;
  std::set<int> ops;
  const History* history = nullptr;
  size_t count = 0;

  // The sample left out (leave-one-out), by size and value.
  struct Excluded {
    bool any = false;
    uint64_t bytes = 0;
    int64_t value = 0;
    int occurrence = -1;
    double phase = -1;
    bool benchmark = false;  // in `benchmarks`, not `groups`
  };

  // The typical value of the samples made at the same place of their steps, with at least kSamePlace of them; with
  // a phase, of the ones made within kSamePhase of it, or else of the kSamePlace nearest in phase.
  bool samePlace(const Key& key, const std::string& role, uint64_t bytes, int occurrence, double phase,
                 const Excluded& ex, Estimate* e) const {
    if (occurrence < 0) return false;
    auto it = places.find(PlaceKey{key, role, bytes, occurrence});
    if (it == places.end()) return false;
    const PlaceSamples& place = it->second;
    const bool exclude = ex.any && ex.bytes == bytes && ex.occurrence == occurrence;
    if (place.values.size() < kSamePlace + (exclude ? 1 : 0)) return false;
    e->found = true;
    e->method = options.target == EstimateTarget::kTransfer ? "same-place median" : "same-place trimmed mean";
    const auto& by = place.byPhase;
    if (phase < 0 || by.size() < kSamePlace + (exclude ? 1 : 0)) {
      e->neighbours = static_cast<int>(place.values.size() - (exclude ? 1 : 0));
      e->durationNs = typicalValue(place.values, options.target, exclude, ex.value);
      return true;
    }
    // Walk out from the phase asked for: every sample within kSamePhase, and at least the kSamePlace nearest.
    auto right = std::lower_bound(by.begin(), by.end(), std::make_pair(phase, INT64_MIN));
    auto left = right;
    bool skipped = !exclude;
    std::vector<int64_t> values;
    values.reserve(64);
    while (left != by.begin() || right != by.end()) {
      const bool takeLeft =
          right == by.end() || (left != by.begin() && phase - std::prev(left)->first <= right->first - phase);
      const auto& [p, value] = takeLeft ? *--left : *right++;
      if (values.size() >= kSamePlace && std::fabs(p - phase) > kSamePhase) break;
      if (!skipped && value == ex.value && p == ex.phase) {
        skipped = true;
        continue;
      }
      values.push_back(value);
    }
    e->neighbours = static_cast<int>(values.size());
    e->durationNs = typicalOfUnsorted(&values, options.target);
    return true;
  }

  Estimate local(const std::vector<SizePoint>& points, double xq, const Excluded& ex, const Key& key,
                 uint64_t bytes) const {
    Estimate e;
    struct Chosen {
      double x;
      uint64_t bytes;
      int64_t typical;
    };
    auto typicalOf = [&](const SizePoint& p) {
      return ex.any && p.bytes == ex.bytes ? typicalValue(p.values, options.target, true, ex.value) : p.typical;
    };
    // The k nearest sizes in x, walking out from the query's position (a size left empty by the exclusion skipped).
    auto right =
        std::lower_bound(points.begin(), points.end(), xq, [](const SizePoint& p, double x) { return p.x < x; });
    auto left = right;
    std::vector<Chosen> chosen;
    // The sampled range: the outermost sizes that still have a value (the exclusion can empty one).
    const auto kept = [&](const SizePoint& p) { return typicalOf(p) > 0; };
    const auto first = std::find_if(points.begin(), points.end(), kept);
    if (first == points.end()) return e;
    const double lo = first->x, hi = std::find_if(points.rbegin(), points.rend(), kept)->x;
    while (static_cast<int>(chosen.size()) < options.neighbours && (left != points.begin() || right != points.end())) {
      const bool takeLeft =
          right == points.end() || (left != points.begin() && xq - std::prev(left)->x <= right->x - xq);
      const SizePoint& p = takeLeft ? *--left : *right++;
      const int64_t m = typicalOf(p);
      if (m > 0) chosen.push_back({p.x, p.bytes, m});
    }
    if (chosen.empty()) return e;
    double nearest = INFINITY, farthest = 0;
    for (const Chosen& c : chosen) {
      nearest = std::min(nearest, std::fabs(c.x - xq));
      farthest = std::max(farthest, std::fabs(c.x - xq));
    }
    e.found = true;
    e.neighbours = static_cast<int>(chosen.size());
    e.distance = nearest;
    e.extrapolated = xq < lo - 1e-9 || xq > hi + 1e-9 || nearest > options.maxDistance;
    if (nearest > options.maxDistance) {
      e.method = "latency-bandwidth";
      e.durationNs = fit.estimateNs(std::get<0>(key), std::get<1>(key), std::get<2>(key), bytes);
      return e;
    }
    for (const Chosen& c : chosen) {
      if (c.bytes == bytes) {  // a sampled size: its typical value
        e.method = options.target == EstimateTarget::kTransfer ? "same-size median" : "same-size trimmed mean";
        e.durationNs = c.typical;
        return e;
      }
    }
    // Weighted least squares of the sizes' typical values on bytes (a latency-bandwidth line through the
    // neighbourhood: exact where the protocol does not change), tricube weights over its radius in log2(bytes).
    const double radius = farthest * 1.0001 + 1e-9;
    std::vector<WeightedPoint> weighted;
    double smallest = INFINITY;
    for (const Chosen& c : chosen) {
      const double u = std::fabs(c.x - xq) / radius;
      const double typical = static_cast<double>(c.typical);
      weighted.push_back({static_cast<double>(c.bytes), typical, std::pow(1 - u * u * u, 3) + 1e-6});
      smallest = std::min(smallest, typical);
    }
    const BytesLine line = fitBytesLine(weighted);
    e.method = "local-regression";
    // Never below half the smallest neighbour: a steep local slope must not take a small message to zero.
    const double estimate = std::max(line.at(static_cast<double>(bytes)), 0.5 * smallest);
    e.durationNs = static_cast<int64_t>(std::llround(estimate));
    return e;
  }

  // The neighbourhood of `key` in `from` (the samples of its role first): found only when `from` has `key`.
  Estimate near(const std::map<Key, Neighbourhood>& from, const Key& key, const std::string& role, double xq,
                uint64_t bytes, const Excluded& ex) const {
    auto it = from.find(key);
    if (it == from.end()) return {};
    if (!role.empty()) {
      auto r = it->second.byRole.find(role);
      if (r != it->second.byRole.end()) {
        Estimate e = local(r->second, xq, ex, key, bytes);
        if (e.found) return e;
      }
    }
    return local(it->second.all, xq, ex, key, bytes);
  }

  Estimate query(int op, int nranks, bool crosses, bool grouped, uint64_t bytes, const std::string& role,
                 int occurrence, double phase, const Excluded& ex) const {
    const double xq = log2Bytes(bytes);
    Key key{op, nranks, crosses, grouped};
    if (Estimate e; samePlace(key, role, bytes, occurrence, phase, ex, &e)) return e;
    // Recorded calls first (they ran beside the program's compute), then benchmark samples of the same
    // communicator (nccl-tests: the cluster's bandwidth, across nodes too), before any line.
    const Excluded none;
    const Estimate recorded = near(groups, key, role, xq, bytes, ex.benchmark ? none : ex);
    // Near: a sample within maxDistance answered (farther, local() falls back to the latency-bandwidth line).
    const auto isNear = [&](const Estimate& e) { return e.found && e.distance <= options.maxDistance; };
    if (isNear(recorded)) return recorded;
    Estimate benchmark = near(benchmarks, key, role, xq, bytes, ex.benchmark ? ex : none);
    benchmark.benchmark = benchmark.found;
    if (isNear(benchmark)) return benchmark;
    if (recorded.found) return recorded;
    if (benchmark.found) return benchmark;
    // Another locality of the same communicator size is better than nothing.
    if (Estimate e = near(groups, Key{op, nranks, !crosses, grouped}, role, xq, bytes, ex.benchmark ? none : ex);
        e.found)
      return e;
    Estimate e;
    e.found = ops.count(op) != 0;
    e.extrapolated = true;
    e.distance = INFINITY;
    e.method = e.found ? "latency-bandwidth" : "default";
    e.durationNs = fit.estimateNs(op, nranks, crosses, bytes);
    return e;
  }
};

Estimator::Estimator(const History& history, const Options& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->history = &history;
  // [0] recorded calls, [1] benchmark samples.
  std::map<Key, std::map<uint64_t, std::vector<int64_t>>> all[2];
  std::map<Key, std::map<std::string, std::map<uint64_t, std::vector<int64_t>>>> byRole[2];
  // Ungrouped: (op, nranks, crossesNodes, bytes).
  std::map<std::tuple<int, int, bool, uint64_t>, std::vector<int64_t>> forFit;
  // The fallback fits leave out calls made before the first marked step when the history marks steps: a
  // communicator's first calls include NCCL's connection set-up (a 16-byte all-gather of 217 ms), which a line
  // through each size's typical value would carry to every size. Benchmark samples (nccl-tests) are steady-state
  // calls made after their own warm-up: kept.
  const bool marksSteps = std::any_of(history.samples.begin(), history.samples.end(),
                                      [](const HistorySample& s) { return s.stepPhase >= 0; });
  for (const HistorySample& s : history.samples) {
    const int64_t value = valueOf(s, options.target);
    if (value <= 0) continue;
    if (!options.excludeJob.empty() && jobOf(history.runs.at(s.run)) == options.excludeJob) continue;
    const Key key{s.op, s.nranks, s.crossesNodes, s.grouped};
    all[s.benchmark][key][s.bytes].push_back(value);
    if (s.stepOccurrence >= 0) {
      PlaceSamples& place = impl_->places[PlaceKey{key, s.role, s.bytes, s.stepOccurrence}];
      place.values.push_back(value);
      if (s.stepPhase >= 0) place.byPhase.push_back({s.stepPhase, value});
    }
    if (!s.role.empty()) byRole[s.benchmark][key][s.role][s.bytes].push_back(value);
    if (!s.grouped && (!marksSteps || s.stepPhase >= 0 || s.benchmark))
      forFit[{s.op, s.nranks, s.crossesNodes, s.bytes}].push_back(value);
    impl_->ops.insert(s.op);
    impl_->count++;
  }
  for (auto& [key, place] : impl_->places) {
    std::sort(place.values.begin(), place.values.end());
    std::sort(place.byPhase.begin(), place.byPhase.end());
  }
  for (int kind = 0; kind < 2; ++kind) {
    auto& into = kind == 0 ? impl_->groups : impl_->benchmarks;
    for (auto& [key, sizes] : all[kind]) into[key].all = sizePoints(std::move(sizes), options.target);
    for (auto& [key, roles] : byRole[kind])
      for (auto& [role, sizes] : roles) into[key].byRole[role] = sizePoints(std::move(sizes), options.target);
  }
  // The fallback line through each size's typical value (one point per size: the many samples of one size do not
  // outweigh the rest).
  std::vector<DurationSample> fitSamples;
  for (auto& [k, values] : forFit) {
    std::sort(values.begin(), values.end());
    fitSamples.push_back({std::get<0>(k), std::get<1>(k), std::get<3>(k),
                          typicalValue(values, options.target, false, 0), std::get<2>(k)});
  }
  impl_->fit.fit(fitSamples);
}

Estimator::~Estimator() = default;

Estimate Estimator::estimate(int op, int nranks, bool crossesNodes, uint64_t bytes, const std::string& role,
                             bool grouped, int stepOccurrence, double stepPhase) const {
  return impl_->query(op, nranks, crossesNodes, grouped, bytes, role, stepOccurrence, stepPhase, {});
}

Estimate Estimator::estimateWithout(size_t index) const {
  const HistorySample& s = impl_->history->samples.at(index);
  const int64_t value = valueOf(s, impl_->options.target);
  Impl::Excluded ex;
  const bool inHere =
      impl_->options.excludeJob.empty() || jobOf(impl_->history->runs.at(s.run)) != impl_->options.excludeJob;
  if (value > 0 && inHere) ex = {true, s.bytes, value, s.stepOccurrence, s.stepPhase, s.benchmark};
  return impl_->query(s.op, s.nranks, s.crossesNodes, s.grouped, s.bytes, s.role, s.stepOccurrence, s.stepPhase, ex);
}

size_t Estimator::samples() const { return impl_->count; }

// ---------------------------------------------------------------------------------------------------- evaluation

const char* sizeClass(uint64_t bytes) {
  if (bytes < (64u << 10)) return "<64KiB";
  if (bytes < (1u << 20)) return "64KiB-1MiB";
  if (bytes < (16u << 20)) return "1-16MiB";
  return ">=16MiB";
}

std::string errorClass(const HistorySample& sample) {
  return std::string(events::opName(static_cast<events::Op>(sample.op))) + " " + sizeClass(sample.bytes);
}

std::string contextClass(const HistorySample& sample) {
  if (sample.stepPhase < 0) return "all, outside marked steps";
  static const char* kQuarters[] = {"all, step 0-25%", "all, step 25-50%", "all, step 50-75%", "all, step 75-100%"};
  return kQuarters[static_cast<int>(std::min(sample.stepPhase, 0.99) * 4)];
}

ErrorStats errorStats(std::vector<double> errors) {
  ErrorStats s;
  s.count = errors.size();
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  s.median = errors[errors.size() / 2];
  s.p90 = errors[std::min(errors.size() - 1, errors.size() * 9 / 10)];
  return s;
}

namespace {

void addError(std::map<std::string, std::vector<double>>* errors, const HistorySample& s, int64_t value,
              const Estimate& estimate) {
  const double e = std::fabs(static_cast<double>(estimate.durationNs - value)) / static_cast<double>(value);
  (*errors)[errorClass(s)].push_back(e);
  (*errors)["all"].push_back(e);
  // The same errors by the call's context (history version 3): where in the step, and beside other streams' calls.
  (*errors)[contextClass(s)].push_back(e);
  (*errors)[s.otherStreamsBusy ? "all, other streams busy" : "all, other streams idle"].push_back(e);
  // And by the rule that made the estimate: how far each rule is to be trusted.
  (*errors)[std::string("all, by ") + estimate.method].push_back(e);
}

}  // namespace

Evaluation evaluate(const History& history, const Estimator::Options& options) {
  Evaluation out;
  std::map<std::string, std::vector<double>> loo, loro;
  Estimator all(history, options);
  // Recorded calls are judged, what a replay asks for; benchmark samples only serve as neighbours.
  std::set<std::string> jobs;
  for (const auto& run : history.runs) {
    if (isBenchmarkRun(run))
      out.benchmarkRuns++;
    else
      jobs.insert(jobOf(run));
  }
  out.jobs = jobs.size();
  for (size_t i = 0; i < history.samples.size(); ++i) {
    const int64_t value = valueOf(history.samples[i], options.target);
    if (value <= 0 || history.samples[i].benchmark) continue;
    const Estimate e = all.estimateWithout(i);
    out.extrapolatedLoo += e.extrapolated;
    addError(&loo, history.samples[i], value, e);
  }
  if (jobs.size() > 1) {
    for (const std::string& job : jobs) {
      Estimator::Options without = options;
      without.excludeJob = job;
      Estimator others(history, without);
      for (size_t i = 0; i < history.samples.size(); ++i) {
        const HistorySample& s = history.samples[i];
        const int64_t value = valueOf(s, options.target);
        if (value <= 0 || s.benchmark || jobOf(history.runs[s.run]) != job) continue;
        const Estimate e = others.estimateWithout(i);  // the job's own samples are not in `others` anyway
        out.extrapolatedLoro += e.extrapolated;
        addError(&loro, s, value, e);
      }
    }
  }
  for (auto& [k, v] : loo) out.leaveOneOut[k] = errorStats(std::move(v));
  for (auto& [k, v] : loro) out.leaveOneRunOut[k] = errorStats(std::move(v));
  return out;
}

std::map<std::string, ErrorStats> evaluateAgainst(const Estimator& estimator, const History& judged,
                                                  EstimateTarget target, size_t* extrapolated) {
  std::map<std::string, std::vector<double>> errors;
  *extrapolated = 0;
  for (const HistorySample& s : judged.samples) {
    const int64_t value = valueOf(s, target);
    if (value <= 0 || s.benchmark) continue;
    const Estimate e =
        estimator.estimate(s.op, s.nranks, s.crossesNodes, s.bytes, s.role, s.grouped, s.stepOccurrence, s.stepPhase);
    *extrapolated += e.extrapolated;
    addError(&errors, s, value, e);
  }
  std::map<std::string, ErrorStats> out;
  for (auto& [k, v] : errors) out[k] = errorStats(std::move(v));
  return out;
}

}  // namespace timing
}  // namespace ranklens

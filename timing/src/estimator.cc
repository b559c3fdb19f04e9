// SPDX-License-Identifier: Apache-2.0
#include "ranklens/estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include "ranklens/duration_fit.h"
#include "ranklens/events.h"
#include "ranklens/recording.h"

namespace ranklens {
namespace timing {

// ------------------------------------------------------------------------------------------------------- history

bool crossesNodes(const trace::Manifest& manifest, int nranks) {
  auto it = manifest.env.find("LOCAL_WORLD_SIZE");
  const int localWorld = it == manifest.env.end() ? -1 : atoi(it->second.c_str());
  return localWorld > 0 && nranks > localWorld;
}

bool addRecordedRun(const std::string& rankDir, History* history, std::string* error) {
  auto rec = trace::Recording::open(rankDir, -1, error);
  return rec && addRecordedRun(*rec, history, error);
}

bool addRecordedRun(const trace::Recording& recording, History* history, std::string* error) {
  const std::string dir = recording.directory();
  if (std::find(history->runs.begin(), history->runs.end(), dir) != history->runs.end()) {
    *error = dir + ": already in the history";
    return false;
  }
  if (recording.manifest().mode != "record") {
    *error = dir + ": a " + recording.manifest().mode + " trace; only recorded runs carry measured durations";
    return false;
  }
  std::map<uint64_t, std::string> roles;
  for (const auto& c : recording.comms()) roles[c.commId] = c.name;
  const uint32_t run = static_cast<uint32_t>(history->runs.size());
  history->runs.push_back(dir);

  // A group's duration on a stream belongs to all of its calls on that stream: their bytes add up.
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> groupBytes;  // (groupId, stream) -> bytes
  for (const auto& rc : recording.calls())
    if (rc.call.groupId != 0) groupBytes[{rc.call.groupId, rc.call.stream}] += rc.call.bytes;
  for (const auto& rc : recording.calls()) {
    if (rc.durationNs < 0) continue;
    HistorySample s;
    s.op = rc.call.op;
    s.datatype = rc.call.datatype;
    s.nranks = rc.call.nranks;
    s.crossesNodes = crossesNodes(recording.manifest(), rc.call.nranks);
    s.role = roles[rc.call.commId];
    s.grouped = rc.call.groupId != 0;
    s.bytes = s.grouped ? groupBytes[{rc.call.groupId, rc.call.stream}] : rc.call.bytes;
    s.durationNs = rc.durationNs;
    s.run = run;
    history->samples.push_back(std::move(s));
  }
  return true;
}

bool saveHistory(const std::string& path, const History& history, std::string* error) {
  msgpack::sbuffer buffer;
  msgpack::pack(buffer, history);
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = path + ": cannot write the history";
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool loadHistory(const std::string& path, History* history, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open the history (build one: ranklens history build TRACE_DIRS -o " + path + ")";
    return false;
  }
  std::stringstream data;
  data << in.rdbuf();
  const std::string bytes = data.str();
  try {
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), bytes.size());
    History h;
    handle.get().convert(h);
    if (h.format != "ranklens-history" || h.version != 1) {
      *error = path + ": not a RankLens history (format '" + h.format + "' version " + std::to_string(h.version) + ")";
      return false;
    }
    for (const auto& s : h.samples) {
      if (s.run >= h.runs.size() || s.durationNs < 0) {
        *error = path + ": corrupt history (a sample names run " + std::to_string(s.run) + " of " +
                 std::to_string(h.runs.size()) + " or has a negative duration)";
        return false;
      }
    }
    *history = std::move(h);
    return true;
  } catch (const std::exception& e) {
    *error = path + ": corrupt history (" + e.what() + ")";
    return false;
  }
}

// ----------------------------------------------------------------------------------------------------- estimator

namespace {

struct Point {
  double x = 0, y = 0;  // log2(bytes + 1), ln(duration in ns)
  size_t index = 0;     // in History::samples
};

using Key = std::tuple<int, int, bool, bool>;  // op, nranks, crossesNodes, grouped

struct Neighbourhood {
  std::vector<Point> all;                            // by x
  std::map<std::string, std::vector<Point>> byRole;  // by x
};

double log2Bytes(uint64_t bytes) { return std::log2(static_cast<double>(bytes) + 1.0); }

}  // namespace

struct Estimator::Impl {
  Options options;
  std::map<Key, Neighbourhood> groups;
  LatencyBandwidthFit fit;
  std::set<int> ops;
  const History* history = nullptr;

  Estimate local(const std::vector<Point>& points, double xq, size_t exclude, const Key& key, uint64_t bytes) const {
    Estimate e;
    // The k nearest in x, walking out from the query's position.
    auto right = std::lower_bound(points.begin(), points.end(), xq, [](const Point& p, double x) { return p.x < x; });
    auto left = right;
    std::vector<const Point*> chosen;
    while (static_cast<int>(chosen.size()) < options.neighbours && (left != points.begin() || right != points.end())) {
      const bool takeLeft = right == points.end() ||
                            (left != points.begin() && xq - std::prev(left)->x <= right->x - xq);
      const Point* p = takeLeft ? &*--left : &*right++;
      if (p->index != exclude) chosen.push_back(p);
    }
    if (chosen.empty()) return e;
    // The sampled range (points are sorted; skip the excluded sample at either end).
    double nearest = INFINITY, farthest = 0;
    const Point& first = points.front().index != exclude || points.size() == 1 ? points.front() : points[1];
    const Point& last = points.back().index != exclude || points.size() == 1 ? points.back() : points[points.size() - 2];
    const double lo = first.x, hi = last.x;
    for (const Point* p : chosen) {
      nearest = std::min(nearest, std::fabs(p->x - xq));
      farthest = std::max(farthest, std::fabs(p->x - xq));
    }
    e.found = true;
    e.neighbours = static_cast<int>(chosen.size());
    e.distance = nearest;
    e.extrapolated = xq < lo - 1e-9 || xq > hi + 1e-9 || nearest > options.maxDistance;
    if (nearest > options.maxDistance) {
      e.method = "latency-bandwidth";
      e.durationNs = fit.estimateNs(std::get<0>(key), std::get<1>(key), bytes);
      return e;
    }
    // Weighted least squares of duration on bytes (a latency-bandwidth line through the neighbourhood: exact where
    // the protocol does not change), tricube weights over the neighbourhood's radius in log2(bytes).
    const double radius = farthest * 1.0001 + 1e-9;
    double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, smallest = INFINITY;
    for (const Point* p : chosen) {
      const double u = std::fabs(p->x - xq) / radius;
      const double w = std::pow(1 - u * u * u, 3) + 1e-6;
      const double bx = std::exp2(p->x) - 1.0, dy = std::exp(p->y);
      sw += w;
      sx += w * bx;
      sy += w * dy;
      sxx += w * bx * bx;
      sxy += w * bx * dy;
      smallest = std::min(smallest, dy);
    }
    const double mx = sx / sw, my = sy / sw, vx = sxx / sw - mx * mx;
    const double slope = vx > 1e-9 * (mx * mx + 1) ? std::max(0.0, (sxy / sw - mx * my) / vx) : 0.0;
    e.method = "local-regression";
    // Never below half the smallest neighbour: a steep local slope must not take a small message to zero.
    const double estimate = std::max(my + slope * (static_cast<double>(bytes) - mx), 0.5 * smallest);
    e.durationNs = static_cast<int64_t>(std::llround(estimate));
    return e;
  }

  Estimate query(int op, int nranks, bool crosses, bool grouped, uint64_t bytes, const std::string& role,
                 size_t exclude) const {
    const double xq = log2Bytes(bytes);
    Key key{op, nranks, crosses, grouped};
    auto it = groups.find(key);
    if (it == groups.end()) {  // another locality of the same size is better than nothing
      it = groups.find(Key{op, nranks, !crosses, grouped});
    }
    if (it != groups.end()) {
      if (!role.empty()) {
        auto r = it->second.byRole.find(role);
        if (r != it->second.byRole.end()) {
          Estimate e = local(r->second, xq, exclude, key, bytes);
          if (e.found) return e;
        }
      }
      Estimate e = local(it->second.all, xq, exclude, key, bytes);
      if (e.found) return e;
    }
    Estimate e;
    e.found = ops.count(op) != 0;
    e.extrapolated = true;
    e.distance = INFINITY;
    e.method = e.found ? "latency-bandwidth" : "default";
    e.durationNs = fit.estimateNs(op, nranks, bytes);
    return e;
  }
};

Estimator::Estimator(const History& history, const Options& options) : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->history = &history;
  std::vector<DurationSample> fitSamples;
  for (size_t i = 0; i < history.samples.size(); ++i) {
    const HistorySample& s = history.samples[i];
    if (options.excludeRun >= 0 && s.run == static_cast<uint64_t>(options.excludeRun)) continue;
    if (s.durationNs <= 0) continue;
    Point p{log2Bytes(s.bytes), std::log(static_cast<double>(s.durationNs)), i};
    Neighbourhood& n = impl_->groups[Key{s.op, s.nranks, s.crossesNodes, s.grouped}];
    n.all.push_back(p);
    if (!s.role.empty()) n.byRole[s.role].push_back(p);
    impl_->ops.insert(s.op);
    if (!s.grouped) fitSamples.push_back({s.op, s.nranks, s.bytes, s.durationNs});
  }
  auto byX = [](const Point& a, const Point& b) { return a.x < b.x; };
  for (auto& [key, n] : impl_->groups) {
    std::stable_sort(n.all.begin(), n.all.end(), byX);
    for (auto& [role, points] : n.byRole) std::stable_sort(points.begin(), points.end(), byX);
  }
  impl_->fit.fit(fitSamples);
}

Estimator::~Estimator() = default;

Estimate Estimator::estimate(int op, int nranks, bool crossesNodes, uint64_t bytes, const std::string& role) const {
  return impl_->query(op, nranks, crossesNodes, false, bytes, role, SIZE_MAX);
}

Estimate Estimator::estimateWithout(size_t index) const {
  const HistorySample& s = impl_->history->samples.at(index);
  return impl_->query(s.op, s.nranks, s.crossesNodes, s.grouped, s.bytes, s.role, index);
}

size_t Estimator::samples() const {
  size_t n = 0;
  for (const auto& [key, group] : impl_->groups) n += group.all.size();
  return n;
}

// ---------------------------------------------------------------------------------------------------- evaluation

const char* sizeClass(uint64_t bytes) {
  if (bytes < (64u << 10)) return "<64KiB";
  if (bytes < (1u << 20)) return "64KiB-1MiB";
  if (bytes < (16u << 20)) return "1-16MiB";
  return ">=16MiB";
}

namespace {

ErrorStats stats(std::vector<double> errors) {
  ErrorStats s;
  s.count = errors.size();
  if (errors.empty()) return s;
  std::sort(errors.begin(), errors.end());
  s.median = errors[errors.size() / 2];
  s.p90 = errors[std::min(errors.size() - 1, errors.size() * 9 / 10)];
  return s;
}

void addError(std::map<std::string, std::vector<double>>* errors, const HistorySample& s, int64_t estimateNs) {
  const double e = std::fabs(static_cast<double>(estimateNs - s.durationNs)) / static_cast<double>(s.durationNs);
  (*errors)[std::string(events::opName(static_cast<events::Op>(s.op))) + " " + sizeClass(s.bytes)].push_back(e);
  (*errors)["all"].push_back(e);
}

}  // namespace

Evaluation evaluate(const History& history, const Estimator::Options& options) {
  Evaluation out;
  std::map<std::string, std::vector<double>> loo, loro;
  Estimator all(history, options);
  for (size_t i = 0; i < history.samples.size(); ++i) {
    if (history.samples[i].durationNs <= 0) continue;
    const Estimate e = all.estimateWithout(i);
    out.extrapolatedLoo += e.extrapolated;
    addError(&loo, history.samples[i], e.durationNs);
  }
  if (history.runs.size() > 1) {
    for (size_t run = 0; run < history.runs.size(); ++run) {
      Estimator::Options without = options;
      without.excludeRun = static_cast<int64_t>(run);
      Estimator others(history, without);
      for (size_t i = 0; i < history.samples.size(); ++i) {
        const HistorySample& s = history.samples[i];
        if (s.run != run || s.durationNs <= 0) continue;
        const Estimate e = others.estimateWithout(i);  // the run's own samples are not in `others` anyway
        out.extrapolatedLoro += e.extrapolated;
        addError(&loro, s, e.durationNs);
      }
    }
  }
  for (auto& [k, v] : loo) out.leaveOneOut[k] = stats(std::move(v));
  for (auto& [k, v] : loro) out.leaveOneRunOut[k] = stats(std::move(v));
  return out;
}

}  // namespace timing
}  // namespace ranklens

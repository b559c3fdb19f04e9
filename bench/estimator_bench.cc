// SPDX-License-Identifier: Apache-2.0
// How long one duration estimate takes (the replay hot path asks one per unmatched call; target <= 5 us): a history
// of --samples samples over 10 operations, 4 communicator sizes, 2 roles and 1 KiB..1 GiB, queried at random sizes;
// then the same-place rule with phases over a history crowded into 32 places.
// Medians of --reps repetitions of --queries queries each; JSON with commit, device (CPU), command and date.
#include <CLI/CLI.hpp>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "ranklens/estimator.h"
#include "ranklens/events.h"

namespace {

std::string commitOf() {
  if (const char* env = getenv("RANKLENS_COMMIT"); env && *env) return env;
  FILE* p = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  char buf[64] = "";
  if (p) {
    if (!fgets(buf, sizeof buf, p)) buf[0] = '\0';
    pclose(p);
  }
  std::string s(buf);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s.empty() ? "unknown" : s;
}

std::string cpuName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Estimator query time (ranklens::timing::Estimator::estimate)"};
  size_t samples = 100'000, queries = 200'000;
  int reps = 7;
  std::string json;
  app.add_option("--samples", samples, "History size (default 100000)");
  app.add_option("--queries", queries, "Queries per repetition (default 200000)");
  app.add_option("--reps", reps, "Repetitions (default 7)");
  app.add_option("--json", json, "Write the result here, e.g. bench/results/estimator_bench.json");
  app.footer("Example: build/release/bench/estimator_bench --json bench/results/estimator_bench.json");
  CLI11_PARSE(app, argc, argv);

  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int> op(0, 9), sizeIndex(0, 3), role(0, 1), log2Bytes(10, 30);
  std::uniform_real_distribution<double> jitter(0.95, 1.05);
  const int sizes[] = {2, 4, 8, 16};
  ranklens::timing::History history;
  history.runs = {"synthetic-0", "synthetic-1", "synthetic-2"};
  for (size_t i = 0; i < samples; ++i) {
    ranklens::timing::HistorySample s;
    s.op = op(rng);
    s.nranks = sizes[sizeIndex(rng)];
    s.role = role(rng) ? "tp" : "dp";
    s.bytes = 1ull << log2Bytes(rng);
    s.durationNs = static_cast<int64_t>((10'000 + static_cast<double>(s.bytes) / 150.0) * jitter(rng));
    s.run = static_cast<uint32_t>(i % 3);
    history.samples.push_back(s);
  }
  const ranklens::timing::Estimator estimator(history, {});
  std::uniform_int_distribution<uint64_t> anyBytes(1 << 10, 1ull << 30);
  std::vector<std::tuple<int, int, uint64_t, std::string>> qs;
  for (size_t i = 0; i < queries; ++i)
    qs.emplace_back(op(rng), sizes[sizeIndex(rng)], anyBytes(rng), role(rng) ? "tp" : "dp");
  int64_t sink = 0;
  // Medians of `reps` timings of every query; `one(i)` asks query i.
  auto timeQueries = [&](auto one) {
    std::vector<double> nsPerQuery;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < queries; ++i) sink += one(i);
      const auto t1 = std::chrono::steady_clock::now();
      nsPerQuery.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(queries));
    }
    std::sort(nsPerQuery.begin(), nsPerQuery.end());
    return nsPerQuery;
  };
  const std::vector<double> nsPerQuery = timeQueries([&](size_t i) {
    const auto& [o, n, b, ro] = qs[i];
    return estimator.estimate(o, n, false, b, ro).durationNs;
  });
  const double median = nsPerQuery[nsPerQuery.size() / 2];

  // The same-place rule at its most crowded: every sample of one op and communicator, 8 sizes and 4 places of the
  // step (about 3,000 samples a place at 100,000), at random phases; each query asks for a place and a phase.
  const int kAllGather = static_cast<int>(ranklens::events::Op::kAllGather);
  ranklens::timing::History placed;
  placed.runs = history.runs;
  std::uniform_int_distribution<int> placeSize(20, 27), occurrence(0, 3);
  std::uniform_real_distribution<double> phase(0.0, 1.0);
  for (size_t i = 0; i < samples; ++i) {
    ranklens::timing::HistorySample s;
    s.op = kAllGather;
    s.nranks = 2;
    s.bytes = 1ull << placeSize(rng);
    s.durationNs = s.transferNs = static_cast<int64_t>((10'000 + static_cast<double>(s.bytes) / 150.0) * jitter(rng));
    s.run = static_cast<uint32_t>(i % 3);
    s.stepOccurrence = occurrence(rng);
    s.stepPhase = phase(rng);
    placed.samples.push_back(s);
  }
  const ranklens::timing::Estimator placedEstimator(placed, {});
  std::vector<std::tuple<uint64_t, int, double>> placedQs;
  for (size_t i = 0; i < queries; ++i) placedQs.emplace_back(1ull << placeSize(rng), occurrence(rng), phase(rng));
  const std::vector<double> placedNs = timeQueries([&](size_t i) {
    const auto& [b, place, at] = placedQs[i];
    return placedEstimator.estimate(kAllGather, 2, false, b, "", false, place, at).durationNs;
  });
  const double placedMedian = placedNs[placedNs.size() / 2];
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  std::printf("estimator: %zu samples, %zu queries x %d: median %.0f ns per query (min %.0f, max %.0f)\n", samples,
              queries, reps, median, nsPerQuery.front(), nsPerQuery.back());
  std::printf(
      "same place and phase (%zu samples over 32 places): median %.0f ns per query (min %.0f, max %.0f); "
      "checksum %lld\n",
      samples, placedMedian, placedNs.front(), placedNs.back(), static_cast<long long>(sink % 997));
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\n  \"commit\": \"" << commitOf() << "\",\n  \"device\": \"" << cpuName() << " (CPU; the estimator runs "
        << "on the host)\",\n  \"command\": \"" << command << "\",\n  \"date\": \"" << date
        << "\",\n  \"samples\": " << samples << ",\n  \"queries\": " << queries << ",\n  \"reps\": " << reps
        << ",\n  \"ns_per_query_median\": " << median << ",\n  \"ns_per_query_min\": " << nsPerQuery.front()
        << ",\n  \"ns_per_query_max\": " << nsPerQuery.back()
        << ",\n  \"same_place_ns_per_query_median\": " << placedMedian
        << ",\n  \"same_place_ns_per_query_min\": " << placedNs.front()
        << ",\n  \"same_place_ns_per_query_max\": " << placedNs.back() << ",\n  \"target_ns\": 5000\n}\n";
  }
  return 0;
}

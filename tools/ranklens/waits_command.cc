// SPDX-License-Identifier: Apache-2.0
#include "waits_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <vector>

#include "ranklens/peer_waits.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"
#include "text_format.h"
#include "trace_log.h"

namespace ranklens {
namespace tools {

namespace {

constexpr const char* kJsonFormatVersion = "1.0";

// The median of the steps' values after the warm-up; -1 when none is left.
int64_t medianAfter(const std::vector<timing::StepWaits>& steps, int warmup, int64_t timing::StepWaits::*field) {
  std::vector<int64_t> v;
  for (size_t i = static_cast<size_t>(std::max(warmup, 0)); i < steps.size(); ++i) v.push_back(steps[i].*field);
  if (v.empty()) return -1;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

std::string ms(int64_t ns) { return ns < 0 ? "-" : msText(static_cast<double>(ns), 2); }

}  // namespace

CLI::App* addWaitsCommand(CLI::App& trace, WaitsOptions* o) {
  auto* c = trace.add_subcommand(
      "waits",
      "Per rank of a recorded job: time waited for peers in collectives (its duration less the shortest "
      "over the ranks), per step, and which rank the others wait for");
  c->add_option("dir", o->dir, "Recorded trace root holding rank<R>/ of two or more ranks of one job")->required();
  c->add_option("--json", o->json, "Write every number as JSON to this file (- for stdout, instead of the table)");
  c->add_option("--warmup-steps", o->warmupSteps, "Steps left out of the per-step medians (default 5)")
      ->check(CLI::NonNegativeNumber);
  c->footer(
      "Example: ranklens trace waits /scratch/run42\n"
      "Needs the events clock's durations or the kernel clock's; each collective timed on at least two ranks.");
  return c;
}

int runWaits(const WaitsOptions& o) {
  const std::vector<std::string> dirs = trace::rankDirectories(o.dir);
  if (dirs.size() < 2) {
    std::cerr << "error: " << o.dir << ": need the recorded traces of at least two ranks of one job (rank<R>/ "
              << "directories), found " << dirs.size() << "\n";
    return 2;
  }
  trace::JobRecordings job;
  std::string error;
  if (!(error = job.open(dirs).message()).empty()) {
    std::cerr << "error: " << error << "\n";
    return 1;
  }
  for (const trace::Recording* rank : job.ranks) {
    for (const auto& p : rank->problems())
      std::cerr << "warning: " << p.describe() << "; the records before it are used\n";
    if (rank->manifest().mode != "record") {
      std::cerr << "error: " << rank->directory() << " is a " << rank->manifest().mode
                << " trace; waits are measured in recorded runs\n";
      return 2;
    }
  }
  const std::vector<timing::RankWaits> waits = timing::peerWaits(job.ranks);
  // The rank the others wait for: the one that waited least in total.
  const auto least =
      std::min_element(waits.begin(), waits.end(), [](const auto& a, const auto& b) { return a.waitNs < b.waitNs; });

  // Per rank, the medians over the steps after the warm-up: its wait, its step.
  std::vector<std::pair<int64_t, int64_t>> medians;
  for (const auto& w : waits)
    medians.emplace_back(medianAfter(w.steps, o.warmupSteps, &timing::StepWaits::waitNs),
                         medianAfter(w.steps, o.warmupSteps, &timing::StepWaits::stepNs));

  nlohmann::json doc = {{"format", "ranklens-waits"},
                        {"format_version", kJsonFormatVersion},
                        {"trace", o.dir},
                        {"warmup_steps", o.warmupSteps},
                        {"ranks", nlohmann::json::array()}};
  for (size_t i = 0; i < waits.size(); ++i) {
    const auto& w = waits[i];
    const auto [medianWait, medianStep] = medians[i];
    nlohmann::json steps = nlohmann::json::array();
    for (const auto& s : w.steps) steps.push_back({{"step", s.step}, {"step_ns", s.stepNs}, {"wait_ns", s.waitNs}});
    doc["ranks"].push_back(
        {{"rank", w.rank},
         {"dir", w.directory},
         {"collectives", w.collectives},
         {"last_to_arrive", w.lastToArrive},
         {"wait_ns", w.waitNs},
         {"median_wait_ns_per_step", medianWait < 0 ? nlohmann::json(nullptr) : nlohmann::json(medianWait)},
         {"median_step_ns", medianStep < 0 ? nlohmann::json(nullptr) : nlohmann::json(medianStep)},
         {"steps", steps}});
  }
  doc["waited_least"] = least->collectives > 0 ? nlohmann::json(least->rank) : nlohmann::json(nullptr);
  if (!o.json.empty()) return writeOutput(o.json, doc.dump(2) + "\n") ? 0 : 1;

  std::cout << "peer waits in " << o.dir << ": " << waits.size()
            << " ranks; a collective's wait on a rank is its duration less the shortest over the ranks\n\n"
            << std::left << std::setw(6) << "rank" << std::right << std::setw(13) << "collectives" << std::setw(20)
            << "last to arrive" << std::setw(16) << "waited" << std::setw(16) << "per step" << std::setw(14) << "step"
            << std::setw(10) << "of step"
            << "   (medians over the steps after " << o.warmupSteps << " warm-up)\n";
  for (size_t i = 0; i < waits.size(); ++i) {
    const auto& w = waits[i];
    const auto [medianWait, medianStep] = medians[i];
    std::ostringstream last, share;
    last << w.lastToArrive << " (" << (w.collectives ? 100 * w.lastToArrive / w.collectives : 0) << "%)";
    if (medianWait >= 0 && medianStep > 0)
      share << std::fixed << std::setprecision(1) << 100.0 * static_cast<double>(medianWait) / medianStep << "%";
    else
      share << "-";
    std::cout << std::left << std::setw(6) << w.rank << std::right << std::setw(13) << w.collectives << std::setw(20)
              << last.str() << std::setw(16) << ms(w.waitNs) << std::setw(16) << ms(medianWait) << std::setw(14)
              << ms(medianStep) << std::setw(10) << share.str() << "\n";
  }
  if (least->collectives == 0) {
    std::cout << "\nno collective was timed on two ranks: nothing to compare (were durations recorded?)\n";
  } else {
    std::cout << "\nrank " << least->rank << " waited least: the others wait for it (the slowest rank, or the one "
              << "whose work comes last in each step)\n"
              << "replaying a rank that waits: RANKLENS_PEER_PACING=recorded keeps its peers at their recorded pace "
                 "(docs/fidelity.md)\n";
  }
  return 0;
}

}  // namespace tools
}  // namespace ranklens

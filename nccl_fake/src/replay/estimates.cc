// SPDX-License-Identifier: Apache-2.0
// Estimated durations: the history and estimator loaded with the session, the estimate of a call or of a group's
// calls on a stream, and the step places of the same-place rule.
#include "estimates.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "session.h"

namespace nccl_fake {
namespace replay {

using ranklens::Status;

namespace {

// The estimator over e->history, for the configured target (transfer needs a history with transfer times).
void makeEstimator(Estimates* e, const ranklens::config::Settings& st) {
  ranklens::timing::Estimator::Options estimates;
  estimates.target = st.estimate_target == ranklens::config::EstimateTarget::kTransfer
                         ? ranklens::timing::EstimateTarget::kTransfer
                         : ranklens::timing::EstimateTarget::kObserved;
  if (estimates.target == ranklens::timing::EstimateTarget::kTransfer &&
      !ranklens::timing::hasTransferTimes(e->history)) {
    // A lone rank's own recording (no history) or a history of format 1 has no transfer times: what it has is
    // better than the fixed model.
    if (!st.history.empty())
      WARN(
          "replay: history %s has no transfer times (built from one rank of each job, or by a RankLens before "
          "format 2); estimates use observed durations (estimate_target observed). Rebuild it with `ranklens "
          "history build` from every rank's trace of each job",
          st.history.c_str());
    estimates.target = ranklens::timing::EstimateTarget::kObserved;
  }
  e->estimator = std::make_unique<ranklens::timing::Estimator>(e->history, estimates);
  e->historySpansNodes = std::any_of(e->history.samples.begin(), e->history.samples.end(),
                                     [](const ranklens::timing::HistorySample& h) { return h.crossesNodes; });
}

}  // namespace

Status loadEstimates(Estimates* e, const ranklens::config::Settings& st, const ranklens::trace::Recording* recording) {
  e->all = st.timing == ranklens::config::TimingSource::kEstimated;
  std::string error;
  if (!st.history.empty()) {
    if (!(error = ranklens::timing::loadHistory(st.history, &e->history).message()).empty())
      return Status::invalidUsage("history: " + error);
  } else if (e->all) {
    return Status::invalidUsage(
        "timing: estimated needs a duration history: set RANKLENS_HISTORY to a file built "
        "with `ranklens history build <recorded traces> -o FILE`");
  } else if (recording != nullptr && recording->manifest().mode == "record" &&
             !(error = ranklens::timing::addRecordedRun(*recording, &e->history).message()).empty()) {
    WARN("replay: estimates use a fixed model: %s", error.c_str());
  }
  makeEstimator(e, st);
  // Locality: the recorded job's ranks per node, or without a recording the virtual topology's.
  e->localWorldSize =
      recording != nullptr ? ranklens::timing::localWorldSize(recording->manifest()) : st.ranks_per_node;
  return Status::ok();
}

void countEstimate(Counters& c, const ranklens::timing::Estimate& e) {
  if (e.extrapolated) c.estimatesExtrapolated++;
  if (e.benchmark) c.estimatesFromBenchmarks++;
}

// Grouped calls are estimated one by one here; holdGroup holds each stream for the longest of them.
int64_t estimateNs(Session* s, const CallInfo& info, uint64_t bytes) {
  Estimates& e = s->estimates;
  const int nranks = info.comm->nRanks;
  const bool crosses = ranklens::timing::crossesNodes(e.localWorldSize, nranks);
  if (crosses && !e.historySpansNodes && !e.warnedLocality) {
    e.warnedLocality = true;
    WARN(
        "replay: communicator %lu (%d ranks) spans nodes (more than %d ranks per node), but no call in the duration "
        "history did: its estimates assume the history's one-node bandwidth and are too short. Add a recording of "
        "a multi-node job (ranklens history build --append) or the cluster's nccl-tests output across nodes "
        "(ranklens history import-nccl-tests --append) to the history",
        static_cast<unsigned long>(info.comm->id), nranks, e.localWorldSize);
  }
  const ranklens::timing::Estimate estimate = e.estimator->estimate(
      static_cast<int>(info.op), nranks, crosses, bytes, info.comm->name, false, info.stepOccurrence, info.stepPhase);
  countEstimate(s->counters, estimate);
  return estimate.durationNs;
}

ranklens::timing::Estimate estimateGroup(const Session& s, const CallInfo& first, uint64_t bytes, int occurrence) {
  const Estimates& e = s.estimates;
  const int nranks = first.comm->nRanks;
  return e.estimator->estimate(static_cast<int>(first.op), nranks,
                               ranklens::timing::crossesNodes(e.localWorldSize, nranks), bytes, first.comm->name, true,
                               occurrence, first.stepPhase);
}

void noteStage(const char* name, int64_t timeNs) {
  Session* s = loaded;
  if (s == nullptr || std::strcmp(name, "step") != 0) return;
  std::lock_guard<std::mutex> lock(s->mu);
  s->estimates.stepOccurrences.startStep(timeNs);
}

bool simulatedMicroseconds(const CallInfo& info, float* us) {
  Session* s = loaded;
  if (s == nullptr || !s->estimates.estimator) return false;
  const Estimates& e = s->estimates;
  const int nranks = info.comm->nRanks;
  const ranklens::timing::Estimate estimate =
      e.estimator->estimate(static_cast<int>(info.op), nranks, ranklens::timing::crossesNodes(e.localWorldSize, nranks),
                            bytesOf(info), info.comm->name);
  *us = static_cast<float>(static_cast<double>(estimate.durationNs) / 1000.0);
  return true;
}

}  // namespace replay
}  // namespace nccl_fake

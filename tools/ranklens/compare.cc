// SPDX-License-Identifier: Apache-2.0
#include "compare.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "ranklens/host_time.h"
#include "text_format.h"
#include "trace_log.h"

namespace ranklens {
namespace tools {
namespace {

using events::Call;
using events::CommInit;
using nlohmann::json;

constexpr const char* kJsonFormatVersion = "1.4";  // of the --json document: minor for added keys, major for changes
                                                   // (1.1: "estimated")

// ------------------------------------------------------------------------------------------------ communicators

struct CommMatching {
  std::map<uint64_t, uint64_t> replayedOf, recordedOf;  // commId on one side -> commId on the other
  std::vector<const CommInit*> onlyRecorded, onlyReplayed;
};

bool sameSignature(const Call& a, const Call& b) {
  return a.op == b.op && a.datatype == b.datatype && a.count == b.count && a.rootOrPeer == b.rootOrPeer &&
         a.redop == b.redop;
}

// A replayed communicator stands for the recorded one its replay bound it to (CommBinding records, written by the
// replay library once a binding is final). The others, and every communicator of a trace without such records
// (a recording, or a replay from before format 1.3), pair by identity: the same size, rank, creation call and
// (matched) parent, in creation order, which is what the same program repeats.
CommMatching matchCommunicators(const EventLog& recorded, const EventLog& replayed) {
  auto byCreation = [](const EventLog& log) {
    std::vector<const CommInit*> comms;
    for (const auto& comm : log.comms) comms.push_back(&comm);
    std::stable_sort(comms.begin(), comms.end(),
                     [](const CommInit* a, const CommInit* b) { return a->commId < b->commId; });
    return comms;
  };
  const auto recordedComms = byCreation(recorded), replayedComms = byCreation(replayed);
  CommMatching matching;
  auto known = [](const std::vector<const CommInit*>& comms, uint64_t id) {
    return std::any_of(comms.begin(), comms.end(), [id](const CommInit* c) { return c->commId == id; });
  };
  for (const auto& b : replayed.bindings) {
    const uint64_t rec = b.recordedCommId;
    if (!known(recordedComms, rec) || !known(replayedComms, b.commId) || matching.replayedOf.count(rec) ||
        matching.recordedOf.count(b.commId))
      continue;
    matching.replayedOf[rec] = b.commId;
    matching.recordedOf[b.commId] = rec;
  }
  for (const CommInit* rec : recordedComms) {
    if (matching.replayedOf.count(rec->commId)) continue;
    auto sameParent = [&](const CommInit* rep) {
      if (rec->parentId < 0) return rep->parentId < 0;
      auto parent = matching.replayedOf.find(static_cast<uint64_t>(rec->parentId));
      return parent != matching.replayedOf.end() && rep->parentId >= 0 &&
             parent->second == static_cast<uint64_t>(rep->parentId);
    };
    auto match = std::find_if(replayedComms.begin(), replayedComms.end(), [&](const CommInit* rep) {
      return !matching.recordedOf.count(rep->commId) && rep->nranks == rec->nranks && rep->rank == rec->rank &&
             rep->how == rec->how && sameParent(rep);
    });
    if (match == replayedComms.end()) {
      matching.onlyRecorded.push_back(rec);
      continue;
    }
    matching.replayedOf[rec->commId] = (*match)->commId;
    matching.recordedOf[(*match)->commId] = rec->commId;
  }
  for (const CommInit* rep : replayedComms)
    if (!matching.recordedOf.count(rep->commId)) matching.onlyReplayed.push_back(rep);
  return matching;
}

// ------------------------------------------------------------------------------------------------ signatures

// Communicators as both traces can name them: a recorded commId (matched or not), or a replayed one without a match.
using CommKey = std::pair<bool, uint64_t>;                            // (replay-only, commId)
using Signature = std::tuple<CommKey, int, int, uint64_t, int, int>;  // comm, op, dtype, count, root/peer, redop

Signature signatureOf(const Call& call, const CommKey& comm) {
  return {comm, call.op, call.datatype, call.count, call.rootOrPeer, call.redop};
}

CommKey recordedKey(const Call& call) { return {false, call.commId}; }
CommKey replayedKey(const Call& call, const CommMatching& matching) {
  auto it = matching.recordedOf.find(call.commId);
  return it != matching.recordedOf.end() ? CommKey{false, it->second} : CommKey{true, call.commId};
}

struct MatchCounts {
  uint64_t recorded = 0, replayed = 0, matched = 0;
  bool complete() const { return matched == std::max(recorded, replayed); }
  double percent() const {
    const uint64_t larger = std::max(recorded, replayed);
    return larger == 0 ? 100.0 : 100.0 * static_cast<double>(matched) / static_cast<double>(larger);
  }
};

// Multiset match: each signature matches min(recorded, replayed) times.
MatchCounts countMatches(const EventLog& recorded, const EventLog& replayed, const CommMatching& matching,
                         uint64_t aboveBytes, bool sizeFilter) {
  std::map<Signature, std::pair<uint64_t, uint64_t>> counts;
  MatchCounts result;
  for (const auto& call : recorded.calls) {
    if (sizeFilter && call.bytes <= aboveBytes) continue;
    counts[signatureOf(call, recordedKey(call))].first++;
    result.recorded++;
  }
  for (const auto& call : replayed.calls) {
    if (sizeFilter && call.bytes <= aboveBytes) continue;
    counts[signatureOf(call, replayedKey(call, matching))].second++;
    result.replayed++;
  }
  for (const auto& [signature, pair] : counts) result.matched += std::min(pair.first, pair.second);
  return result;
}

// ------------------------------------------------------------------------------------------------ first divergence

struct Divergence {
  uint64_t recordedComm = 0, replayedComm = 0;
  CallKind kind = CallKind::kCollective;
  int peer = -1;
  size_t position = 0;             // index in that communicator's sequence (collectives, or Send/Recv with one peer)
  const Call* recorded = nullptr;  // null: the sequence ended on this side
  const Call* replayed = nullptr;
  std::tuple<int64_t, int, int64_t> order;  // where it happened in the recorded program (see findDivergences)
};

// Each communicator's calls as sequences: collectives, and Send/Recv per peer, each ordered by seq.
using SequenceId = std::pair<int, int>;  // CallKind, peer
using Sequences = std::map<SequenceId, std::vector<const Call*>>;
std::map<uint64_t, Sequences> sequencesOf(const EventLog& log) {
  std::map<uint64_t, Sequences> byComm;
  for (const auto& call : log.calls) {
    const CallKind kind = callKind(call.op);
    byComm[call.commId][{static_cast<int>(kind), kind == CallKind::kCollective ? -1 : call.rootOrPeer}].push_back(
        &call);
  }
  for (auto& [comm, sequences] : byComm)
    for (auto& [id, calls] : sequences)
      std::stable_sort(calls.begin(), calls.end(), [](const Call* a, const Call* b) { return a->seq < b->seq; });
  return byComm;
}

// Divergences of every matched communicator's sequences, the first first: ordered by the recorded program's call
// order. A call only the replay has is placed just after the recorded counterpart of the replay's last agreeing call
// before it (replayed calls in submission order), e.g. an extra step lands after the last recorded step.
std::vector<Divergence> findDivergences(const EventLog& recorded, const EventLog& replayed,
                                        const CommMatching& matching) {
  std::vector<Divergence> found;
  std::map<int64_t, int64_t> recordedOfAgreeing;  // replayed call index -> recorded call index, where they agree
  auto recordedIndex = [&](const Call* call) { return static_cast<int64_t>(call - recorded.calls.data()); };
  auto replayedIndex = [&](const Call* call) { return static_cast<int64_t>(call - replayed.calls.data()); };
  auto recordedByComm = sequencesOf(recorded), replayedByComm = sequencesOf(replayed);
  for (const auto& [recordedComm, replayedComm] : matching.replayedOf) {
    Sequences& recordedSequences = recordedByComm[recordedComm];
    Sequences& replayedSequences = replayedByComm[replayedComm];
    std::map<SequenceId, int> ids;
    for (const auto& entry : recordedSequences) ids[entry.first];
    for (const auto& entry : replayedSequences) ids[entry.first];
    for (const auto& [id, unused] : ids) {
      const auto& rec = recordedSequences[id];
      const auto& rep = replayedSequences[id];
      for (size_t i = 0; i < std::max(rec.size(), rep.size()); ++i) {
        const Call* a = i < rec.size() ? rec[i] : nullptr;
        const Call* b = i < rep.size() ? rep[i] : nullptr;
        if (a && b && sameSignature(*a, *b)) {
          recordedOfAgreeing[replayedIndex(b)] = recordedIndex(a);
          continue;
        }
        found.push_back({recordedComm, replayedComm, static_cast<CallKind>(id.first), id.second, i, a, b, {}});
        break;
      }
    }
  }
  for (Divergence& d : found) {
    const int64_t replayedAt = d.replayed ? replayedIndex(d.replayed) : INT64_MAX;
    if (d.recorded) {
      d.order = {recordedIndex(d.recorded), 0, replayedAt};
      continue;
    }
    auto before = recordedOfAgreeing.lower_bound(replayedAt);
    d.order = {before == recordedOfAgreeing.begin() ? -1 : std::prev(before)->second, 1, replayedAt};
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const Divergence& a, const Divergence& b) { return a.order < b.order; });
  return found;
}

// ------------------------------------------------------------------------------------------------ steps

// Step k lasts from its marker to the next one (stepMarks: "step" markers, else the adapter's "optimizer" ones).
std::map<int64_t, int64_t> stepDurations(const StepMarks& marks) {
  std::map<int64_t, int64_t> durations;
  for (const auto& [step, start] : marks.starts) {
    auto next = marks.starts.find(step + 1);
    if (next != marks.starts.end()) durations[step] = next->second - start;
  }
  return durations;
}

double median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

struct StepComparison {
  struct Step {
    int64_t step, recordedNs, replayedNs;
    double relativeError;
  };
  const char* markerKind = "step";  // the markers steps were taken from (recorded; replayed)
  const char* replayedMarkerKind = "step";
  size_t recordedMarkers = 0, replayedMarkers = 0;
  int64_t firstCompared = -1;  // first step after the warm-up
  std::vector<Step> steps;
  double medianAbsError = NAN, medianError = NAN, medianRecordedNs = NAN, medianReplayedNs = NAN;
};

StepComparison compareSteps(const EventLog& recorded, const EventLog& replayed, int64_t warmupSteps) {
  StepComparison result;
  const StepMarks recordedMarks = stepMarks(recorded), replayedMarks = stepMarks(replayed);
  result.markerKind = recordedMarks.kind;
  result.replayedMarkerKind = replayedMarks.kind;
  result.recordedMarkers = recordedMarks.starts.size();
  result.replayedMarkers = replayedMarks.starts.size();
  if (std::string(recordedMarks.kind) != replayedMarks.kind) return result;  // not the same program's marks
  const auto rec = stepDurations(recordedMarks), rep = stepDurations(replayedMarks);
  if (rec.empty() || rep.empty()) return result;
  // Warm-up counts from the first step either trace marked, so both skip the same step numbers.
  result.firstCompared = std::min(rec.begin()->first, rep.begin()->first) + warmupSteps;
  std::vector<double> absErrors, errors, recordedNs, replayedNs;
  for (const auto& [step, recordedDuration] : rec) {
    auto other = rep.find(step);
    if (step < result.firstCompared || other == rep.end() || recordedDuration <= 0) continue;
    const double error = static_cast<double>(other->second - recordedDuration) / static_cast<double>(recordedDuration);
    result.steps.push_back({step, recordedDuration, other->second, error});
    absErrors.push_back(std::fabs(error));
    errors.push_back(error);
    recordedNs.push_back(static_cast<double>(recordedDuration));
    replayedNs.push_back(static_cast<double>(other->second));
  }
  result.medianAbsError = median(absErrors);
  result.medianError = median(errors);
  result.medianRecordedNs = median(recordedNs);
  result.medianReplayedNs = median(replayedNs);
  return result;
}

// ------------------------------------------------------------------------------------------------ timing

struct OpTime {
  int64_t recordedNs = 0, replayedNs = 0;
  uint64_t recordedRecords = 0, replayedRecords = 0;
};

// Sum of Timing.durationNs per op; failed measurements (-1) are left out, graph-captured ones add 0.
std::map<int, OpTime> timePerOp(const EventLog& recorded, const EventLog& replayed) {
  std::map<int, OpTime> perOp;
  for (const auto& timing : recorded.timings) {
    if (timing.durationNs < 0) continue;
    perOp[timing.op].recordedNs += timing.durationNs;
    perOp[timing.op].recordedRecords++;
  }
  for (const auto& timing : replayed.timings) {
    if (timing.durationNs < 0) continue;
    perOp[timing.op].replayedNs += timing.durationNs;
    perOp[timing.op].replayedRecords++;
  }
  return perOp;
}

// The replayed Timing records whose duration the estimator gave (Timing.clock kClockEstimated, format 1.5): the
// calls the recording did not time (on_mismatch: estimate) or every call (timing: estimated).
struct EstimatedCalls {
  std::vector<const trace::Timing*> timings;  // in trace order
  std::map<int, size_t> perOp;
  size_t replayedTimings = 0;
};

EstimatedCalls estimatedCalls(const EventLog& replayed) {
  EstimatedCalls e;
  e.replayedTimings = replayed.timings.size();
  for (const auto& timing : replayed.timings) {
    if (timing.clock != trace::kClockEstimated) continue;
    e.timings.push_back(&timing);
    e.perOp[timing.op]++;
  }
  return e;
}

// The recorded host time of the NCCL calls (Call.hostNs outside groups, GroupEnd.hostNs for groups): how long each
// kept its calling thread in the real job, which the replay reproduces (host_time: replay), or up to a cap per
// operation (host_time: own).
struct HostTime {
  std::string what;         // op name, or "Group"
  std::vector<int64_t> ns;  // sorted
  int64_t ownCap = -1;      // timing::ownHostCapNs; -1: none
  int64_t sum() const { return std::accumulate(ns.begin(), ns.end(), int64_t{0}); }
  int64_t ownSum() const {
    int64_t total = 0;
    for (int64_t v : ns) total += ownCap >= 0 ? std::min(v, ownCap) : v;
    return total;
  }
  int64_t quantile(double q) const {
    return ns.empty() ? 0 : ns[std::min(ns.size() - 1, static_cast<size_t>(q * static_cast<double>(ns.size())))];
  }
};

std::vector<HostTime> hostTimes(const EventLog& recorded) {
  std::map<std::string, HostTime> byName;
  for (const auto& call : recorded.calls)
    if (call.groupId == 0 && call.hostNs >= 0) byName[opText(call.op)].ns.push_back(call.hostNs);
  for (const auto& group : recorded.groupEnds)
    if (group.hostNs >= 0) byName["Group"].ns.push_back(group.hostNs);
  std::vector<HostTime> out;
  for (auto& [name, h] : byName) {
    h.what = name;
    std::sort(h.ns.begin(), h.ns.end());
    h.ownCap = timing::ownHostCapNs(h.ns);
    out.push_back(std::move(h));
  }
  return out;
}

// ------------------------------------------------------------------------------------------------ report

struct Comparison {
  const EventLog *recorded, *replayed;
  CommMatching comms;
  MatchCounts raw, training;
  std::vector<Divergence> divergences;
  StepComparison steps;
  std::map<int, OpTime> time;
  std::vector<HostTime> host;
  EstimatedCalls estimated;
  bool matches() const { return raw.complete() && divergences.empty(); }
};

json numberOrNull(double value) { return std::isnan(value) ? json(nullptr) : json(value); }

json callJson(const Call* call) {
  if (!call) return nullptr;
  return {{"comm", call->commId},
          {"seq", call->seq},
          {"op", opText(call->op)},
          {"datatype", events::datatypeName(call->datatype)},
          {"count", call->count},
          {"root_or_peer", call->rootOrPeer},
          {"redop", redopName(call->redop)},
          {"bytes", call->bytes}};
}

json commJson(const CommInit& comm) {
  return {{"id", comm.commId}, {"nranks", comm.nranks},   {"rank", comm.rank},
          {"how", comm.how},   {"parent", comm.parentId}, {"name", comm.name}};
}

json traceJson(const EventLog& log) {
  json problems = json::array();
  for (const auto& problem : log.problems) problems.push_back(problem.describe());
  return {{"dir", log.directory},
          {"mode", log.manifest.mode},
          {"rank", log.manifest.rank},
          {"closed", log.manifest.closed},
          {"communicators", log.comms.size()},
          {"calls", log.calls.size()},
          {"timings", log.timings.size()},
          {"problems", problems},
          {"cpu_model", log.manifest.cpu_model},
          {"cpus", log.manifest.cpus},
          {"gpu_name", log.manifest.gpu_name},
          {"shared_gpu", log.manifest.shared_gpu}};
}

json countsJson(const MatchCounts& counts) {
  return {{"recorded_calls", counts.recorded},
          {"replayed_calls", counts.replayed},
          {"matched_calls", counts.matched},
          {"match_percent", counts.percent()}};
}

// null when comparable, else the reasons why not (trace::stepTimeIncomparable).
json incomparableJson(const Comparison& c) {
  json reasons = json::array();
  for (const auto& why : trace::stepTimeIncomparable(c.recorded->manifest, c.replayed->manifest))
    reasons.push_back({{"brief", why.brief}, {"detail", why.detail}});
  return {{"comparable", reasons.empty()}, {"reasons", reasons}};
}

json reportJson(const Comparison& c, const CompareOptions& options) {
  json comms = {{"matched", json::array()}, {"only_recorded", json::array()}, {"only_replayed", json::array()}};
  for (const auto& [rec, rep] : c.comms.replayedOf) comms["matched"].push_back({{"recorded", rec}, {"replayed", rep}});
  for (const CommInit* comm : c.comms.onlyRecorded) comms["only_recorded"].push_back(commJson(*comm));
  for (const CommInit* comm : c.comms.onlyReplayed) comms["only_replayed"].push_back(commJson(*comm));

  json divergence = nullptr;
  if (!c.divergences.empty()) {
    const Divergence& d = c.divergences.front();
    divergence = {{"recorded_comm", d.recordedComm},  {"replayed_comm", d.replayedComm},
                  {"sequence", callKindName(d.kind)}, {"peer", d.peer},
                  {"position", d.position},           {"recorded", callJson(d.recorded)},
                  {"replayed", callJson(d.replayed)}};
  }

  json perStep = json::array();
  for (const auto& s : c.steps.steps)
    perStep.push_back({{"step", s.step},
                       {"recorded_ns", s.recordedNs},
                       {"replayed_ns", s.replayedNs},
                       {"relative_error", s.relativeError}});
  json steps = {{"marker", c.steps.markerKind},
                {"replayed_marker", c.steps.replayedMarkerKind},
                {"recorded_markers", c.steps.recordedMarkers},
                {"replayed_markers", c.steps.replayedMarkers},
                {"warmup_steps", options.warmupSteps},
                {"first_compared_step", c.steps.firstCompared},
                {"compared", c.steps.steps.size()},
                {"median_abs_relative_error", numberOrNull(c.steps.medianAbsError)},
                {"median_relative_error", numberOrNull(c.steps.medianError)},
                {"median_recorded_ns", numberOrNull(c.steps.medianRecordedNs)},
                {"median_replayed_ns", numberOrNull(c.steps.medianReplayedNs)},
                {"per_step", perStep}};

  json timing = json::array();
  for (const auto& [op, t] : c.time)
    timing.push_back({{"op", opText(op)},
                      {"recorded_ns", t.recordedNs},
                      {"replayed_ns", t.replayedNs},
                      {"recorded_records", t.recordedRecords},
                      {"replayed_records", t.replayedRecords}});

  json host = json::array();
  for (const auto& h : c.host)
    host.push_back({{"what", h.what},
                    {"calls", h.ns.size()},
                    {"sum_ns", h.sum()},
                    {"median_ns", h.quantile(0.5)},
                    {"p90_ns", h.quantile(0.9)},
                    {"max_ns", h.quantile(1.0)},
                    {"own_cap_ns", h.ownCap >= 0 ? json(h.ownCap) : json(nullptr)},
                    {"own_sum_ns", h.ownSum()}});

  json estimatedPerOp = json::object(), estimatedList = json::array();
  for (const auto& [op, n] : c.estimated.perOp) estimatedPerOp[opText(op)] = n;
  for (const trace::Timing* t : c.estimated.timings)
    estimatedList.push_back({{"comm", t->commId},
                             {"seq", t->seq},
                             {"op", opText(t->op)},
                             {"peer", t->peer},
                             {"group", t->groupId},
                             {"duration_ns", t->durationNs}});
  json estimated = {{"count", c.estimated.timings.size()},
                    {"replayed_timings", c.estimated.replayedTimings},
                    {"per_op", estimatedPerOp},
                    {"calls", estimatedList}};

  json training = countsJson(c.training);
  training["above_bytes"] = options.smallBytes;
  return {{"format", "ranklens-compare"},
          {"format_version", kJsonFormatVersion},
          {"recorded", traceJson(*c.recorded)},
          {"replayed", traceJson(*c.replayed)},
          {"communicators", comms},
          {"signatures", {{"raw", countsJson(c.raw)}, {"training", training}}},
          {"divergent_sequences", c.divergences.size()},
          {"first_divergence", divergence},
          {"steps", steps},
          {"machines_differ", trace::machineDifference(c.recorded->manifest, c.replayed->manifest)},
          {"step_time_comparable", incomparableJson(c)},
          {"timing", timing},
          {"estimated", estimated},
          {"recorded_host_time", host},
          {"match", c.matches()}};
}

void printCall(const char* side, const Call* call, std::ostream& out) {
  out << "  " << std::left << std::setw(9) << side;
  if (!call) {
    out << "(no call: the sequence ends here)\n" << std::right;
    return;
  }
  out << "comm #" << std::setw(3) << call->commId << " seq " << std::setw(7) << call->seq << " " << std::setw(13)
      << opText(call->op) << " " << std::setw(9) << events::datatypeName(call->datatype) << " count " << std::setw(10)
      << call->count << " root/peer " << std::setw(4)
      << (call->rootOrPeer >= 0 ? std::to_string(call->rootOrPeer) : std::string("-")) << " " << redopName(call->redop)
      << "\n"
      << std::right;
}

// The two traces and their communicators: how many matched, and those only one side has.
void textCommunicators(const Comparison& c, std::ostream& out) {
  auto describe = [](const EventLog& log) {
    return log.directory + "  (" + (log.manifest.mode.empty() ? "?" : log.manifest.mode) + ", rank " +
           std::to_string(log.manifest.rank) + ", " + std::to_string(log.calls.size()) + " calls, " +
           std::to_string(log.comms.size()) + " communicators)";
  };
  out << "recorded  " << describe(*c.recorded) << "\n"
      << "replayed  " << describe(*c.replayed) << "\n\n";

  out << "communicators: " << c.comms.replayedOf.size() << " matched, " << c.comms.onlyRecorded.size()
      << " only recorded, " << c.comms.onlyReplayed.size() << " only replayed\n";
  auto listComms = [&](const char* side, const std::vector<const CommInit*>& comms) {
    for (const CommInit* comm : comms)
      out << "  only " << side << ": #" << comm->commId << " rank " << comm->rank << " of " << comm->nranks << " "
          << comm->how << (comm->parentId >= 0 ? " of #" + std::to_string(comm->parentId) : std::string())
          << (comm->name.empty() ? "" : "  \"" + comm->name + "\"") << "\n";
  };
  listComms("recorded", c.comms.onlyRecorded);
  listComms("replayed", c.comms.onlyReplayed);
}

void textSignatures(const Comparison& c, const CompareOptions& options, std::ostream& out) {
  out << "\n"
      << std::left << std::setw(22) << "signatures" << std::right << std::setw(10) << "recorded" << std::setw(10)
      << "replayed" << std::setw(10) << "matched" << std::setw(10) << "match"
      << "\n";
  auto row = [&](const std::string& label, const MatchCounts& counts) {
    out << "  " << std::left << std::setw(20) << label << std::right << std::setw(10) << counts.recorded
        << std::setw(10) << counts.replayed << std::setw(10) << counts.matched << std::setw(9) << std::fixed
        << std::setprecision(2) << counts.percent() << "%\n";
  };
  row("all calls", c.raw);
  row("> " + bytesText(options.smallBytes), c.training);
}

void textFirstDivergence(const Comparison& c, std::ostream& out) {
  out << "\nfirst divergence: ";
  if (c.divergences.empty()) {
    out << "none\n";
  } else {
    const Divergence& d = c.divergences.front();
    out << "comm #" << d.recordedComm << " (replayed #" << d.replayedComm << "), " << callKindName(d.kind)
        << (d.kind == CallKind::kCollective ? std::string() : " peer " + std::to_string(d.peer)) << " call "
        << d.position << " (" << c.divergences.size()
        << (c.divergences.size() == 1 ? " sequence diverges" : " sequences diverge") << ")\n";
    printCall("recorded", d.recorded, out);
    printCall("replayed", d.replayed, out);
  }
}

void textSteps(const Comparison& c, const CompareOptions& options, std::ostream& out) {
  out << "\nsteps: ";
  const StepComparison& s = c.steps;
  if (s.recordedMarkers == 0 || s.replayedMarkers == 0) {
    out << "no \"step\" or \"optimizer\" markers in the " << (s.recordedMarkers == 0 ? "recorded" : "replayed")
        << " trace (ranklensMarkStage(\"step\", i), e.g. train_gpt.py --mark-steps; the Python adapter marks "
           "optimizer steps)\n";
  } else if (std::string(s.markerKind) != s.replayedMarkerKind) {
    out << "not compared: the recorded trace marks steps with \"" << s.markerKind << "\", the replayed one with \""
        << s.replayedMarkerKind << "\"\n";
  } else if (s.steps.empty()) {
    out << "none to compare after " << options.warmupSteps << " warm-up steps (" << s.recordedMarkers << " / "
        << s.replayedMarkers << " markers)\n";
  } else {
    out << s.steps.size() << " compared (from step " << s.firstCompared << ", " << options.warmupSteps
        << " warm-up skipped; \"" << s.markerKind << "\" markers)\n"
        << "  median step  recorded " << msText(s.medianRecordedNs) << ", replayed " << msText(s.medianReplayedNs)
        << "\n  median error |" << percentText(s.medianAbsError, false) << "|, signed "
        << percentText(s.medianError, true) << "  ((replayed - recorded) / recorded per step)\n";
    const auto incomparable = trace::stepTimeIncomparable(c.recorded->manifest, c.replayed->manifest);
    if (incomparable.empty()) {
      out << "  comparable: the same GPU model"
          << (c.replayed->manifest.gpu_name.empty() ? std::string() : " (" + c.replayed->manifest.gpu_name + ")")
          << " and host, so this error measures the replay's timing fidelity\n";
    } else {
      out << "  not comparable, so this error is no measure of the replay's timing fidelity:";
      for (const auto& why : incomparable) out << "\n    " << why.detail;
      out << "\n  (replay on a machine like the recording's, from a recording with one GPU per rank; "
          << "docs/fidelity.md)\n";
    }
  }
}

// Communication time per operation (the Timing records' sums), and the replay's estimated durations.
void textTimes(const Comparison& c, std::ostream& out) {
  out << "\n"
      << std::left << std::setw(22) << "Timing.durationNs sum" << std::right << std::setw(14) << "recorded"
      << std::setw(14) << "replayed" << std::setw(10) << "ratio"
      << "\n";
  if (c.time.empty()) out << "  (no Timing records)\n";
  for (const auto& [op, t] : c.time) {
    out << "  " << std::left << std::setw(20) << opText(op) << std::right << std::setw(14) << msText(t.recordedNs)
        << std::setw(14) << msText(t.replayedNs) << std::setw(9);
    if (t.recordedNs > 0)
      out << std::fixed << std::setprecision(3) << static_cast<double>(t.replayedNs) / t.recordedNs << "x\n";
    else
      out << "-"
          << " \n";
  }
  if (!c.estimated.timings.empty()) {
    const auto& e = c.estimated;
    out << "\nestimated durations: " << e.timings.size() << " of " << e.replayedTimings
        << " replayed Timing records (no recorded duration: the estimator's;";
    for (const auto& [op, n] : e.perOp) out << " " << opText(op) << " " << n;
    out << ")\n";
    constexpr size_t kListed = 10;  // the JSON report lists them all
    for (size_t i = 0; i < e.timings.size() && i < kListed; ++i) {
      const trace::Timing& t = *e.timings[i];
      out << "  replayed comm #" << t.commId << "  seq " << std::left << std::setw(8) << t.seq << std::setw(14)
          << opText(t.op) << std::right << std::setw(12) << msText(static_cast<double>(t.durationNs))
          << (t.groupId ? "  (group)" : "") << "\n";
    }
    if (e.timings.size() > kListed) out << "  ... " << e.timings.size() - kListed << " more (--json lists all)\n";
  }
}

void textHostTimes(const Comparison& c, std::ostream& out) {
  if (!c.host.empty()) {
    out << "\n"
        << std::left << std::setw(22) << "recorded host time" << std::right << std::setw(8) << "calls" << std::setw(14)
        << "sum" << std::setw(12) << "median" << std::setw(12) << "p90" << std::setw(12) << "max" << std::setw(12)
        << "own cap" << std::setw(14) << "own sum"
        << "   (time on the calling thread; the replay keeps each call at least this long, with host_time: own at "
           "most the cap)\n";
    for (const auto& h : c.host)
      out << "  " << std::left << std::setw(20) << h.what << std::right << std::setw(8) << h.ns.size() << std::setw(14)
          << msText(static_cast<double>(h.sum())) << std::setw(12) << msText(static_cast<double>(h.quantile(0.5)))
          << std::setw(12) << msText(static_cast<double>(h.quantile(0.9))) << std::setw(12)
          << msText(static_cast<double>(h.quantile(1.0))) << std::setw(12)
          << (h.ownCap >= 0 ? msText(static_cast<double>(h.ownCap)) : std::string("-")) << std::setw(14)
          << msText(static_cast<double>(h.ownSum())) << "\n";
  }
}

void reportText(const Comparison& c, const CompareOptions& options, std::ostream& out) {
  textCommunicators(c, out);
  textSignatures(c, options, out);
  textFirstDivergence(c, out);
  textSteps(c, options, out);
  textTimes(c, out);
  textHostTimes(c, out);
  out << "\nresult: " << (c.matches() ? "match" : "differ") << "\n";
}

bool loadSide(const char* role, const std::string& path, int rank, EventLog* log, std::ostream& err) {
  std::string rankDir;
  Status read = resolveRankDirectory(path, rank, &rankDir);
  if (read.isOk()) read = readEventLog(rankDir, log);
  if (!read.isOk()) {
    err << "error: " << role << " trace: " << read.message() << "\n";
    return false;
  }
  return true;
}

}  // namespace

CLI::App* addCompareCommand(CLI::App& app, CompareOptions* options) {
  auto* cmd =
      app.add_subcommand("compare",
                         "Compare a replayed rank's trace with the recorded one: communicators, call signatures, first "
                         "divergence, step times, communication time");
  cmd->add_option("recorded", options->recorded,
                  "Recorded trace: a rank directory (trace/rank3) or a trace root (with --rank, or holding one rank)")
      ->required();
  cmd->add_option("replayed", options->replayed, "Replayed trace: a rank directory or a trace root, as above")
      ->required();
  cmd->add_option("-r,--rank", options->rank, "Rank to pick, as rank<R>/, inside trace roots")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-w,--warmup-steps", options->warmupSteps,
                  "Steps left out of the step-time comparison, counted from the first marked step")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("-s,--small-bytes", options->smallBytes,
                  "Calls of at most this many bytes (Call.bytes) are left out of the 'training tensors' match")
      ->capture_default_str();
  cmd->add_option("-j,--json", options->jsonPath,
                  "Also write every number as JSON to FILE ('-': to stdout, instead of the table)");
  cmd->add_flag("-q,--quiet", options->quiet, "No table and no warnings: only the exit code (and --json)");
  cmd->footer(
      "Examples:\n"
      "  ranklens compare /scratch/run42/rank3 /tmp/ranklens-1700000000-1234/rank3\n"
      "  ranklens compare /scratch/run42 /tmp/replay --rank 3 --warmup-steps 10 --json compare.json\n"
      "  ranklens compare rec/rank1 rep/rank1 --small-bytes 1048576 --quiet && echo same calls\n"
      "Communicators match as the replay bound them (its CommBinding records), else by creation order among those\n"
      "with the same size, rank, creation call and parent.\n"
      "A call's signature is (communicator, op, datatype, count, root/peer, reduction); 'match' counts each\n"
      "signature min(recorded, replayed) times, over max(recorded calls, replayed calls). The first divergence\n"
      "walks each communicator's collectives and each peer's Send/Recv in sequence order. Step k lasts from the\n"
      "\"step\" marker k to marker k+1 (ranklensMarkStage; without \"step\" markers the Python adapter's\n"
      "\"optimizer\" markers); errors are (replayed - recorded) / recorded.\n"
      "Exit codes: 0 all signatures match and nothing diverges, 1 they differ or a trace is damaged (said on\n"
      "  stderr), 2 bad usage, unreadable trace or --json FILE not writable.");
  return cmd;
}

int runCompare(const CompareOptions& options, std::ostream& out, std::ostream& err) {
  EventLog recorded, replayed;
  if (!loadSide("recorded", options.recorded, options.rank, &recorded, err) ||
      !loadSide("replayed", options.replayed, options.rank, &replayed, err))
    return 2;
  if (!options.quiet) {
    warnAboutDamage(recorded, "comparing the complete records before it", err);
    warnAboutDamage(replayed, "comparing the complete records before it", err);
  }

  Comparison c{&recorded, &replayed, matchCommunicators(recorded, replayed), {}, {}, {}, {}, {}, {}, {}};
  c.raw = countMatches(recorded, replayed, c.comms, 0, false);
  c.training = countMatches(recorded, replayed, c.comms, options.smallBytes, true);
  c.divergences = findDivergences(recorded, replayed, c.comms);
  c.steps = compareSteps(recorded, replayed, options.warmupSteps);
  c.time = timePerOp(recorded, replayed);
  c.host = hostTimes(recorded);
  c.estimated = estimatedCalls(replayed);

  if (!options.jsonPath.empty()) {
    const std::string text = reportJson(c, options).dump(2) + "\n";
    if (options.jsonPath == "-") {
      out << text;
    } else {
      std::ofstream file(options.jsonPath);
      file << text;
      if (!file.flush()) {
        err << "error: " << options.jsonPath << ": cannot write the JSON report\n";
        return 2;
      }
    }
  }
  if (!options.quiet && options.jsonPath != "-") reportText(c, options, out);
  // A damaged or unfinished trace (said above) makes the comparison incomplete: 1, as every command that reads one.
  return c.matches() && !recorded.incomplete() && !replayed.incomplete() ? 0 : 1;
}

}  // namespace tools
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// History samples from recorded runs (ranklens history build, and replay's own recording): each timed call with
// its place and phase in the step, whether other streams were busy, and the job's transfer time.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "ranklens/estimator.h"
#include "ranklens/events.h"
#include "ranklens/job_collectives.h"
#include "ranklens/recording.h"

namespace ranklens {
namespace timing {

int localWorldSize(const trace::Manifest& manifest) {
  auto it = manifest.env.find("LOCAL_WORLD_SIZE");
  return it == manifest.env.end() ? -1 : atoi(it->second.c_str());
}

namespace {

// Each call's step (the index of the "step" marker before it) and phase in it: host time since that marker over the
// time to the next one. Step -1 and phase -1 before the first marker and after the last.
struct StepPlace {
  int step = -1;
  double phase = -1;
};
std::vector<StepPlace> stepPlaces(const trace::Recording& recording) {
  std::vector<int64_t> starts;
  for (const auto& s : recording.stages())
    if (s.name == "step") starts.push_back(s.timeNs);
  std::sort(starts.begin(), starts.end());
  std::vector<StepPlace> places;
  places.reserve(recording.calls().size());
  for (const auto& rc : recording.calls()) {
    const int64_t t = rc.call.timeNs;
    auto next = std::upper_bound(starts.begin(), starts.end(), t);
    if (next == starts.begin() || next == starts.end() || *next == *std::prev(next)) {
      places.push_back({});
      continue;
    }
    const int64_t start = *std::prev(next);
    places.push_back({static_cast<int>(std::prev(next) - starts.begin()),
                      static_cast<double>(t - start) / static_cast<double>(*next - start)});
  }
  return places;
}

// Whether another stream's call was still running when each call was submitted: its submission time plus its
// recorded duration (a group's, on its first call) after this call's submission.
std::vector<bool> otherStreamsBusy(const trace::Recording& recording) {
  const auto& calls = recording.calls();
  std::vector<size_t> order(calls.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return calls[a].call.timeNs < calls[b].call.timeNs; });
  std::map<uint64_t, int64_t> busyUntil;  // stream -> end of its latest timed call
  std::vector<bool> busy(calls.size(), false);
  for (size_t i : order) {
    const auto& rc = calls[i];
    for (const auto& [stream, until] : busyUntil)
      if (stream != rc.call.stream && until > rc.call.timeNs) busy[i] = true;
    if (rc.durationNs > 0) {
      int64_t& until = busyUntil[rc.call.stream];
      until = std::max(until, rc.call.timeNs + rc.durationNs);
    }
  }
  return busy;
}

}  // namespace

Status addRecordedJob(const std::vector<const trace::Recording*>& ranks, History* history) {
  for (const trace::Recording* rec : ranks) {
    if (std::find(history->runs.begin(), history->runs.end(), rec->directory()) != history->runs.end())
      return Status::invalidArgument(rec->directory() + ": already in the history");
    if (rec->manifest().mode != "record")
      return Status::invalidArgument(rec->directory() + ": a " + rec->manifest().mode +
                                     " trace; only recorded runs carry measured durations");
  }
  // The shortest duration of each collective over the ranks that timed it: its transfer time.
  const JobCollectives job(ranks, /*withGroups=*/true);
  for (size_t r = 0; r < ranks.size(); ++r) {
    const trace::Recording& recording = *ranks[r];
    std::map<uint64_t, std::string> roles;
    for (const auto& c : recording.comms()) roles[c.commId] = c.name;
    const uint32_t run = static_cast<uint32_t>(history->runs.size());
    const int ranksPerNode = localWorldSize(recording.manifest());
    history->runs.push_back(recording.directory());
    // A group's duration on a stream belongs to all of its calls on that stream: their bytes add up.
    std::map<std::pair<uint64_t, uint64_t>, uint64_t> groupBytes;  // (groupId, stream) -> bytes
    std::set<std::pair<uint64_t, uint64_t>> groupsWithP2p;
    const std::vector<StepPlace> places = stepPlaces(recording);
    StepOccurrences occurrences;
    int step = -1;  // of the sample before
    const std::vector<bool> busy = otherStreamsBusy(recording);
    for (const auto& rc : recording.calls()) {
      if (rc.call.groupId == 0) continue;
      groupBytes[{rc.call.groupId, rc.call.stream}] += rc.call.bytes;
      if (events::isP2p(static_cast<events::Op>(rc.call.op))) groupsWithP2p.insert({rc.call.groupId, rc.call.stream});
    }
    std::set<std::pair<uint64_t, uint64_t>> groupStreamsCounted;  // (groupId, stream)
    for (size_t i = 0; i < recording.calls().size(); ++i) {
      const auto& rc = recording.calls()[i];
      const bool grouped = rc.call.groupId != 0;
      const uint64_t bytes = grouped ? groupBytes[{rc.call.groupId, rc.call.stream}] : rc.call.bytes;
      // Every call replay counts has its place, timed or not: each call outside groups, and each group's first
      // call on a stream (which carries the stream's duration).
      int occurrence = -1;
      if (!grouped || groupStreamsCounted.insert({rc.call.groupId, rc.call.stream}).second) {
        if (places[i].step != step) {
          step = places[i].step;
          if (step >= 0)
            occurrences.startStep();
          else
            occurrences.leave();
        }
        occurrence = occurrences.next(rc.call.op, bytes, grouped);
      }
      if (rc.durationNs < 0) continue;
      HistorySample s;
      s.stepPhase = places[i].phase;
      s.otherStreamsBusy = busy[i];
      s.op = rc.call.op;
      s.datatype = rc.call.datatype;
      s.nranks = rc.call.nranks;
      s.crossesNodes = crossesNodes(ranksPerNode, rc.call.nranks);
      s.role = roles[rc.call.commId];
      s.grouped = grouped;
      s.bytes = bytes;
      s.durationNs = rc.durationNs;
      s.run = run;
      const bool p2p = events::isP2p(static_cast<events::Op>(rc.call.op)) ||
                       (s.grouped && groupsWithP2p.count({rc.call.groupId, rc.call.stream}));
      if (s.nranks == 1) {
        s.transferNs = s.durationNs;
      } else if (!p2p && ranks.size() > 1) {
        if (const JobCollectives::Instance* in = job.find(r, rc)) s.transferNs = in->shortestNs;
      }
      s.stepOccurrence = occurrence;
      history->samples.push_back(std::move(s));
    }
  }
  return Status::ok();
}

Status addRecordedJob(const std::vector<std::string>& rankDirs, History* history) {
  trace::JobRecordings job;
  RL_CHECK(job.open(rankDirs));
  return addRecordedJob(job.ranks, history);
}

Status addRecordedRun(const std::string& rankDir, History* history) {
  return addRecordedJob(std::vector<std::string>{rankDir}, history);
}

Status addRecordedRun(const trace::Recording& recording, History* history) {
  return addRecordedJob(std::vector<const trace::Recording*>{&recording}, history);
}

bool hasTransferTimes(const History& history) {
  return std::any_of(history.samples.begin(), history.samples.end(),
                     [](const HistorySample& s) { return s.nranks > 1 && s.transferNs > 0; });
}

}  // namespace timing
}  // namespace ranklens

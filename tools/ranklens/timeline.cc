// SPDX-License-Identifier: Apache-2.0
#include "timeline.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "trace_log.h"

namespace ranklens {
namespace tools {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTimelineFormatVersion = "1.1";  // of otherData and the args keys (1.1: "estimated")

// The part of one trace that is drawn, in its own CLOCK_MONOTONIC ns; `originNs` becomes ts 0.
struct Window {
  int64_t originNs = 0, beginNs = INT64_MIN, endNs = INT64_MAX;
  bool contains(int64_t ns) const { return ns >= beginNs && ns <= endNs; }
};

// From the start of step A (marker A; stepMarks) to the end of step B (marker B+1; the trace's end when B is the
// last marked step). Without --from-step the trace starts at its first record, so that every trace starts at ts 0.
bool windowOf(const EventLog& log, const TimelineOptions& options, Window* window, std::string* error) {
  const StepMarks stepMarkers = stepMarks(log);
  const std::map<int64_t, int64_t>& marks = stepMarkers.starts;
  const std::string kind = stepMarkers.kind;
  window->originNs = firstRecordTimeNs(log);
  if (options.fromStep >= 0) {
    auto from = marks.find(options.fromStep);
    if (from == marks.end()) {
      *error =
          log.directory + ": no \"" + kind + "\" marker for step " + std::to_string(options.fromStep) + " (" +
          std::to_string(marks.size()) + " marked" +
          (marks.empty() ? ""
                         : ": " + std::to_string(marks.begin()->first) + ".." + std::to_string(marks.rbegin()->first)) +
          ")";
      return false;
    }
    window->originNs = window->beginNs = from->second;
  }
  if (options.toStep >= 0) {
    if (!marks.count(options.toStep)) {
      *error = log.directory + ": no \"" + kind + "\" marker for step " + std::to_string(options.toStep);
      return false;
    }
    auto end = marks.find(options.toStep + 1);
    if (end != marks.end()) window->endNs = end->second;
  }
  return true;
}

std::string streamName(uint64_t stream) {
  std::ostringstream text;
  text << "stream 0x" << std::hex << stream;
  return text.str();
}

double micros(int64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Writes the events of a trace-event JSON array, comma-separated, one per line, without holding them all.
class EventStream {
 public:
  explicit EventStream(std::ostream& out) : out_(out) {}
  void add(const json& event) {
    out_ << (first_ ? "\n" : ",\n") << event.dump();
    first_ = false;
    ++count_;
  }
  size_t count() const { return count_; }

 private:
  std::ostream& out_;
  bool first_ = true;
  size_t count_ = 0;
};

// One process (pid) per rank directory: a thread per stream with an X event per Timing record, and the stage
// markers as process-wide instant events on thread 0.
void writeTrace(const EventLog& log, int pid, const std::string& processName, const Window& window,
                EventStream* events) {
  std::map<CallKey, const events::Call*> calls;
  for (const auto& call : log.calls) calls[callKey(call.commId, call.op, call.rootOrPeer, call.seq)] = &call;

  std::set<uint64_t> streams;
  for (const auto& timing : log.timings)
    if (window.contains(timing.startNs)) streams.insert(timing.stream);
  std::map<uint64_t, int> tidOf;
  for (uint64_t stream : streams) tidOf.emplace(stream, static_cast<int>(tidOf.size()) + 1);

  events->add({{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", processName}}}});
  events->add({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"sort_index", pid}}}});
  events->add({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "stage markers"}}}});
  for (const auto& [stream, tid] : tidOf) {
    events->add(
        {{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", streamName(stream)}}}});
    events->add(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }

  for (const auto& timing : log.timings) {
    if (!window.contains(timing.startNs)) continue;
    const bool p2p = callKind(timing.op) != CallKind::kCollective;
    json args = {{"comm", timing.commId},
                 {"seq", timing.seq},
                 {"peer", p2p ? timing.peer : -1},
                 {"group", timing.groupId},
                 {"captured", timing.captured}};
    auto call = calls.find(callKey(timing.commId, timing.op, timing.peer, timing.seq));
    if (call != calls.end()) {
      args["bytes"] = call->second->bytes;
      args["count"] = call->second->count;
      args["datatype"] = events::datatypeName(call->second->datatype);
    }
    if (timing.durationNs < 0) args["duration_failed"] = true;  // the CUDA events failed: drawn with no length
    if (timing.clock == trace::kClockEstimated) args["estimated"] = true;  // a replay held the estimator's duration
    events->add({{"name", opText(timing.op)},
                 {"cat", "nccl"},
                 {"ph", "X"},
                 {"pid", pid},
                 {"tid", tidOf[timing.stream]},
                 {"ts", micros(timing.startNs - window.originNs)},
                 {"dur", micros(std::max<int64_t>(timing.durationNs, 0))},
                 {"args", args}});
  }
  for (const auto& stage : log.stages) {
    if (!window.contains(stage.timeNs)) continue;
    events->add({{"name", stage.step >= 0 ? stage.name + " " + std::to_string(stage.step) : stage.name},
                 {"cat", "stage"},
                 {"ph", "i"},
                 {"s", "p"},
                 {"pid", pid},
                 {"tid", 0},
                 {"ts", micros(stage.timeNs - window.originNs)},
                 {"args", {{"step", stage.step}}}});
  }
}

}  // namespace

CLI::App* addTimelineCommand(CLI::App& app, TimelineOptions* options) {
  auto* cmd = app.add_subcommand(
      "timeline",
      "Write traces as Chrome/Perfetto trace-event JSON (ui.perfetto.dev, chrome://tracing): a process "
      "per rank directory, a thread per stream, a slice per Timing record, stage markers");
  cmd->add_option("traces", options->traces,
                  "Rank directories, or trace roots (every rank<R>/ inside); each becomes one process, named by its "
                  "manifest mode and directory (\"record rank1\", \"replay rank1\")")
      ->required();
  cmd->add_option("-o,--output", options->output, "JSON file to write ('-': stdout)")->required();
  cmd->add_option("-a,--from-step", options->fromStep,
                  "Start at the \"step\" marker of step A (ranklensMarkStage); ts 0 is then that marker in every "
                  "trace, so the traces line up at step A")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("-b,--to-step", options->toStep,
                  "End with step B (at the marker of step B+1, or the trace's end when B is the last marked step)")
      ->check(CLI::NonNegativeNumber);
  cmd->footer(
      "Examples:\n"
      "  ranklens timeline /scratch/run42/rank1 /tmp/replay/rank1 -o rank1.json\n"
      "  ranklens timeline /scratch/run42 -o run42.json --from-step 10 --to-step 12\n"
      "Slices: ts = Timing.startNs (host submission) relative to the trace's first record (or to step A), dur =\n"
      "Timing.durationNs, in microseconds; args: comm, seq, peer, group, captured, estimated (a replay held the\n"
      "estimator's duration), and bytes, count and datatype of\n"
      "the matching Call. Exit codes: 0 written, 1 written without what a damaged trace or an unusable rank\n"
      "directory lost (each said on stderr), or a step bound is not marked, or the output cannot be written,\n"
      "2 bad usage or unreadable trace.");
  return cmd;
}

int runTimeline(const TimelineOptions& options, std::ostream& err) {
  if (options.fromStep >= 0 && options.toStep >= 0 && options.toStep < options.fromStep) {
    err << "error: --to-step " << options.toStep << " is before --from-step " << options.fromStep << "\n";
    return 2;
  }
  // Damage and rank directories no reader can use are said, and the timeline of the rest is still written; the exit
  // status says it is incomplete, as every command that reads a trace does.
  int status = 0;
  std::vector<std::string> rankDirs;
  for (const auto& path : options.traces) {
    std::set<std::string> said;
    if (sayRankDirectoryTrouble(path, err, &said)) status = 1;
    std::vector<std::string> dirs;
    for (const auto& dir : trace::rankDirectories(path))
      if (!said.count(dir)) dirs.push_back(dir);
    if (dirs.empty()) {
      err << "error: " << path << ": no rank directory with a manifest.msgpack (is this a RankLens trace?)\n";
      return 2;
    }
    for (const auto& dir : dirs) rankDirs.push_back(fs::path(dir).lexically_normal().string());
  }
  std::vector<EventLog> logs(rankDirs.size());
  std::vector<Window> windows(rankDirs.size());
  std::map<std::string, int> nameUses;
  std::vector<std::string> names;
  for (size_t i = 0; i < rankDirs.size(); ++i) {
    if (Status read = readEventLog(rankDirs[i], &logs[i]); !read.isOk()) {
      err << "error: " << read.message() << "\n";
      return 2;
    }
    std::string error;
    warnAboutDamage(logs[i], "drawing the complete records before it", err);
    if (logs[i].incomplete()) status = 1;
    if (!windowOf(logs[i], options, &windows[i], &error)) {
      err << "error: " << error << "\n";
      return 1;
    }
    const std::string mode = logs[i].manifest.mode.empty() ? "trace" : logs[i].manifest.mode;
    fs::path dir = rankDirs[i];
    if (!dir.has_filename()) dir = dir.parent_path();  // "trace/rank1/"
    names.push_back(mode + " " + dir.filename().string());
    nameUses[names.back()]++;
  }
  for (size_t i = 0; i < names.size(); ++i)
    if (nameUses[names[i]] > 1) names[i] += " (" + rankDirs[i] + ")";  // e.g. two recordings of the same rank

  std::ofstream file;
  if (options.output != "-") {
    file.open(options.output);
    if (!file) {
      err << "error: " << options.output << ": cannot open for writing\n";
      return 1;
    }
  }
  std::ostream& out = options.output == "-" ? std::cout : file;
  json traces = json::array();
  for (size_t i = 0; i < logs.size(); ++i)
    traces.push_back({{"pid", i + 1},
                      {"dir", rankDirs[i]},
                      {"mode", logs[i].manifest.mode},
                      {"rank", logs[i].manifest.rank},
                      {"origin_ns", windows[i].originNs}});
  out << "{\"displayTimeUnit\": \"ns\",\n";
  // Holistic Trace Analysis reads one trace file per rank and takes the rank from distributedInfo (as PyTorch's
  // profiler writes it): a timeline of one rank's trace says which rank it is; one of several ranks cannot.
  if (logs.size() == 1 && logs[0].manifest.rank >= 0) {
    out << "\"distributedInfo\": "
        << json({{"backend", "nccl"},
                 {"rank", logs[0].manifest.rank},
                 {"world_size", std::max(logs[0].manifest.world_size, logs[0].manifest.rank + 1)}})
               .dump()
        << ",\n";
  }
  out << "\"otherData\": "
      << json({{"format", "ranklens-timeline"}, {"format_version", kTimelineFormatVersion}, {"traces", traces}}).dump()
      << ",\n\"traceEvents\": [";
  EventStream events(out);
  for (size_t i = 0; i < logs.size(); ++i) writeTrace(logs[i], static_cast<int>(i + 1), names[i], windows[i], &events);
  out << "\n]}\n";
  out.flush();
  if (!out) {
    err << "error: " << options.output << ": write failed\n";
    return 1;
  }
  return status;
}

}  // namespace tools
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// What the `ranklens` trace commands (summary, compare, timeline) share: one rank directory read into memory, and
// the names they print.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace tools {

// Every record of one rank directory that the tools use, in segment order.
struct EventLog {
  std::string directory;
  trace::Manifest manifest;
  std::vector<events::CommInit> comms;
  std::vector<events::Call> calls;
  std::vector<events::Stage> stages;
  std::vector<trace::Timing> timings;
  std::vector<trace::CommBinding> bindings;  // replay traces (1.3): each replayed communicator's recorded one
  std::vector<events::GroupEnd> groupEnds;
  std::vector<trace::PayloadRef> payloads;            // every reference, superseded ones (edits) included
  std::vector<trace::FlightRecorderEntry> frEntries;  // 1.13: traces imported from Flight Recorder dumps
  std::vector<trace::Problem> problems;  // damage found while reading; the intact records before it are loaded
  std::optional<trace::InterruptedEdit> interruptedEdit;  // an in-place edit stopped midway (not damage)
  // Whether the answer drawn from this log is short of the whole trace: damage, or an interrupted edit.
  bool incomplete() const { return !problems.empty() || interruptedEdit.has_value(); }
};

// Reads `rankDir`. An error ("<path>: <reason>") when it cannot be opened at all; damage past the opening is not an
// error but the log's `problems` (the records before it are read).
Status readEventLog(const std::string& rankDir, EventLog* log);
// Prints a warning per problem (ending in "; <consequence>") and one if the writer did not close the trace.
void warnAboutDamage(const EventLog& log, const std::string& consequence, std::ostream& err);

// Says each rank<R> entry of `traceDir` that no command reads (trace::rankDirectoryTrouble: not a directory,
// unreadable, without a manifest, a padded number, two entries for one rank), one line each, and adds the unusable
// ones to `said` so that the caller skips them without saying them again. True when there was any.
bool sayRankDirectoryTrouble(const std::string& traceDir, std::ostream& err, std::set<std::string>* said);

// A trace argument made into one rank directory: a rank directory itself, or a trace root holding rank<R>/ (`rank`
// picks it; without one, the root must hold exactly one rank). An error saying why otherwise.
Status resolveRankDirectory(const std::string& path, int rank, std::string* rankDir);

// Writes `text` to `path` ("-": standard output; empty: nowhere). False, with an error on stderr naming the path,
// when it cannot be written.
bool writeOutput(const std::string& path, const std::string& text);

// Earliest time of any record (CLOCK_MONOTONIC ns), 0 for an empty log: where a trace's timeline starts.
int64_t firstRecordTimeNs(const EventLog& log);

// The steps of a trace (events::stepMarkers): where step k starts (CLOCK_MONOTONIC ns).
struct StepMarks {
  const char* kind = "step";  // the marker name used: "step" or "optimizer"
  std::map<int64_t, int64_t> starts;
};
StepMarks stepMarks(const EventLog& log);

// A call's identity within its communicator (docs/trace-format.md, index.msgpack): collectives share one sequence,
// Send and Recv have one per peer.
enum class CallKind : int { kCollective = 0, kSend = 1, kRecv = 2 };
CallKind callKind(int op);
const char* callKindName(CallKind kind);                   // "collective", "send", "recv"
using CallKey = std::tuple<uint64_t, int, int, uint64_t>;  // commId, CallKind, peer (-1 for collectives), seq
CallKey callKey(uint64_t commId, int op, int peer, uint64_t seq);

std::string opText(int op);             // "AllReduce", ..., "op<N>" for values outside the format's table
const char* redopName(int redop);       // "sum", ..., "premulsum"; "-" for none
std::string bytesText(uint64_t bytes);  // "64.0 KiB"

}  // namespace tools
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
#include "trace_log.h"

#include <algorithm>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <set>
#include <sstream>

namespace ranklens {
namespace tools {

Status readEventLog(const std::string& rankDir, EventLog* log) {
  std::unique_ptr<trace::TraceReader> reader;
  const Status opened = trace::TraceReader::open(rankDir, trace::Limits{}, &reader);
  if (!reader) return opened.isOk() ? Status::internalError(rankDir + ": the trace reader did not open") : opened;
  log->directory = rankDir;
  log->manifest = reader->manifest();
  std::vector<trace::Problem> malformed;
  reader->scan([&](trace::RecordType type, const msgpack::object& body, const trace::Location& where) {
    try {
      switch (type) {
        case trace::RecordType::kCommInit:
          log->comms.push_back(body.as<events::CommInit>());
          break;
        case trace::RecordType::kCall:
          log->calls.push_back(body.as<events::Call>());
          break;
        case trace::RecordType::kGroupEnd:
          log->groupEnds.push_back(body.as<events::GroupEnd>());
          break;
        case trace::RecordType::kStage:
          log->stages.push_back(body.as<events::Stage>());
          break;
        case trace::RecordType::kTiming:
          log->timings.push_back(body.as<trace::Timing>());
          break;
        case trace::RecordType::kCommBinding:
          log->bindings.push_back(body.as<trace::CommBinding>());
          break;
        case trace::RecordType::kPayloadRef:
          log->payloads.push_back(body.as<trace::PayloadRef>());
          break;
        case trace::RecordType::kFlightRecorderEntry:
          log->frEntries.push_back(body.as<trace::FlightRecorderEntry>());
          break;
        default:
          break;
      }
    } catch (const std::exception&) {
      // The spec: a record whose fields have the wrong types is reported (file, offset) and skipped.
      malformed.push_back(trace::Problem{
          rankDir + "/" + trace::segmentName(where.segment), where.offset,
          std::string(trace::recordTypeName(type)) + " record has a field of the wrong type (skipped)", false, true});
    }
    return true;
  });
  // docs/trace-format.md: several Call records of one identity are one call, the last in segment order (as the
  // index says); the earlier ones are not calls, so no command counts the call twice or charges its Timing twice.
  std::set<CallKey> seen;
  std::vector<events::Call> calls;
  for (auto it = log->calls.rbegin(); it != log->calls.rend(); ++it)
    if (seen.insert(callKey(it->commId, it->op, it->rootOrPeer, it->seq)).second) calls.push_back(*it);
  std::reverse(calls.begin(), calls.end());
  log->calls.swap(calls);
  log->problems = reader->problems();
  if (trace::InterruptedEdit edit; trace::findInterruptedEdit(rankDir, &edit)) log->interruptedEdit = edit;
  for (auto& m : malformed) {  // the reader itself reports a malformed Call or PayloadRef (it indexes them)
    bool known = false;
    for (const auto& p : log->problems) known = known || (p.file == m.file && p.offset == m.offset);
    if (!known) log->problems.push_back(std::move(m));
  }
  return Status::ok();
}

void warnAboutDamage(const EventLog& log, const std::string& consequence, std::ostream& err) {
  for (const auto& problem : log.problems)
    err << "warning: " << problem.describe() << (problem.truncated ? " (truncated: a crash?)" : "") << "; "
        << (problem.skipped ? "it is skipped" : consequence) << "\n";
  if (log.interruptedEdit) err << "warning: " << log.interruptedEdit->describe() << "\n";
  if (!log.manifest.closed)
    err << "warning: " << log.directory << ": trace not closed (the process may have crashed)\n";
}

bool sayRankDirectoryTrouble(const std::string& traceDir, std::ostream& err, std::set<std::string>* said) {
  bool any = false;
  for (const auto& t : trace::rankDirectoryTrouble(traceDir)) {
    err << (t.duplicate ? "error: " : "warning: ") << t.reason << "\n";
    if (!t.duplicate) said->insert(t.path);
    any = true;
  }
  return any;
}

bool writeOutput(const std::string& path, const std::string& text) {
  if (path.empty()) return true;
  if (path == "-") {
    std::cout << text;
    return true;
  }
  std::ofstream out(path);
  out << text;
  if (!out) std::cerr << "error: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

Status resolveRankDirectory(const std::string& path, int rank, std::string* rankDir) {
  const Status resolved = trace::resolveRankDirectory(path, rank, rankDir);
  if (resolved.isOk() || rank >= 0 || trace::rankDirectories(path).size() <= 1) return resolved;
  return Status::error(resolved.code(), resolved.message() + "; pick one with --rank R");
}

StepMarks stepMarks(const EventLog& log) {
  const events::StepMarkers markers = events::stepMarkers(log.stages);
  StepMarks marks;
  marks.kind = markers.kind;
  for (const auto& stage : markers.marks) marks.starts.emplace(stage.step, stage.timeNs);
  return marks;
}

int64_t firstRecordTimeNs(const EventLog& log) {
  int64_t first = INT64_MAX;
  for (const auto& comm : log.comms) first = std::min(first, comm.timeNs);
  for (const auto& call : log.calls) first = std::min(first, call.timeNs);
  for (const auto& stage : log.stages) first = std::min(first, stage.timeNs);
  for (const auto& timing : log.timings) first = std::min(first, timing.startNs);
  return first == INT64_MAX ? 0 : first;
}

CallKind callKind(int op) {
  if (op == static_cast<int>(events::Op::kSend)) return CallKind::kSend;
  if (op == static_cast<int>(events::Op::kRecv)) return CallKind::kRecv;
  return CallKind::kCollective;
}

const char* callKindName(CallKind kind) {
  switch (kind) {
    case CallKind::kSend:
      return "send";
    case CallKind::kRecv:
      return "recv";
    default:
      return "collective";
  }
}

CallKey callKey(uint64_t commId, int op, int peer, uint64_t seq) {
  const CallKind kind = callKind(op);
  return {commId, static_cast<int>(kind), kind == CallKind::kCollective ? -1 : peer, seq};
}

std::string opText(int op) {
  if (op < static_cast<int>(events::Op::kAllReduce) || op > static_cast<int>(events::Op::kRecv))
    return "op" + std::to_string(op);
  return events::opName(static_cast<events::Op>(op));
}

const char* redopName(int redop) {
  static const char* names[] = {"sum", "prod", "max", "min", "avg"};
  if (redop < 0) return "-";
  return redop < 5 ? names[redop] : "premulsum";
}

std::string bytesText(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream text;
  text << std::fixed << std::setprecision(unit == 0 ? 0 : 1) << value << " " << units[unit];
  return text.str();
}

}  // namespace tools
}  // namespace ranklens

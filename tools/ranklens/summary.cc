// SPDX-License-Identifier: Apache-2.0
#include "summary.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/payload_prefetcher.h"
#include "ranklens/trace.h"
#include "text_format.h"
#include "trace_log.h"

namespace ranklens {
namespace tools {
namespace {

namespace fs = std::filesystem;
using events::Call;
using events::Op;
namespace trace = ranklens::trace;

bool loadRank(const std::string& dir, EventLog* log, std::ostream& err) {
  if (Status read = readEventLog(dir, log); !read.isOk()) {
    err << "error: " << read.message() << "\n";
    return false;
  }
  warnAboutDamage(*log, "summarising the complete records before it", err);
  return !log->incomplete();
}

// A call signature: what must match between a recording and a replay.
using Signature = std::tuple<uint64_t, int, int, uint64_t, int, int>;  // comm, op, dtype, count, root/peer, redop

struct SignatureStats {
  uint64_t calls = 0, bytes = 0;
  int64_t gpuNs = 0;  // recorded GPU time (Timing.durationNs) of the timed calls; a group's on its first call
  uint64_t timed = 0;
};

// Per communicator: the same totals over all its calls.
std::map<uint64_t, SignatureStats> perCommunicator(const std::map<Signature, SignatureStats>& sigs) {
  std::map<uint64_t, SignatureStats> comms;
  for (const auto& [sig, stats] : sigs) {
    SignatureStats& c = comms[std::get<0>(sig)];
    c.calls += stats.calls;
    c.bytes += stats.bytes;
    c.gpuNs += stats.gpuNs;
    c.timed += stats.timed;
  }
  return comms;
}

// The payloads stored (the current one of each call) and what a value replay of them needs: the largest step's bytes,
// the pinned memory prefetch_bytes: auto takes for them on this host, and the device memory payload_device_bytes:
// auto would stage them in on a GPU like the recorded one (from what the job left free of it).
struct PayloadStats {
  uint64_t count = 0, bytes = 0, largestStep = 0, autoPrefetch = 0, autoDevice = 0;
  // Payloads the recording meant to store and did not (the manifest's counters and payloads_dropped), by reason: a
  // value replay gives those calls `fill` instead.
  std::vector<std::pair<const char*, uint64_t>> lost;
};
PayloadStats payloadStats(const EventLog& log) {
  PayloadStats p;
  p.lost = trace::payloadsNotStored(log.manifest);
  std::map<CallKey, uint64_t> current;  // the last reference of a call wins (an edit appends one)
  for (const auto& ref : log.payloads) current[callKey(ref.commId, ref.op, ref.peer, ref.seq)] = ref.rawBytes;
  if (current.empty()) return p;
  std::map<CallKey, int64_t> times;
  for (const auto& call : log.calls) times[callKey(call.commId, call.op, call.rootOrPeer, call.seq)] = call.timeNs;
  std::vector<std::pair<int64_t, uint64_t>> timed;
  for (const auto& [key, bytes] : current) {
    auto it = times.find(key);
    timed.emplace_back(it == times.end() ? 0 : it->second, bytes);
    p.count++;
    p.bytes += bytes;
  }
  p.largestStep = events::largestStepBytes(log.stages, timed);
  p.autoPrefetch = trace::autoArenaBytes(p.largestStep, trace::hostMemoryBytes());
  trace::DeviceStageSizing sizing;
  sizing.largestStepBytes = p.largestStep;
  sizing.arenaBytes = p.autoPrefetch;
  trace::setRecordedDeviceMemory(log.manifest, &sizing);
  p.autoDevice = trace::autoDeviceStageBytes(sizing, nullptr);
  return p;
}

std::string timeText(const SignatureStats& s) {
  if (s.timed == 0) return "";
  std::ostringstream t;
  t << ", " << std::fixed << std::setprecision(3) << static_cast<double>(s.gpuNs) / 1e6 << " ms GPU time";
  if (s.timed != s.calls) t << " (" << s.timed << " timed)";
  return t.str();
}

nlohmann::json summariseJson(const EventLog& log, const std::map<Signature, SignatureStats>& sigs) {
  nlohmann::json rank = {{"rank", log.manifest.rank},     {"host", log.manifest.host},
                         {"pid", log.manifest.pid},       {"mode", log.manifest.mode},
                         {"writer", log.manifest.writer}, {"closed", log.manifest.closed},
                         {"calls", log.calls.size()},     {"groups", log.groupEnds.size()},
                         {"stages", log.stages.size()},   {"counters", log.manifest.counters}};
  const PayloadStats p = payloadStats(log);
  rank["payloads"] = {{"count", p.count},
                      {"bytes", p.bytes},
                      {"largest_step_bytes", p.largestStep},
                      {"auto_prefetch_bytes", p.autoPrefetch},
                      {"auto_device_bytes", p.autoDevice},
                      {"not_stored", nlohmann::json::object()}};
  for (const auto& [why, n] : p.lost) rank["payloads"]["not_stored"][why] = n;
  if (const trace::CompressionLoad load = trace::compressionLoad(log.manifest); load.known) {
    rank["payloads"]["compression"] = {{"threads", load.threads},
                                       {"busy_share", load.busyShare},
                                       {"active_s", load.activeSeconds},
                                       {"copy_s", load.copySeconds},
                                       {"compress_s", load.compressSeconds},
                                       {"write_s", load.writeSeconds},
                                       {"cpu_s", load.cpuSeconds},
                                       {"cpu_s_per_gb", nullptr}};
    if (load.cpuSecondsPerGB > 0) rank["payloads"]["compression"]["cpu_s_per_gb"] = load.cpuSecondsPerGB;
  }
  auto comms = perCommunicator(sigs);
  for (const auto& comm : log.comms) {
    const SignatureStats& c = comms[comm.commId];
    rank["communicators"].push_back({{"id", comm.commId},
                                     {"nranks", comm.nranks},
                                     {"rank", comm.rank},
                                     {"how", comm.how},
                                     {"name", comm.name},
                                     {"parent", comm.parentId},
                                     {"color", comm.color},
                                     {"key", comm.key},
                                     {"calls", c.calls},
                                     {"bytes", c.bytes},
                                     {"gpu_ns", c.gpuNs},
                                     {"timed_calls", c.timed}});
  }
  for (const auto& [sig, stats] : sigs) {
    auto [comm, op, dtype, count, root, redop] = sig;
    rank["signatures"].push_back({{"comm", comm},
                                  {"op", events::opName(static_cast<Op>(op))},
                                  {"datatype", events::datatypeName(dtype)},
                                  {"count", count},
                                  {"root_or_peer", root},
                                  {"redop", redopName(redop)},
                                  {"calls", stats.calls},
                                  {"bytes", stats.bytes},
                                  {"gpu_ns", stats.gpuNs},
                                  {"timed_calls", stats.timed}});
  }
  return rank;
}

void summariseText(const EventLog& log, const std::map<Signature, SignatureStats>& sigs, std::ostream& out) {
  out << "rank " << log.manifest.rank << " (host " << log.manifest.host << ", pid " << log.manifest.pid << ", "
      << log.manifest.mode << ": " << log.manifest.writer << "): " << log.calls.size() << " calls, " << log.comms.size()
      << " communicators, " << log.groupEnds.size() << " groups, " << log.stages.size() << " stage markers\n";
  // What the writing library counted (record: durations measured, lost, payloads skipped; replay: replay_*).
  if (!log.manifest.counters.empty()) {
    out << "  counters:";
    for (const auto& [name, value] : log.manifest.counters) out << " " << name << " " << value;
    out << "\n";
  }
  const PayloadStats p = payloadStats(log);
  if (p.count > 0)
    out << "  payloads: " << p.count << " stored, " << bytesText(p.bytes) << "; the largest step holds "
        << bytesText(p.largestStep) << " (a value replay's prefetch_bytes: auto pins " << bytesText(p.autoPrefetch)
        << " for them on this host, and payload_device_bytes: auto stages " << bytesText(p.autoDevice)
        << " on a GPU like the recorded one)\n";
  // Where the compression threads' time went: once staging is full they bound a full-payload recording.
  // The rate per GB only where there were enough bytes for one (compressionLoad).
  if (const trace::CompressionLoad load = trace::compressionLoad(log.manifest); p.count > 0 && load.known) {
    out << "  compression threads: " << load.threads << ", busy " << std::fixed << std::setprecision(0)
        << 100 * load.busyShare << "% of the " << durationText(load.activeSeconds) << " they had payloads; copy "
        << durationText(load.copySeconds) << ", compress " << durationText(load.compressSeconds) << ", write "
        << durationText(load.writeSeconds) << " in all (" << durationText(load.cpuSeconds) << " of CPU";
    if (load.cpuSecondsPerGB > 0) out << ", " << std::setprecision(2) << load.cpuSecondsPerGB << " s per GB of payload";
    out << ")\n" << std::defaultfloat;
  }
  if (!p.lost.empty()) {
    out << "  payloads not stored while recording:";
    const char* separator = " ";
    for (const auto& [why, n] : p.lost) {
      out << separator << n << " " << why;
      separator = ", ";
    }
    out << " (a value replay gives those calls `fill`)\n";
  }
  out << "  communicators (calls, bytes, recorded GPU time):\n";
  auto comms = perCommunicator(sigs);
  for (const auto& comm : log.comms) {
    const SignatureStats& c = comms[comm.commId];
    out << "    #" << comm.commId << "  rank " << comm.rank << " of " << comm.nranks << "  " << comm.how;
    if (comm.parentId >= 0) out << " of #" << comm.parentId << " (color " << comm.color << ", key " << comm.key << ")";
    if (!comm.name.empty()) out << "  \"" << comm.name << "\"";
    out << "  " << c.calls << " calls, " << bytesText(c.bytes) << timeText(c) << "\n";
  }
  out << "  signatures (comm, op, datatype, count, root/peer, reduction: calls, bytes received (Send: sent), "
         "recorded GPU time):\n";
  for (const auto& [sig, stats] : sigs) {
    auto [comm, op, dtype, count, root, redop] = sig;
    out << "    #" << std::left << std::setw(3) << comm << " " << std::setw(13) << events::opName(static_cast<Op>(op))
        << " " << std::setw(9) << events::datatypeName(dtype) << " count " << std::setw(10) << count;
    out << (root >= 0 ? " root/peer " + std::to_string(root) : std::string(" ")) << "  " << redopName(redop) << ":  "
        << stats.calls << " calls, " << bytesText(stats.bytes) << timeText(stats) << "\n"
        << std::right;
  }
}

}  // namespace

int printTraceSummary(const std::string& traceDir, bool json, std::ostream& out, std::ostream& err) {
  int status = 0;
  // A rank<R> entry that cannot be read is a rank missing from the summary: said, and the exit status says it too.
  std::set<std::string> said;  // unusable rank directories, said once here
  if (sayRankDirectoryTrouble(traceDir, err, &said)) status = 1;
  const std::vector<std::string> dirs = trace::rankDirectories(traceDir);
  if (dirs.empty()) {
    err << "error: " << traceDir << ": no rank directory with a manifest.msgpack (is this a RankLens trace?)\n";
    return 1;
  }
  nlohmann::json all = nlohmann::json::array();
  for (const auto& dir : dirs) {
    if (said.count(dir)) continue;
    EventLog log;
    if (!loadRank(dir, &log, err)) {
      // Said above; an empty summary of a rank that could not be read would read as a rank that made no call.
      status = 1;
      if (log.manifest.rank < 0) continue;
    }
    // A call's Timing: the same call identity (callKey: Send/Recv sequences are per peer).
    std::map<CallKey, int64_t> durations;
    for (const auto& t : log.timings)
      if (t.durationNs >= 0) durations[callKey(t.commId, t.op, t.peer, t.seq)] = t.durationNs;
    std::map<Signature, SignatureStats> sigs;
    for (const auto& call : log.calls) {
      auto& stats = sigs[{call.commId, call.op, call.datatype, call.count, call.rootOrPeer, call.redop}];
      stats.calls++;
      stats.bytes += call.bytes;
      auto it = durations.find(callKey(call.commId, call.op, call.rootOrPeer, call.seq));
      if (it != durations.end()) {
        stats.gpuNs += it->second;
        stats.timed++;
      }
    }
    if (json)
      all.push_back(summariseJson(log, sigs));
    else
      summariseText(log, sigs, out);
  }
  if (json) out << all.dump(2) << "\n";
  return status;
}

}  // namespace tools
}  // namespace ranklens

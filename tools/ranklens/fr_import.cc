// SPDX-License-Identifier: Apache-2.0
#include "fr_import.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "ranklens/mesh.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;
using events::Op;

namespace {

// torch's profiling names (after "nccl:" or "xccl:") to NCCL operations. The lists are those fr_trace accepts.
struct OpName {
  const char* name;
  Op op;
};
constexpr OpName kOps[] = {
    {"all_reduce", Op::kAllReduce},
    {"allreduce_coalesced", Op::kAllReduce},
    {"all_reduce_coalesced", Op::kAllReduce},
    {"all_reduce_barrier", Op::kAllReduce},
    {"barrier", Op::kAllReduce},
    {"broadcast", Op::kBroadcast},
    {"_broadcast_oop", Op::kBroadcast},
    {"reduce", Op::kReduce},
    {"_reduce_oop", Op::kReduce},
    {"all_gather", Op::kAllGather},
    {"all_gather_single", Op::kAllGather},
    {"all_gather_v", Op::kAllGather},
    {"_all_gather_base", Op::kAllGather},
    {"_allgather_base", Op::kAllGather},
    {"all_gather_into_tensor_coalesced", Op::kAllGather},
    {"ALLGATHER_coalesced", Op::kAllGather},
    {"reduce_scatter", Op::kReduceScatter},
    {"reduce_scatter_single", Op::kReduceScatter},
    {"reduce_scatter_v", Op::kReduceScatter},
    {"_reduce_scatter_base", Op::kReduceScatter},
    {"reduce_scatter_tensor_coalesced", Op::kReduceScatter},
    {"REDUCE_SCATTER_coalesced", Op::kReduceScatter},
    {"gather", Op::kGather},
    {"scatter", Op::kScatter},
    {"all_to_all", Op::kAlltoAll},
    {"all_to_all_single", Op::kAlltoAll},
    {"all_to_all_v_single", Op::kAlltoAll},
    {"send", Op::kSend},
    {"recv", Op::kRecv},
};

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void addUnknown(std::string* list, const char* field) {
  if (!list->empty()) *list += ",";
  *list += field;
}

std::string shapesText(const std::vector<std::vector<int64_t>>& shapes) {
  std::string s = "[";
  for (size_t k = 0; k < shapes.size(); ++k) {
    if (k) s += ", ";
    s += "[";
    for (size_t d = 0; d < shapes[k].size(); ++d) s += (d ? ", " : "") + std::to_string(shapes[k][d]);
    s += "]";
  }
  return s + "]";
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + v[k];
  return s;
}

std::string framesText(const std::vector<fr::Frame>& frames) {
  std::string s;
  for (size_t k = 0; k < frames.size(); ++k) {
    s += "#" + std::to_string(k) + " " + frames[k].name + " from " + frames[k].filename + ":" +
         std::to_string(frames[k].line) + "\n";
  }
  return s;
}

// "2.27.3" -> 22703 (NCCL's code from 2.9 on), 0 when unknown.
int ncclCode(const std::string& version) {
  int major = 0, minor = 0, patch = 0;
  if (std::sscanf(version.c_str(), "%d.%d.%d", &major, &minor, &patch) < 2 || major < 2 || major > 9 || minor < 0 ||
      minor > 99 || patch < 0 || patch > 99) {
    return 0;
  }
  return major * 10000 + minor * 100 + patch;
}

// Process-group names in creation order: torch numbers them "0", "1", ... (the default group is "0"); other names
// (hashes, user names) after, by name.
bool pgBefore(const std::string& a, const std::string& b) {
  auto numeric = [](const std::string& s) {
    return !s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const bool na = numeric(a), nb = numeric(b);
  if (na != nb) return na;
  if (na) return std::stol(a) < std::stol(b);
  return a < b;
}

std::vector<std::string> pgNames(const fr::Dump& d) {
  std::set<std::string> names;
  for (const auto& [name, pg] : d.pgConfig) names.insert(name);
  for (const fr::Entry& e : d.entries) names.insert(e.pgName);
  std::vector<std::string> out(names.begin(), names.end());
  std::sort(out.begin(), out.end(), pgBefore);
  return out;
}

const std::vector<int>* pgRanks(const fr::Dump& d, const std::string& pg) {
  auto it = d.pgConfig.find(pg);
  return it == d.pgConfig.end() || it->second.ranks.empty() ? nullptr : &it->second.ranks;
}

}  // namespace

int datatypeOfDtype(const std::string& dtype) {
  static const std::map<std::string, int> kTypes = {
      {"Char", 0},     {"Byte", 1},           {"Bool", 1},         {"Int", 2},   {"UInt32", 3},
      {"Long", 4},     {"UInt64", 5},         {"Half", 6},         {"Float", 7}, {"Double", 8},
      {"BFloat16", 9}, {"Float8_e4m3fn", 10}, {"Float8_e5m2", 11},
  };
  auto it = kTypes.find(dtype);
  return it == kTypes.end() ? -1 : it->second;
}

namespace {

// The call's element count from the entry's tensor sizes; `known` false when the sizes do not say it (several
// tensors, or an all_to_all whose total does not split evenly).
uint64_t elementCount(const fr::Entry& e, Op op, const std::string& type, int nranks, bool* known) {
  const auto& in = e.inputSizes;
  const auto& outSizes = e.outputSizes;
  bool countKnown = true;
  auto first = [&](const std::vector<std::vector<int64_t>>& v) -> uint64_t {
    if (v.size() != 1) countKnown = false;
    return v.empty() ? 0 : numel(v[0]);
  };
  uint64_t count = 0;
  switch (op) {
    case Op::kAllReduce:
    case Op::kBroadcast:
    case Op::kReduce:
    case Op::kAllGather:
    case Op::kGather:
    case Op::kSend:
      count = first(in);
      break;
    case Op::kReduceScatter:
    case Op::kScatter:
      count = first(outSizes);
      break;
    case Op::kRecv:
      count = first(outSizes.empty() ? in : outSizes);
      break;
    case Op::kAlltoAll: {
      const uint64_t total = first(in);
      if (nranks > 0 && total % static_cast<uint64_t>(nranks) == 0 && type != "all_to_all_v_single") {
        count = total / static_cast<uint64_t>(nranks);
      } else {
        countKnown = false;
        count = total;
      }
      break;
    }
    default:
      break;
  }
  // torch's list forms (all_gather of a tensor list) have one output per rank and one input: count stays the input.
  if (op == Op::kAllGather && in.size() == 1) countKnown = true;
  if (op == Op::kReduceScatter && outSizes.size() == 1) countKnown = true;
  *known = countKnown;
  return count;
}

// A Send's or Recv's peer from torch's name ("send 0->1": this rank's group rank -> peer; "recv 1<-0": this rank <-
// peer); a rooted collective's root, which the dump does not say (0 stands in).
void peerOrRoot(Op op, const std::string& meta, events::Call* c, std::string* unknown) {
  if (op == Op::kSend || op == Op::kRecv) {
    const char* arrow = op == Op::kSend ? "->" : "<-";
    const size_t at = meta.find(arrow);
    int peer = -1;
    if (at != std::string::npos) peer = std::atoi(meta.c_str() + at + 2);
    if (at == std::string::npos || peer < 0) addUnknown(unknown, "peer");
    c->rootOrPeer = std::max(peer, 0);
  } else if (events::isRooted(op)) {
    c->rootOrPeer = 0;
    addUnknown(unknown, "root");
  }
}

}  // namespace

EntryCall entryToCall(const fr::Entry& e, int nranks, int groupRank) {
  EntryCall out;
  const size_t colon = e.profilingName.find(':');
  const std::string name = colon == std::string::npos ? e.profilingName : e.profilingName.substr(colon + 1);
  const size_t space = name.find(' ');
  const std::string type = name.substr(0, space);
  const std::string meta = space == std::string::npos ? "" : name.substr(space + 1);
  const OpName* found = nullptr;
  for (const OpName& o : kOps) {
    if (type == o.name) found = &o;
  }
  if (found == nullptr) {
    out.why = type == "coalesced"
                  ? "torch's marker for a coalesced group: its calls are the entries before it"
                  : "'" + e.profilingName + "' is no NCCL collective or point-to-point call RankLens knows";
    return out;
  }
  out.isCall = true;
  events::Call& c = out.call;
  const Op op = found->op;
  c.op = static_cast<int>(op);
  c.nranks = nranks > 0 ? nranks : 0;
  c.rank = groupRank >= 0 ? groupRank : 0;
  if (nranks <= 0) addUnknown(&out.unknown, "nranks");
  if (groupRank < 0) addUnknown(&out.unknown, "rank");
  c.timeNs = e.timeCreatedNs;
  // The dtype of the tensors NCCL moves: one for all of them, else not one NCCL call.
  std::set<std::string> dtypes(e.inputDtypes.begin(), e.inputDtypes.end());
  dtypes.insert(e.outputDtypes.begin(), e.outputDtypes.end());
  c.datatype = dtypes.size() == 1 ? datatypeOfDtype(*dtypes.begin()) : -1;
  if (c.datatype < 0) {
    c.datatype = 0;
    addUnknown(&out.unknown, "datatype");
  }
  bool countKnown = true;
  c.count = elementCount(e, op, type, nranks, &countKnown);
  if (!countKnown) addUnknown(&out.unknown, "count");
  if (events::isReduction(op)) {
    c.redop = 0;  // the dump does not say which reduction; sum stands in
    addUnknown(&out.unknown, "redop");
  }
  peerOrRoot(op, meta, &c, &out.unknown);
  addUnknown(&out.unknown, "stream");
  addUnknown(&out.unknown, "payload");
  c.bytes = events::receivedBytes(op, c.count, c.datatype, c.nranks, c.rank, c.rootOrPeer);
  return out;
}

namespace {

// The manifest of one rank imported from its dump: what it is, where it came from, and what a dump cannot say.
trace::Manifest importedManifest(const fr::Dump& d, const std::string& diagnosis) {
  // The world: the default group's ranks, else the largest group's, else what the ranks' numbers say.
  int world = -1;
  if (const auto* r = pgRanks(d, "0")) world = static_cast<int>(r->size());
  for (const auto& [name, pg] : d.pgConfig) world = std::max(world, static_cast<int>(pg.ranks.size()));
  if (world <= d.rank) world = -1;
  trace::Manifest m;
  m.version_minor = trace::kFormatMinor;
  m.rank = d.rank;
  m.world_size = world;
  m.mode = "record";
  m.writer = "ranklens import flight-recorder";
  m.nccl_version = ncclCode(d.commLibVersion);
  if (!d.entries.empty()) {
    m.start_time_ns = d.entries.front().timeCreatedNs;
    m.end_time_ns = d.entries.back().timeCreatedNs;
  }
  m.imported = {{"from", "flight-recorder"},
                {"file", fs::absolute(d.file).string()},
                {"format", d.format},
                {"version", d.version},
                {"comm_lib_version", d.commLibVersion},
                {"missing",
                 "payloads, streams, reduction operators, roots, element counts of coalesced calls, "
                 "NCCL groups, how communicators were created (a group other than the default one is written as "
                 "torch's split of the default one); each FlightRecorderEntry's unknown "
                 "names its call's"}};
  if (!diagnosis.empty()) m.imported["diagnosis"] = diagnosis;
  if (!d.entries.empty() && d.entries.front().recordId > 0) {
    m.imported["wrapped"] = "the dump starts at record id " + std::to_string(d.entries.front().recordId) +
                            ": earlier calls were overwritten in torch's ring buffer (TORCH_NCCL_TRACE_BUFFER_SIZE)";
  }
  return m;
}

// A process group of the dump as a RankLens communicator, and the sequence numbers its calls get.
struct ImportedComm {
  uint64_t id = 0;
  int nranks = 0, groupRank = -1;
  int64_t base = -1;  // collective_seq_id - 1 of its first collective: RankLens's sequence starts there
  uint64_t collectives = 0;
  std::map<std::pair<int, int>, uint64_t> p2p;  // (op, peer) -> next sequence
};

// Communicators: the process groups this rank belongs to (or has entries of), in creation order, each written as a
// CommInit. `ok` turns false when a record could not be appended.
std::map<std::string, ImportedComm> writeComms(const fr::Dump& d, trace::TraceWriter& writer, bool* ok) {
  std::map<std::string, ImportedComm> comms;
  for (const std::string& name : pgNames(d)) {
    const std::vector<int>* members = pgRanks(d, name);
    int groupRank = -1;
    if (members != nullptr) {
      auto it = std::find(members->begin(), members->end(), d.rank);
      if (it != members->end()) groupRank = static_cast<int>(it - members->begin());
    }
    const bool hasEntries =
        std::any_of(d.entries.begin(), d.entries.end(), [&](const fr::Entry& e) { return e.pgName == name; });
    if (members != nullptr && groupRank < 0 && !hasEntries) continue;  // a group of other ranks
    ImportedComm c;
    c.id = comms.size();
    c.nranks = members ? static_cast<int>(members->size()) : 0;
    c.groupRank = groupRank;
    events::CommInit init;
    init.commId = c.id;
    init.nranks = c.nranks;
    init.rank = std::max(groupRank, 0);
    init.how = "init";
    // torch creates a group other than the default one by splitting the default group's communicator (when that
    // one exists, i.e. was initialised eagerly) with the hash of the group's sorted world ranks as the color and the
    // group rank as the key. Written that way, a replay's ncclCommSplit finds the child's size and members here; a
    // job that created it by init instead still binds to it by size and rank.
    auto parent = comms.find("0");
    if (name != "0" && members != nullptr && groupRank >= 0 && parent != comms.end()) {
      const std::vector<int>* parentMembers = pgRanks(d, "0");
      const bool inParent = parentMembers != nullptr && std::all_of(members->begin(), members->end(), [&](int r) {
                              return std::find(parentMembers->begin(), parentMembers->end(), r) != parentMembers->end();
                            });
      if (inParent) {
        std::vector<int> sorted = *members;
        std::sort(sorted.begin(), sorted.end());
        init.how = "split";
        init.parentId = static_cast<int64_t>(parent->second.id);
        init.color = ranklens::config::torchSplitColor(sorted);
        init.key = groupRank;
      }
    }
    auto cfg = d.pgConfig.find(name);
    init.name = name + (cfg != d.pgConfig.end() && !cfg->second.desc.empty() ? ":" + cfg->second.desc : "");
    if (members) init.worldRanks = *members;
    for (const fr::Entry& e : d.entries) {
      if (e.pgName == name) {
        init.timeNs = e.timeCreatedNs;
        break;
      }
    }
    *ok = *ok && writer.append(trace::RecordType::kCommInit, init);
    comms.emplace(name, std::move(c));
  }
  return comms;
}

// The dump's entry as the trace keeps it (the call it made, if any, is filled in by the caller).
trace::FlightRecorderEntry entryRecord(const fr::Entry& e, uint64_t commId) {
  trace::FlightRecorderEntry r;
  r.commId = commId;
  r.recordId = e.recordId;
  r.collectiveSeqId = e.collectiveSeqId;
  r.p2pSeqId = e.p2pSeqId;
  r.opId = e.opId;
  r.profilingName = e.profilingName;
  r.pgName = e.pgName;
  r.pgDesc = e.pgDesc;
  r.state = e.state;
  r.timeCreatedNs = e.timeCreatedNs;
  r.durationNs = e.durationMs ? static_cast<int64_t>(*e.durationMs * 1e6) : -1;
  r.timeoutMs = e.timeoutMs;
  r.isP2p = e.isP2p;
  r.inputSizes = shapesText(e.inputSizes);
  r.outputSizes = shapesText(e.outputSizes);
  r.inputDtypes = joined(e.inputDtypes);
  r.outputDtypes = joined(e.outputDtypes);
  r.frames = framesText(e.frames);
  return r;
}

// One entry: its Call (and Timing, when torch timed it) if it is a call, then the FlightRecorderEntry that keeps
// what the dump said. False when a record could not be appended.
bool writeEntry(const fr::Entry& e, const std::string& state, ImportedComm& comm, trace::TraceWriter& writer,
                ImportReport* report) {
  bool ok = true;
  EntryCall ec = entryToCall(e, comm.nranks, comm.groupRank);
  trace::FlightRecorderEntry r = entryRecord(e, comm.id);
  ++report->entries;
  r.state = state;
  if (state != "completed") ++report->unfinished;
  if (ec.isCall) {
    events::Call& c = ec.call;
    c.commId = comm.id;
    if (events::isP2p(static_cast<Op>(c.op))) {
      c.seq = comm.p2p[{c.op, c.rootOrPeer}]++;
      addUnknown(&ec.unknown, "seq");  // counted from the dump's first entry; torch numbers P2P per group
    } else {
      if (comm.base < 0) comm.base = std::max<int64_t>(e.collectiveSeqId - 1, 0);
      c.seq = static_cast<uint64_t>(comm.base) + comm.collectives++;
    }
    ok = ok && writer.append(trace::RecordType::kCall, c);
    ++report->calls;
    if (e.durationMs) {
      trace::Timing t = trace::timingOf(c);
      t.durationNs = r.durationNs;
      t.eventNs = r.durationNs;  // torch times the call with CUDA events around it on its stream
      t.clock = trace::kClockEvents;
      ok = ok && writer.append(trace::RecordType::kTiming, t);
      ++report->timed;
    }
    r.seq = c.seq;
    r.op = c.op;
    r.peer = events::isP2p(static_cast<Op>(c.op)) ? c.rootOrPeer : -1;
  } else {
    r.seq = static_cast<uint64_t>(std::max<int64_t>(e.collectiveSeqId - 1, 0));
    ec.unknown = ec.why;
    ++report->notCalls;
  }
  r.unknown = ec.unknown;
  return ok && writer.append(trace::RecordType::kFlightRecorderEntry, r);
}

bool isCoalescedEnd(const fr::Entry& e) { return e.profilingName.find(":coalesced") != std::string::npos; }

// Each entry's state. torch leaves the sends and receives of a coalesced group (batch_isend_irecv) "scheduled" for
// good and tracks the group in the nccl:coalesced entry that ends it (same group, same p2p_seq_id): they take its
// state, or a replay would stop at the first send of a job that hung much later.
std::vector<std::string> effectiveStates(const fr::Dump& d) {
  std::vector<std::string> states;
  for (const fr::Entry& e : d.entries) states.push_back(e.state);
  for (size_t i = 0; i < d.entries.size(); ++i) {
    const fr::Entry& e = d.entries[i];
    if (!e.isP2p || isCoalescedEnd(e)) continue;
    for (size_t j = i + 1; j < d.entries.size(); ++j) {
      const fr::Entry& next = d.entries[j];
      if (next.pgName != e.pgName) continue;
      if (isCoalescedEnd(next) && next.p2pSeqId == e.p2pSeqId) {
        states[i] = next.state;
        break;
      }
      if (!next.isP2p || next.p2pSeqId != e.p2pSeqId) break;  // not in a coalesced group: its own state stands
    }
  }
  return states;
}

// <outDir>/rank<R>/ of one dump.
Status importDump(const fr::Dump& d, const std::string& outDir, const std::string& diagnosis, ImportReport* report) {
  report->rank = d.rank;
  report->rankDir = (fs::path(outDir) / ("rank" + std::to_string(d.rank))).string();
  trace::WriterOptions options;
  options.policy = trace::BackPressure::kWait;
  std::unique_ptr<trace::TraceWriter> writer;
  RL_CHECK(trace::TraceWriter::create(report->rankDir, importedManifest(d, diagnosis), options, &writer)
               .withContext(report->rankDir));
  bool ok = true;
  std::map<std::string, ImportedComm> comms = writeComms(d, *writer, &ok);
  const std::vector<std::string> states = effectiveStates(d);
  for (size_t k = 0; k < d.entries.size(); ++k)
    ok = writeEntry(d.entries[k], states[k], comms.at(d.entries[k].pgName), *writer, report) && ok;
  ok = writer->close().isOk() && ok;
  if (!ok) return Status::systemError(report->rankDir + ": writing the trace failed");
  return Status::ok();
}

}  // namespace

Status importDumps(const std::vector<fr::Dump>& dumps, const std::string& outDir, std::vector<ImportReport>* reports) {
  std::set<int> ranks;
  for (const fr::Dump& d : dumps) {
    if (!ranks.insert(d.rank).second)
      return Status::invalidArgument(d.file + ": a second dump of rank " + std::to_string(d.rank) +
                                     " (give each rank's dump once)");
  }
  // Every rank directory keeps the cross-rank diagnosis: a replay of one rank that reaches the hang says which ranks
  // had reached it.
  const std::string diagnosis = dumps.size() > 1 ? diagnose(dumps) : "";
  for (const fr::Dump& d : dumps) {
    ImportReport report;
    RL_CHECK(importDump(d, outDir, diagnosis, &report));
    reports->push_back(report);
  }
  return Status::ok();
}

namespace {

std::string rankList(const std::set<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::string pgLabel(const fr::Entry& e) {
  return "process group " + e.pgName + (e.pgDesc.empty() || e.pgDesc == "undefined" ? "" : " (" + e.pgDesc + ")");
}

std::string signature(const fr::Entry& e) {
  return e.profilingName + " in " + shapesText(e.inputSizes) + " " + joined(e.inputDtypes) + " out " +
         shapesText(e.outputSizes) + " " + joined(e.outputDtypes);
}

// Per process group: each rank's collectives by collective_seq_id (the first entry of a sequence number: a
// coalesced group's calls share one), and the group's members among the dumped ranks.
using RankCollectives = std::map<int, std::map<int64_t, const fr::Entry*>>;
struct GroupCollectives {
  std::map<std::string, RankCollectives> byPg;
  std::map<std::string, std::set<int>> members;
  std::set<int> dumped;
};

// An entry's recorded Python stack under a heading, its innermost 8 frames; "" when the dump has none (JSON).
std::string stackLines(const std::string& heading, const fr::Entry& e) {
  if (e.frames.empty()) return "";
  std::string out = "  " + heading + ":\n";
  std::istringstream frames(framesText(e.frames));
  std::string line;
  for (int shown = 0; shown < 8 && std::getline(frames, line); ++shown) out += "    " + line + "\n";
  return out;
}

// A collective of the group, not a send, a receive or torch's coalesced marker.
bool isCollectiveEntry(const fr::Entry& e) {
  return !e.isP2p && e.profilingName.find("send ") == std::string::npos &&
         e.profilingName.find("recv ") == std::string::npos && e.profilingName.find(":coalesced") == std::string::npos;
}

GroupCollectives collectives(const std::vector<fr::Dump>& dumps) {
  GroupCollectives g;
  for (const fr::Dump& d : dumps) {
    g.dumped.insert(d.rank);
    for (const auto& [name, pg] : d.pgConfig) g.members[name].insert(pg.ranks.begin(), pg.ranks.end());
    for (const fr::Entry& e : d.entries) {
      if (!isCollectiveEntry(e)) continue;
      g.byPg[e.pgName][d.rank].emplace(e.collectiveSeqId, &e);
      g.members[e.pgName].insert(d.rank);
    }
  }
  return g;
}

// What the expected ranks did at one collective sequence number of a group.
struct AtSequence {
  std::set<int> missing, unfinished;
  std::map<std::string, std::set<int>> sigs;  // call signature -> ranks that made it
  const fr::Entry* any = nullptr;             // an entry of it (the first rank's), for its name and stack
  int anyRank = -1;
  bool diverged() const { return any != nullptr && (!missing.empty() || !unfinished.empty() || sigs.size() > 1); }
};

AtSequence atSequence(const RankCollectives& ranks, const std::set<int>& expected, int64_t seq) {
  AtSequence a;
  for (int r : expected) {
    auto rit = ranks.find(r);
    const fr::Entry* e = nullptr;
    if (rit != ranks.end()) {
      auto it = rit->second.find(seq);
      if (it != rit->second.end()) e = it->second;
    }
    if (e == nullptr) {
      // A rank whose dump starts after this sequence number (its ring buffer wrapped) says nothing of it.
      if (rit != ranks.end() && !rit->second.empty() && rit->second.begin()->first > seq) continue;
      a.missing.insert(r);
      continue;
    }
    if (a.any == nullptr) {
      a.any = e;
      a.anyRank = r;
    }
    if (e->state != "completed") a.unfinished.insert(r);
    a.sigs[signature(*e)].insert(r);
  }
  return a;
}

// Ranks that made different calls at one sequence number: which one is odd and how it differs. `a.any` becomes the
// odd rank's entry, whose stack shows where its program diverged.
std::string describeMismatch(const std::vector<fr::Dump>& dumps, const std::string& pg, int64_t seq, AtSequence& a) {
  const auto& sigs = a.sigs;
  // The call most ranks made is the expected one (on a tie, the lowest rank's, as fr_trace compares every rank with
  // the first); of the others, the one fewest ranks made is the odd one out.
  auto score = [](const auto& kv) { return std::make_pair(kv.second.size(), -*kv.second.begin()); };
  auto common =
      std::max_element(sigs.begin(), sigs.end(), [&](const auto& x, const auto& y) { return score(x) < score(y); });
  auto odd = sigs.end();
  for (auto it = sigs.begin(); it != sigs.end(); ++it) {
    if (it != common && (odd == sigs.end() || it->second.size() < odd->second.size())) odd = it;
  }
  const fr::Entry* oddEntry = nullptr;
  const fr::Entry* commonEntry = nullptr;
  for (const fr::Dump& d : dumps) {
    for (const fr::Entry& e : d.entries) {
      if (e.pgName == pg && e.collectiveSeqId == seq && !e.isP2p) {
        if (d.rank == *odd->second.begin() && oddEntry == nullptr) oddEntry = &e;
        if (d.rank == *common->second.begin() && commonEntry == nullptr) commonEntry = &e;
      }
    }
  }
  std::string how = "a different call";
  if (oddEntry && commonEntry) {
    if (oddEntry->profilingName != commonEntry->profilingName)
      how = "a different collective";
    else if (oddEntry->inputDtypes != commonEntry->inputDtypes || oddEntry->outputDtypes != commonEntry->outputDtypes)
      how = "a different dtype";
    else
      how = "different sizes";
  }
  if (oddEntry != nullptr) {
    a.any = oddEntry;
    a.anyRank = *odd->second.begin();
  }
  std::ostringstream out;
  out << "rank" << (odd->second.size() > 1 ? "s " : " ") << rankList(odd->second) << " called " << how << " ("
      << odd->first << ") than rank" << (common->second.size() > 1 ? "s " : " ") << rankList(common->second) << " ("
      << common->first << ")\n";
  return out.str();
}

// The first divergence of one group, in a few lines; "" when its ranks agree on every collective.
std::string diagnoseGroup(const std::vector<fr::Dump>& dumps, const std::string& pg, const RankCollectives& ranks,
                          const GroupCollectives& all) {
  std::set<int> expected;
  for (int r : all.members.at(pg)) {
    if (all.dumped.count(r)) expected.insert(r);
  }
  std::set<int64_t> seqs;
  for (const auto& [rank, entries] : ranks) {
    for (const auto& [seq, e] : entries) seqs.insert(seq);
  }
  for (int64_t seq : seqs) {
    AtSequence a = atSequence(ranks, expected, seq);
    if (!a.diverged()) continue;
    std::ostringstream out;
    out << pgLabel(*a.any) << ", collective sequence number " << seq << ": ";
    if (a.sigs.size() > 1) {
      out << describeMismatch(dumps, pg, seq, a);
    } else if (!a.missing.empty()) {
      std::set<int> reached;
      for (const auto& [sig, rs] : a.sigs) reached.insert(rs.begin(), rs.end());
      out << a.any->profilingName << " " << shapesText(a.any->inputSizes) << " reached by rank"
          << (reached.size() > 1 ? "s " : " ") << rankList(reached) << " (" << a.any->state << "), never called by rank"
          << (a.missing.size() > 1 ? "s " : " ") << rankList(a.missing) << " (missing call)\n";
    } else {
      out << a.any->profilingName << " " << shapesText(a.any->inputSizes) << " not completed on rank"
          << (a.unfinished.size() > 1 ? "s " : " ") << rankList(a.unfinished) << " (every rank called it)\n";
    }
    out << stackLines("stack (rank " + std::to_string(a.anyRank) + ")", *a.any);
    return out.str();  // the first divergence of the group is the one that matters; later ones follow from it
  }
  return "";
}

std::string entryText(const fr::Entry& e) {
  return e.profilingName + " " + shapesText(e.inputSizes) + " " + joined(e.inputDtypes) + " on " + pgLabel(e) +
         " (collective sequence number " + std::to_string(e.collectiveSeqId) + ")";
}

std::string ranksText(const std::set<int>& ranks) {
  return "rank" + std::string(ranks.size() > 1 ? "s " : " ") + rankList(ranks);
}

// Where the ranks first called the collectives of the groups they all belong to in a different order; "" when they
// agree up to where a group's own diagnosis takes over (a rank's calls end, or a call differs in signature).
// Sequence numbers align calls within one group only: a rank that skipped one all-reduce and went on pairs its next
// all-reduce with the others' skipped one (same signature, same sequence number), so the group alone sees every rank
// call it. Across groups the skip shows: that rank reaches another group's call first. Which side skipped is told
// by the counts: the rank that skipped made fewer calls on the skipped call's group.
std::string diagnoseOrder(const std::vector<fr::Dump>& dumps, const GroupCollectives& all) {
  std::set<std::string> common;
  for (const auto& [pg, members] : all.members) {
    if (std::includes(members.begin(), members.end(), all.dumped.begin(), all.dumped.end())) common.insert(pg);
  }
  std::map<int, std::vector<const fr::Entry*>> order;   // rank -> its collectives of common groups, in order
  std::map<int, std::map<std::string, size_t>> counts;  // rank -> group -> collectives made there
  for (const fr::Dump& d : dumps) {
    if (!d.entries.empty() && d.entries.front().recordId > 0) return "";  // wrapped: no common start to align
    std::set<std::pair<std::string, int64_t>> seen;
    for (const fr::Entry& e : d.entries) {
      if (!isCollectiveEntry(e) || !common.count(e.pgName) || !seen.insert({e.pgName, e.collectiveSeqId}).second)
        continue;
      order[d.rank].push_back(&e);
      ++counts[d.rank][e.pgName];
    }
  }
  if (order.size() < 2) return "";
  for (size_t i = 0;; ++i) {
    std::map<std::pair<std::string, int64_t>, std::set<int>> at;  // (group, sequence) -> ranks whose i-th call it is
    std::set<std::string> sigs;
    for (const auto& [rank, calls] : order) {
      if (i >= calls.size()) return "";  // a rank's calls end here: the group's diagnosis says who is missing
      at[{calls[i]->pgName, calls[i]->collectiveSeqId}].insert(rank);
      sigs.insert(signature(*calls[i]));
    }
    if (at.size() == 1) {
      if (sigs.size() > 1) return "";  // the same call with different signatures: the group's diagnosis says it
      continue;
    }
    // For each call made here: did every other rank make fewer calls on its group (so they skipped it)?
    auto entryAt = [&](int rank) { return order.at(rank)[i]; };
    for (const auto& [key, ranks] : at) {
      std::set<int> others;
      for (const auto& [rank, calls] : order)
        if (!ranks.count(rank)) others.insert(rank);
      size_t fewest = SIZE_MAX, most = 0;
      for (int r : ranks) fewest = std::min(fewest, counts[r][key.first]);
      for (int r : others) most = std::max(most, counts[r][key.first]);
      if (most >= fewest) continue;
      const fr::Entry& skipped = *entryAt(*ranks.begin());
      const fr::Entry& instead = *entryAt(*others.begin());
      std::ostringstream out;
      out << pgLabel(skipped) << ", collective sequence number " << skipped.collectiveSeqId << ": " << ranksText(others)
          << " skipped " << skipped.profilingName << " " << shapesText(skipped.inputSizes)
          << " (missing call): " << ranksText(ranks) << " called it before " << entryText(instead) << ", which "
          << ranksText(others) << " called instead; on " << pgLabel(skipped) << " " << ranksText(others) << " made "
          << most << " collectives where " << ranksText(ranks) << " made " << fewest << ", so "
          << (others.size() > 1 ? "their" : "its") << " later calls there pair with the others' earlier ones\n";
      out << stackLines("stack of the skipped call (rank " + std::to_string(*ranks.begin()) + ")", skipped);
      return out.str();
    }
    // The counts do not tell who skipped: say where the order differs, the fewest ranks first.
    std::vector<std::pair<std::pair<std::string, int64_t>, std::set<int>>> byCount(at.begin(), at.end());
    std::stable_sort(byCount.begin(), byCount.end(),
                     [](const auto& x, const auto& y) { return x.second.size() < y.second.size(); });
    std::ostringstream out;
    out << "the ranks called their groups' collectives in a different order at their collective " << i + 1 << ":";
    for (const auto& [key, ranks] : byCount)
      out << " " << ranksText(ranks) << " called " << entryText(*entryAt(*ranks.begin())) << ";";
    out << " a rank skipped a call or made an extra one there\n";
    return out.str();
  }
}

// Ranks that belong to the dumped ranks' groups but left no dump: what they did is unknown.
std::string undumped(const GroupCollectives& all) {
  std::set<int> absent;
  for (const auto& [pg, members] : all.members) {
    for (int r : members)
      if (!all.dumped.count(r)) absent.insert(r);
  }
  if (absent.empty()) return "";
  return "no dump of " + ranksText(absent) + " (members of these process groups) was given: what " +
         (absent.size() > 1 ? "they" : "it") + " called is unknown, and the diagnosis compares " +
         ranksText(all.dumped) + " only\n";
}

}  // namespace

std::string diagnose(const std::vector<fr::Dump>& dumps) {
  const GroupCollectives all = collectives(dumps);
  std::string out = diagnoseOrder(dumps, all);
  if (out.empty()) {
    for (const auto& [pg, ranks] : all.byPg) out += diagnoseGroup(dumps, pg, ranks, all);
  }
  return out + (dumps.size() > 1 ? undumped(all) : "");
}

CLI::App* addImportCommand(CLI::App& app, ImportOptions* o) {
  auto* imp = app.add_subcommand("import", "Make a RankLens trace from another tool's record");
  imp->require_subcommand(1);
  auto* fr = imp->add_subcommand(
      "flight-recorder",
      "PyTorch Flight Recorder dumps (TORCH_NCCL_TRACE_BUFFER_SIZE, written on a watchdog timeout) to a trace with "
      "one rank directory per dump, and a diagnosis of the hang or desync when several ranks' dumps are given");
  fr->add_option("dumps", o->dumps, "Dump files (pickle or JSON), one per rank, named <prefix><rank>")
      ->required()
      ->check(CLI::ExistingFile);
  fr->add_option("-o,--output", o->out, "Trace directory to write (rank<R>/ for each dump)");
  fr->add_option("--rank", o->rank, "The rank of a single dump whose file name does not end in it");
  fr->add_flag("--diagnose", o->diagnoseOnly, "Only print the cross-rank diagnosis; write no trace");
  fr->add_flag("-q,--quiet", o->quiet, "No per-rank lines");
  fr->footer(
      "Pickles are read as data only: an opcode that would import or call anything is refused.\n"
      "What a dump does not hold (payloads, streams, reduction operators, roots, counts of coalesced calls) is marked\n"
      "in each call's FlightRecorderEntry record, not invented.\n"
      "Examples:\n"
      "  ranklens import flight-recorder /tmp/fr/rank_0 /tmp/fr/rank_1 -o /tmp/fr-trace\n"
      "  ranklens import flight-recorder --diagnose /tmp/fr/rank_*\n"
      "Then: ranklens trace summary /tmp/fr-trace");
  return fr;
}

int runImport(const ImportOptions& o, std::ostream& out, std::ostream& err) {
  if (o.rank >= 0 && o.dumps.size() != 1) {
    err << "error: --rank names the rank of a single dump; with several, each file name ends in its rank\n";
    return 2;
  }
  if (!o.diagnoseOnly && o.out.empty()) {
    err << "error: give the trace directory to write (-o TRACE), or --diagnose\n";
    return 2;
  }
  std::vector<fr::Dump> dumps(o.dumps.size());
  for (size_t k = 0; k < o.dumps.size(); ++k) {
    if (Status loaded = fr::loadDump(o.dumps[k], o.rank, &dumps[k]); !loaded.isOk()) {
      err << "error: " << loaded.message() << "\n";
      return 1;
    }
  }
  std::sort(dumps.begin(), dumps.end(), [](const fr::Dump& a, const fr::Dump& b) { return a.rank < b.rank; });
  if (!o.diagnoseOnly) {
    std::vector<ImportReport> reports;
    if (Status imported = importDumps(dumps, o.out, &reports); !imported.isOk()) {
      err << "error: " << imported.message() << "\n";
      return 1;
    }
    if (!o.quiet) {
      for (size_t k = 0; k < reports.size(); ++k) {
        const ImportReport& r = reports[k];
        out << "rank " << r.rank << ": " << r.entries << " entries (dump version " << dumps[k].version << ", "
            << dumps[k].format << ") -> " << r.calls << " calls, " << r.timed << " with durations"
            << (r.notCalls ? ", " + std::to_string(r.notCalls) + " markers" : "") << "; " << r.unfinished
            << " not completed; " << r.rankDir << "\n";
      }
    }
  }
  if (dumps.size() > 1 || o.diagnoseOnly) {
    const std::string d = diagnose(dumps);
    out << (d.empty() ? "diagnosis: every collective in the dumps completed on every rank that holds it\n"
                      : "diagnosis:\n" + d);
  }
  return 0;
}

}  // namespace tools
}  // namespace ranklens

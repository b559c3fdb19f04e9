// SPDX-License-Identifier: Apache-2.0
#include "fr_export.h"

#include <CLI/CLI.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "fr_dump.h"

namespace ranklens {
namespace tools {

namespace fs = std::filesystem;
using events::Op;

PickleWriter::PickleWriter() { out_ = std::string("\x80\x02", 2); }
void PickleWriter::none() { out_ += 'N'; }
void PickleWriter::boolean(bool v) { out_ += v ? '\x88' : '\x89'; }
void PickleWriter::integer(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) {
    out_ += 'J';
    const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(v));
    for (int k = 0; k < 4; ++k) out_ += static_cast<char>((u >> (8 * k)) & 0xff);
    return;
  }
  out_ += '\x8a';  // LONG1, 8 bytes little-endian two's complement
  out_ += '\x08';
  const uint64_t u = static_cast<uint64_t>(v);
  for (int k = 0; k < 8; ++k) out_ += static_cast<char>((u >> (8 * k)) & 0xff);
}
void PickleWriter::real(double v) {
  out_ += 'G';
  uint64_t u;
  std::memcpy(&u, &v, 8);
  for (int k = 7; k >= 0; --k) out_ += static_cast<char>((u >> (8 * k)) & 0xff);
}
void PickleWriter::str(const std::string& s) {
  out_ += 'X';
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int k = 0; k < 4; ++k) out_ += static_cast<char>((n >> (8 * k)) & 0xff);
  out_ += s;
}
void PickleWriter::beginDict() { out_ += "}("; }
void PickleWriter::beginList() { out_ += "]("; }
void PickleWriter::end(bool dict) { out_ += dict ? 'u' : 'e'; }
void PickleWriter::tuple2() { out_ += '\x86'; }
std::string PickleWriter::finish() { return out_ + "."; }

namespace {

const char* c10Dtype(int datatype) {
  switch (datatype) {
    case 0:
      return "Char";
    case 1:
      return "Byte";
    case 2:
      return "Int";
    case 3:
      return "UInt32";
    case 4:
      return "Long";
    case 5:
      return "UInt64";
    case 6:
      return "Half";
    case 7:
      return "Float";
    case 8:
      return "Double";
    case 9:
      return "BFloat16";
    case 10:
      return "Float8_e4m3fn";
    case 11:
      return "Float8_e5m2";
    default:
      return "Undefined";
  }
}

using Shapes = std::vector<std::vector<int64_t>>;

void shapes(PickleWriter* w, const Shapes& s) {
  w->beginList();
  for (const auto& shape : s) {
    w->beginList();
    for (int64_t d : shape) w->integer(d);
    w->end(false);
  }
  w->end(false);
}

void strings(PickleWriter* w, const std::vector<std::string>& v) {
  w->beginList();
  for (const auto& s : v) w->str(s);
  w->end(false);
}

// An imported entry's shapes ("[[1024], [4]]") and dtypes ("Float, Float") back into lists.
Shapes parseShapes(const std::string& text) {
  Shapes out;
  fr::Pickle doc;
  if (text.empty() || !fr::readJson(text, "shapes", &doc).isOk() || !doc.root->isSeq()) return out;
  for (const fr::Value* shape : doc.root->items) {
    std::vector<int64_t> dims;
    if (shape->isSeq())
      for (const fr::Value* d : shape->items) dims.push_back(d->isInt() ? d->i : 0);
    out.push_back(std::move(dims));
  }
  return out;
}

std::vector<std::string> splitDtypes(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t a = item.find_first_not_of(' ');
    if (a != std::string::npos) out.push_back(item.substr(a));
  }
  return out;
}

struct FrameLine {
  std::string name, file;
  int64_t line = 0;
};
std::vector<FrameLine> parseFrames(const std::string& text) {
  std::vector<FrameLine> out;
  std::istringstream in(text);
  std::string l;
  while (std::getline(in, l)) {
    const size_t sp = l.find(' '), from = l.find(" from "), colon = l.rfind(':');
    if (sp == std::string::npos || from == std::string::npos || colon == std::string::npos || colon < from) continue;
    FrameLine f;
    f.name = l.substr(sp + 1, from - sp - 1);
    f.file = l.substr(from + 6, colon - from - 6);
    f.line = std::atoll(l.c_str() + colon + 1);
    out.push_back(std::move(f));
  }
  return out;
}

std::string ranksText(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t k = 0; k < ranks.size(); ++k) s += (k ? ", " : "") + std::to_string(ranks[k]);
  return s + "]";
}

// A process group as a dump names and counts it. An imported trace's keep their torch names ("0", "1") and
// descriptions; a recording's are named by communicator id, plus the member ranks when they are not every rank, so
// that disjoint groups made in the same order on different ranks stay apart when fr_trace puts every rank's dump
// together.
struct Group {
  std::string name, desc;
  std::vector<int> ranks;
  int nranks = 0, rank = 0;
  int64_t collectives = 0, p2p = 0, ops = 0, enqueued = 0, completed = 0;
};

std::map<uint64_t, Group> dumpGroups(const EventLog& log, bool imported) {
  std::map<uint64_t, Group> groups;
  for (const events::CommInit& c : log.comms) {
    Group g;
    g.nranks = c.nranks;
    g.rank = c.rank;
    g.ranks = c.worldRanks;
    if (g.ranks.empty()) {
      for (int r = 0; r < c.nranks; ++r) g.ranks.push_back(r);
    }
    const size_t colon = c.name.find(':');
    if (imported && !c.name.empty()) {
      g.name = c.name.substr(0, colon);
      g.desc = colon == std::string::npos ? "undefined" : c.name.substr(colon + 1);
    } else {
      g.name = std::to_string(c.commId);
      if (log.manifest.world_size > 0 && c.nranks != log.manifest.world_size) {
        for (int r : g.ranks) g.name += "_" + std::to_string(r);
      }
      g.desc = c.name.empty() ? "undefined" : c.name;
    }
    groups[c.commId] = std::move(g);
  }
  return groups;
}

// One entry of the dump's "entries" list.
struct EntryOut {
  uint64_t commId = 0;
  int64_t collectiveSeq = 0, p2pSeq = 0, timeNs = 0, timeoutMs = 600000;
  std::string profiling, state = "completed";
  std::optional<double> durationMs;
  Shapes in, out;
  std::vector<std::string> inTypes, outTypes;
  bool p2p = false;
  std::vector<FrameLine> frames;
};

// An entry the dump said, as it said it (an imported call, or one of torch's coalesced markers).
EntryOut importedEntry(const trace::FlightRecorderEntry& e) {
  EntryOut o;
  o.commId = e.commId;
  o.collectiveSeq = e.collectiveSeqId;
  o.p2pSeq = e.p2pSeqId;
  o.profiling = e.profilingName;
  o.timeNs = e.timeCreatedNs;
  if (e.durationNs >= 0) o.durationMs = static_cast<double>(e.durationNs) / 1e6;
  o.in = parseShapes(e.inputSizes);
  o.out = parseShapes(e.outputSizes);
  o.inTypes = splitDtypes(e.inputDtypes);
  o.outTypes = splitDtypes(e.outputDtypes);
  o.state = e.state;
  o.timeoutMs = e.timeoutMs;
  o.p2p = e.isP2p;
  o.frames = parseFrames(e.frames);
  return o;
}

// torch's profiling name of a call and its tensor shapes (one tensor of `count` elements, or world-size times that
// for the gathered or scattered side); false for an operation torch's dump has no entry for.
bool torchShapes(Op op, int64_t n, int64_t world, int rank, int peer, std::string* name, Shapes* in, Shapes* out) {
  *in = {{n}};
  *out = {{n}};
  switch (op) {
    case Op::kAllReduce:
      *name = "all_reduce";
      return true;
    case Op::kBroadcast:
      *name = "broadcast";
      return true;
    case Op::kReduce:
      *name = "reduce";
      return true;
    case Op::kAllGather:
      *name = "_all_gather_base";
      *out = {{n * world}};
      return true;
    case Op::kReduceScatter:
      *name = "_reduce_scatter_base";
      *in = {{n * world}};
      return true;
    case Op::kAlltoAll:
      *name = "all_to_all";
      *in = *out = {{n * world}};
      return true;
    case Op::kGather:
      *name = "gather";
      *out = Shapes(static_cast<size_t>(world), {n});
      return true;
    case Op::kScatter:
      *name = "scatter";
      *in = Shapes(static_cast<size_t>(world), {n});
      return true;
    case Op::kSend:
      *name = "send " + std::to_string(rank) + "->" + std::to_string(peer);
      return true;
    case Op::kRecv:
      *name = "recv " + std::to_string(rank) + "<-" + std::to_string(peer);
      return true;
    default:
      return false;
  }
}

// Writes one rank's dump: the entries in call order, then pg_config and pg_status.
class DumpWriter {
 public:
  explicit DumpWriter(const EventLog& log) : log_(log) {
    const bool imported = log.manifest.imported.count("from") && log.manifest.imported.at("from") == "flight-recorder";
    groups_ = dumpGroups(log, imported);
    for (const trace::Timing& t : log.timings) timings_[callKey(t.commId, t.op, t.peer, t.seq)] = &t;
    for (const trace::FlightRecorderEntry& e : log.frEntries) {
      if (e.op >= 0) entries_[callKey(e.commId, e.op, e.peer, e.seq)] = &e;
    }
    for (const trace::FlightRecorderEntry& e : log.frEntries) {
      if (e.op < 0 && groups_.count(e.commId)) {
        markers_.push_back(&e);
        if (e.profilingName.find(":coalesced") != std::string::npos) coalescedP2p_.insert({e.commId, e.p2pSeqId});
      }
    }
    for (const events::Call& c : log.calls) {
      if (c.groupId != 0) ++perGroup_[{c.groupId, c.commId}];
    }
  }

  std::string write() {
    w_.beginDict();
    w_.str("version");
    w_.str("2.10");
    w_.str("comm_lib_version");
    const int v = log_.manifest.nccl_version;
    w_.str(v > 0 ? std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100)
                 : "");
    w_.str("entries");
    w_.beginList();
    open_.reserve(log_.comms.size() + 1);  // openOf_ points into it
    for (const events::Call& c : log_.calls) writeCall(c);
    if (!open_.empty()) closeGroup();
    while (nextMarker_ < markers_.size()) emit(importedEntry(*markers_[nextMarker_++]));
    w_.end(false);
    writeGroups();
    w_.end(true);
    return w_.finish();
  }

 private:
  void emit(const EntryOut& o) {
    Group& g = groups_.at(o.commId);
    ++g.ops;
    ++g.enqueued;
    if (o.state == "completed") ++g.completed;
    PickleWriter& w = w_;
    w.beginDict();
    w.str("record_id");
    w.integer(recordId_++);
    w.str("pg_id");
    w.integer(static_cast<int64_t>(o.commId));
    w.str("process_group");
    w.str(g.name);
    w.str(g.desc);
    w.tuple2();
    w.str("thread_name");
    w.str("");
    w.str("thread_id");
    w.str("");
    w.str("collective_seq_id");
    w.integer(o.collectiveSeq);
    w.str("p2p_seq_id");
    w.integer(o.p2pSeq);
    w.str("op_id");
    w.integer(g.ops);
    w.str("profiling_name");
    w.str(o.profiling);
    w.str("time_created_ns");
    w.integer(o.timeNs);
    if (o.durationMs) {
      w.str("duration_ms");
      w.real(*o.durationMs);
    }
    w.str("input_sizes");
    shapes(&w, o.in);
    w.str("input_dtypes");
    strings(&w, o.inTypes);
    w.str("output_sizes");
    shapes(&w, o.out);
    w.str("output_dtypes");
    strings(&w, o.outTypes);
    w.str("state");
    w.str(o.state);
    w.str("time_discovered_started_ns");
    if (o.state == "scheduled")
      w.none();
    else
      w.integer(o.timeNs);
    w.str("time_discovered_completed_ns");
    if (o.state == "completed")
      w.integer(o.timeNs);
    else
      w.none();
    w.str("retired");
    w.boolean(o.state == "completed");
    w.str("timeout_ms");
    w.integer(o.timeoutMs);
    w.str("is_p2p");
    w.boolean(o.p2p);
    w.str("frames");
    w.beginList();
    for (const FrameLine& f : o.frames) {
      w.beginDict();
      w.str("name");
      w.str(f.name);
      w.str("filename");
      w.str(f.file);
      w.str("line");
      w.integer(f.line);
      w.end(true);
    }
    w.end(false);
    w.end(true);
  }

  // NCCL groups (ncclGroupStart/End) as torch's coalescing: the calls a group made on one communicator share one
  // sequence id (collective_seq_id, or p2p_seq_id for point-to-point calls) and end with a "nccl:coalesced" entry,
  // which fr_trace needs to match them; a group's single call on a communicator is numbered as any call.
  struct Open {
    uint64_t commId;
    int64_t collectiveSeq, p2pSeq, timeNs;
    bool p2p;
  };

  void closeGroup() {
    for (const Open& o : open_) {
      EntryOut m;
      m.commId = o.commId;
      m.collectiveSeq = o.collectiveSeq;
      m.p2pSeq = o.p2pSeq;
      m.profiling = "nccl:coalesced";
      m.timeNs = o.timeNs;
      m.p2p = o.p2p;
      emit(m);
    }
    open_.clear();
    openOf_.clear();
    openGroup_ = 0;
  }

  // Advances the communicator's sequence ids for call `c`; the coalesced group it belongs to, if any.
  const Open* sequence(const events::Call& c, Group& g, bool p2p) {
    const bool coalesced = c.groupId != 0 && perGroup_[{c.groupId, c.commId}] > 1;
    if (coalesced) {
      openGroup_ = c.groupId;
      auto it = openOf_.find(c.commId);
      if (it == openOf_.end()) {  // the group's first call on this communicator: one sequence id for all of them
        if (p2p)
          ++g.p2p;
        else
          g.collectives = static_cast<int64_t>(c.seq) + 1;
        open_.push_back(Open{c.commId, g.collectives, g.p2p, c.timeNs, p2p});
        it = openOf_.emplace(c.commId, &open_.back()).first;
      }
      return it->second;
    }
    if (p2p)
      ++g.p2p;
    else
      g.collectives = static_cast<int64_t>(c.seq) + 1;
    return nullptr;
  }

  void writeCall(const events::Call& c) {
    auto git = groups_.find(c.commId);
    if (git == groups_.end()) return;  // a call on a communicator the trace never saw made
    Group& g = git->second;
    if (c.groupId != openGroup_ && !open_.empty()) closeGroup();
    const Op op = static_cast<Op>(c.op);
    const bool p2p = events::isP2p(op);
    const int peer = p2p ? c.rootOrPeer : -1;
    const trace::FlightRecorderEntry* fe = nullptr;
    if (auto it = entries_.find(callKey(c.commId, c.op, peer, c.seq)); it != entries_.end()) fe = it->second;
    std::string name;
    Shapes in, out;
    if (!torchShapes(op, static_cast<int64_t>(c.count), std::max(g.nranks, 1), g.rank, peer, &name, &in, &out)) return;
    const Open* grp = sequence(c, g, p2p);
    EntryOut o;
    if (fe != nullptr) {  // an imported call: what the dump said
      o = importedEntry(*fe);
      // The import gives a send or receive of a coalesced group its group's state; torch writes them "scheduled"
      // and keeps that state on the group's nccl:coalesced entry, and so does the export.
      if (fe->isP2p && coalescedP2p_.count({fe->commId, fe->p2pSeqId})) o.state = "scheduled";
      o.durationMs.reset();
    } else {
      o.collectiveSeq = grp ? grp->collectiveSeq : g.collectives;
      o.p2pSeq = grp ? grp->p2pSeq : g.p2p;
      o.profiling = "nccl:" + name;
      o.in = std::move(in);
      o.out = std::move(out);
      o.inTypes.assign(o.in.size(), c10Dtype(c.datatype));
      o.outTypes.assign(o.out.size(), c10Dtype(c.datatype));
    }
    o.commId = c.commId;
    o.timeNs = c.timeNs;
    o.p2p = p2p;
    auto t = timings_.find(callKey(c.commId, c.op, peer, c.seq));
    if (t != timings_.end() && t->second->durationNs > 0 && !t->second->captured) {
      o.durationMs = static_cast<double>(t->second->durationNs) / 1e6;
    }
    // An imported trace's entries that are no call (torch's coalesced markers) go back where they were: fr_trace
    // groups the calls before one into a coalesced group.
    while (fe != nullptr && nextMarker_ < markers_.size() && markers_[nextMarker_]->recordId < fe->recordId) {
      emit(importedEntry(*markers_[nextMarker_++]));
    }
    emit(o);
  }

  void writeGroups() {
    w_.str("pg_config");
    w_.beginDict();
    for (const auto& [id, g] : groups_) {
      w_.str(g.name);
      w_.beginDict();
      w_.str("name");
      w_.str(g.name);
      w_.str("desc");
      w_.str(g.desc);
      w_.str("ranks");
      w_.str(ranksText(g.ranks));
      w_.end(true);
    }
    w_.end(true);
    w_.str("pg_status");
    w_.beginDict();
    for (const auto& [id, g] : groups_) {
      w_.str(std::to_string(id));
      w_.beginDict();
      w_.str("last_enqueued_collective");
      w_.integer(g.collectives);
      w_.str("last_started_collective");
      w_.integer(g.collectives);
      w_.str("last_completed_collective");
      w_.integer(g.enqueued == g.completed ? g.collectives : g.collectives - 1);
      w_.end(true);
    }
    w_.end(true);
  }

  const EventLog& log_;
  std::map<uint64_t, Group> groups_;
  std::map<CallKey, const trace::Timing*> timings_;
  std::map<CallKey, const trace::FlightRecorderEntry*> entries_;
  std::vector<const trace::FlightRecorderEntry*> markers_;  // an imported trace's entries that are no call
  std::set<std::pair<uint64_t, int64_t>> coalescedP2p_;     // (comm, p2p_seq_id) of its nccl:coalesced markers
  size_t nextMarker_ = 0;
  std::map<std::pair<uint64_t, uint64_t>, int> perGroup_;  // (groupId, commId) -> calls
  uint64_t openGroup_ = 0;
  std::vector<Open> open_;  // communicators the open group coalesces, in first-call order
  std::map<uint64_t, Open*> openOf_;
  PickleWriter w_;
  int64_t recordId_ = 0;
};

}  // namespace

std::string flightRecorderDump(const EventLog& log) { return DumpWriter(log).write(); }

CLI::App* addExportCommand(CLI::App& app, ExportOptions* o) {
  auto* ex = app.add_subcommand("export", "Write a RankLens trace in another tool's format");
  ex->require_subcommand(1);
  auto* fr = ex->add_subcommand(
      "flight-recorder",
      "PyTorch Flight Recorder dumps (pickle, version 2.10), one file <DIR>/rank_<R> per rank, that torch's "
      "analyser reads: python -m torch.distributed.flight_recorder.fr_trace DIR");
  fr->add_option("trace", o->trace, "Trace directory (or one rank<R> directory)")
      ->required()
      ->check(CLI::ExistingDirectory);
  fr->add_option("-o,--output", o->out, "Directory to write the dumps to")->required();
  fr->footer(
      "Every call becomes an entry (state completed; an imported trace's keep the dump's states, shapes and stacks);\n"
      "durations come from the trace's Timing records. Process groups are the trace's communicators.\n"
      "Example:\n"
      "  ranklens export flight-recorder /scratch/run42 -o /tmp/fr && "
      "python -m torch.distributed.flight_recorder.fr_trace /tmp/fr");
  return fr;
}

int runExport(const ExportOptions& o, std::ostream& out, std::ostream& err) {
  const std::vector<std::string> dirs = trace::rankDirectories(o.trace);
  if (dirs.empty()) {
    err << "error: " << o.trace << ": no rank directory with a manifest.msgpack (not a RankLens trace)\n";
    return 2;
  }
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec) {
    err << "error: " << o.out << ": " << ec.message() << "\n";
    return 1;
  }
  int status = 0;
  for (const std::string& dir : dirs) {
    EventLog log;
    if (Status read = readEventLog(dir, &log); !read.isOk()) {
      err << "error: " << read.message() << "\n";
      return 1;
    }
    warnAboutDamage(log, "the dump holds the calls before the damage", err);
    if (log.incomplete()) status = 1;  // written, but not the whole trace: said above
    if (log.manifest.rank < 0) {
      err << "error: " << dir << ": the trace does not say its rank; fr_trace names dumps by rank\n";
      return 1;
    }
    const std::string path = (fs::path(o.out) / ("rank_" + std::to_string(log.manifest.rank))).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    const std::string bytes = flightRecorderDump(log);
    if (!f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
      err << "error: " << path << ": cannot write\n";
      return 1;
    }
    out << "rank " << log.manifest.rank << ": " << log.calls.size() << " calls -> " << path << "\n";
  }
  return status;
}

}  // namespace tools
}  // namespace ranklens

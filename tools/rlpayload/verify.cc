// SPDX-License-Identifier: Apache-2.0
// rlpayload verify: check every rank of a trace: manifest, segments (truncation vs corruption), record shapes, the
// index against a rebuild, every payload blob (zstd, sizes, CRC-32), and the manifest's counters.
#include <sstream>
#include <fstream>
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>

#include "commands.h"
#include "dtype.h"

namespace rlpayload {

namespace fs = std::filesystem;
using namespace ranklens::trace;

namespace {

struct Finding {
  bool problem = true;  // else a warning
  std::string check;    // manifest, segment, record, index, payload, counters, files
  std::string file;
  std::optional<uint64_t> offset;
  std::string reason;
  bool truncated = false;
  // Where a finding has no byte offset (the manifest, the index, the counters): the key or entry it is about
  // (docs/trace-format.md: such problems name the key or entry, not a byte offset).
  std::string key;
};

struct RankReport {
  int rank = -1;
  std::string dir;
  bool opened = false, closed = false;
  uint32_t segments = 0, payloadFiles = 0;
  uint64_t records = 0, calls = 0, payloadRefs = 0, edits = 0, payloadsChecked = 0, unknownRecords = 0;
  std::string index = "unchecked";  // current | stale | missing | unreadable | inconsistent
  std::vector<Finding> findings;
  void add(bool problem, std::string check, std::string file, std::optional<uint64_t> offset, std::string reason,
           bool truncated = false) {
    findings.push_back({problem, std::move(check), std::move(file), offset, std::move(reason), truncated, {}});
  }
  void addAtKey(bool problem, std::string check, std::string file, std::string key, std::string reason) {
    findings.push_back(
        {problem, std::move(check), std::move(file), std::nullopt, std::move(reason), false, std::move(key)});
  }
  size_t count(bool problems) const {
    size_t n = 0;
    for (const auto& f : findings) n += f.problem == problems;
    return n;
  }
};

// (commId, kind, peer, seq): kind 0 collective (peer -1), 1 Send, 2 Recv — how the format identifies a call.
using CallKey = std::tuple<uint64_t, int, int, uint64_t>;
CallKey keyOf(uint64_t comm, int op, int peer, uint64_t seq) {
  const int kind = op == 8 ? 1 : op == 9 ? 2 : 0;
  return {comm, kind, kind ? peer : -1, seq};
}
using Entries = std::map<CallKey, std::pair<uint32_t, uint64_t>>;  // -> (segment, frame offset)

bool isNumberedName(const std::string& name, const char* prefix, const char* suffix, uint32_t* index) {
  const std::string p(prefix), s(suffix);
  if (name.size() != p.size() + 6 + s.size() || name.compare(0, p.size(), p) != 0 ||
      name.compare(p.size() + 6, s.size(), s) != 0)
    return false;
  const std::string digits = name.substr(p.size(), 6);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return false;
  *index = static_cast<uint32_t>(std::stoul(digits));
  return true;
}

// The index's entries under `key`: arrays of at least six integers [commId, seq, op, peer, segment, offset]; further
// elements ignored. Throws (msgpack's type_error, or runtime_error) on a malformed one: checkIndex reports the index
// unreadable then, as a reader would rebuild it.
Entries indexEntries(const std::map<std::string, msgpack::object>& index, const char* key) {
  Entries out;
  const msgpack::object& entries = index.at(key);
  if (entries.type != msgpack::type::ARRAY) throw std::runtime_error(std::string(key) + " is not an array");
  for (uint32_t i = 0; i < entries.via.array.size; ++i) {
    const msgpack::object& e = entries.via.array.ptr[i];
    if (e.type != msgpack::type::ARRAY || e.via.array.size < 6)
      throw std::runtime_error(std::string(key) + " entry " + std::to_string(i) + " is malformed");
    const msgpack::object* f = e.via.array.ptr;
    out[keyOf(f[0].as<uint64_t>(), f[2].as<int32_t>(), f[3].as<int32_t>(), f[1].as<uint64_t>())] = {
        f[4].as<uint32_t>(), f[5].as<uint64_t>()};
  }
  return out;
}

// The index's entries against the scan's: a disagreement is a problem, since readers trust the index.
void compareEntries(const Entries& indexed, const Entries& scanned, const std::string& path, const char* key,
                    const char* what, RankReport& r) {
  uint64_t missing = 0, extra = 0, moved = 0;
  for (const auto& [k, where] : scanned) {
    auto it = indexed.find(k);
    if (it == indexed.end())
      ++missing;
    else if (it->second != where)
      ++moved;
  }
  for (const auto& [k, where] : indexed) extra += scanned.count(k) == 0;
  if (missing || extra || moved) {
    r.index = "inconsistent";
    r.addAtKey(true, "index", path, key,
               std::string("disagrees with the segments it claims to describe: ") + what + ": " +
                   std::to_string(missing) + " missing, " + std::to_string(extra) + " extra, " + std::to_string(moved) +
                   " at another location (readers trust it: delete it to force a rebuild)");
  }
}

// Compares index.msgpack with what a scan of the segments found.
// With `damaged` segments the scan stops at the damage while the index may list intact records beyond it, so the
// entries are not compared (the segment problem is the finding).
void checkIndex(RankReport& r, const std::vector<std::pair<std::string, uint64_t>>& segments, const Entries& calls,
                const Entries& payloads, bool damaged) {
  const std::string path = r.dir + "/index.msgpack";
  std::vector<uint8_t> data;
  {
    FILE* f = fopen(path.c_str(), "rb");
    if (!f) {
      r.index = "missing";
      r.add(false, "index", path, std::nullopt, "missing (a cache: readers rebuild it from the segments)");
      return;
    }
    // An index larger than its segments can need is not the writer's (a sparse or hostile file): judged by its
    // size, as readers do, never read whole.
    uint64_t segmentBytes = 0;
    for (const auto& seg : segments) segmentBytes += seg.second;
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && static_cast<uint64_t>(st.st_size) > indexByteLimit(segmentBytes)) {
      fclose(f);
      r.index = "stale";
      r.add(false, "index", path, std::nullopt,
            std::to_string(st.st_size) + " bytes, more than " + std::to_string(segmentBytes) +
                " bytes of segments can need: not the writer's (sparse or damaged); readers rebuild it");
      return;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) data.insert(data.end(), buf, buf + n);
    fclose(f);
  }
  try {
    size_t used = 0;
    // No container can hold more elements than the file has bytes: a header claiming more is refused before
    // msgpack allocates for it.
    const auto n = static_cast<uint32_t>(std::min<size_t>(data.size(), 0xffffffffu));
    auto handle = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size(), used, nullptr, nullptr,
                                  msgpack::unpack_limit(n, n, n, n, n, 4));
    std::map<std::string, msgpack::object> index;
    handle.get().convert(index);
    if (index.at("version_major").as<int>() != kFormatMajor) {
      r.index = "stale";
      r.addAtKey(false, "index", path, "version_major", "written for another format version: readers rebuild it");
      return;
    }
    // The listed segments must be exactly the files present, same names and sizes, in any order.
    std::vector<std::pair<std::string, uint64_t>> listed, actual(segments);
    for (const auto& [name, size] : index.at("segments").as<std::vector<std::tuple<std::string, uint64_t>>>())
      listed.emplace_back(name, size);
    std::sort(listed.begin(), listed.end());
    std::sort(actual.begin(), actual.end());
    if (listed != actual) {
      r.index = "stale";
      r.addAtKey(false, "index", path, "segments",
                 "stale: built from other segment files or sizes (readers rebuild it; an edit or a crash leaves this)");
      return;
    }
    if (damaged) {
      r.index = "not compared";
      return;
    }
    const Entries indexedCalls = indexEntries(index, "calls"), indexedPayloads = indexEntries(index, "payloads");
    r.index = "current";
    compareEntries(indexedCalls, calls, path, "calls", "calls", r);
    compareEntries(indexedPayloads, payloads, path, "payloads", "payload references", r);
  } catch (const std::exception& e) {
    r.index = "unreadable";
    r.add(false, "index", path, std::nullopt, std::string("unreadable (") + e.what() + "): readers rebuild it");
  }
}

// The manifest's own warnings: its rank against the directory name, an unclosed writer, drops while recording.
void checkManifest(const Manifest& m, const std::string& dir, RankReport& r) {
  const std::string mp = dir + "/manifest.msgpack";
  if (m.rank >= 0) {
    if (r.rank >= 0 && r.rank != m.rank)
      r.addAtKey(
          false, "manifest", mp, "rank",
          "manifest says rank " + std::to_string(m.rank) + ", the directory name says rank " + std::to_string(r.rank));
    r.rank = m.rank;
  }
  r.closed = m.closed;
  if (!m.closed)
    r.addAtKey(false, "manifest", mp, "closed",
               "not closed: the writer crashed or is still running (counters not compared)");
  if (m.records_dropped)
    r.addAtKey(false, "manifest", mp, "records_dropped",
               std::to_string(m.records_dropped) + " records were dropped while recording");
  if (m.payloads_dropped)
    r.addAtKey(false, "manifest", mp, "payloads_dropped",
               std::to_string(m.payloads_dropped) + " payloads were dropped while recording");
}

// What one pass over the segments found: where each call and payload reference is, and which references an edit
// appended (the manifest's counters leave those out).
struct Scan {
  Entries calls, effective;
  std::vector<std::pair<PayloadRef, Location>> refs;
  std::set<size_t> editRefs;  // indices into refs written by an edit (reference immediately followed by its Edit)
  uint64_t editRecords = 0;
};

// One record's shape; a malformed record other than Call and PayloadRef is a finding (the reader itself reports
// those two: they are what its index points at).
void scanRecord(RecordType type, const msgpack::object& body, const Location& where, const std::string& dir,
                RankReport& r, Scan& s, std::optional<size_t>& previousRef) {
  ++r.records;
  std::optional<size_t> justRead;
  try {
    switch (type) {
      case RecordType::kCall: {
        auto c = body.as<ranklens::events::Call>();
        s.calls[keyOf(c.commId, c.op, c.rootOrPeer, c.seq)] = {where.segment, where.offset};
        ++r.calls;
        break;
      }
      case RecordType::kPayloadRef: {
        auto p = body.as<PayloadRef>();
        s.effective[keyOf(p.commId, p.op, p.peer, p.seq)] = {where.segment, where.offset};
        s.refs.emplace_back(p, where);
        justRead = s.refs.size() - 1;
        break;
      }
      case RecordType::kEdit: {
        auto e = body.as<Edit>();
        ++s.editRecords;
        if (previousRef && editNames(e, &s.refs[*previousRef].first, s.refs[*previousRef].first))
          s.editRefs.insert(*previousRef);  // the reference this edit appended with it
        break;
      }
      case RecordType::kCommInit:
        body.as<ranklens::events::CommInit>();
        break;
      case RecordType::kCommEnd:
        body.as<ranklens::events::CommEnd>();
        break;
      case RecordType::kGroupEnd:
        body.as<ranklens::events::GroupEnd>();
        break;
      case RecordType::kStage:
        body.as<ranklens::events::Stage>();
        break;
      case RecordType::kGroupBegin:
        body.as<GroupBegin>();
        break;
      case RecordType::kTiming:
        body.as<Timing>();
        break;
      default:
        ++r.unknownRecords;
        break;  // a newer minor version: skipped, as the format says
    }
  } catch (const std::exception& e) {
    if (type != RecordType::kCall && type != RecordType::kPayloadRef)
      r.add(true, "record", dir + "/" + segmentName(where.segment), where.offset,
            std::string(recordTypeName(type)) + " record is malformed: " + e.what());
  }
  previousRef = justRead;
}

Scan scanSegments(TraceReader& reader, const std::string& dir, RankReport& r, bool json) {
  Scan s;
  std::optional<size_t> previousRef;
  Progress scanning("verify " + dir + ": records", 0, !json);
  reader.scan([&](RecordType type, const msgpack::object& body, const Location& where) {
    scanning.tick();
    scanRecord(type, body, where, dir, r, s, previousRef);
    return true;
  });
  scanning.done();
  r.edits = s.editRecords;
  r.payloadRefs = s.refs.size();
  return s;
}

// The reader's segment problems as findings; true when a segment is damaged (counters and orphans are then not
// judged: references past the damage are simply unreadable).
bool reportSegmentDamage(const TraceReader& reader, RankReport& r) {
  bool damaged = false;
  for (const auto& p : reader.problems()) {
    // The reader's count check: verify compares every counter with the records itself (checkCounters), more
    // precisely.
    if (p.reason.find(", but the closed manifest counts ") != std::string::npos) continue;
    damaged = true;
    r.add(true, "segment", p.file, p.offset,
          p.reason + (p.truncated ? " (truncated: the file ends inside a frame, as a crash leaves it)" : ""),
          p.truncated);
  }
  return damaged;
}

std::vector<std::pair<std::string, uint64_t>> segmentFileSizes(const std::string& dir, uint32_t segments) {
  std::vector<std::pair<std::string, uint64_t>> files;
  for (uint32_t i = 0; i < segments; ++i) {
    struct stat st;
    const std::string name = segmentName(i);
    files.emplace_back(name, stat((dir + "/" + name).c_str(), &st) == 0 ? st.st_size : 0);
  }
  return files;
}

std::set<uint32_t> payloadFileIndices(const std::string& dir) {
  std::set<uint32_t> indices;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      uint32_t index = 0;
      if (isNumberedName(e->d_name, "pay-", ".rlp", &index)) indices.insert(index);
    }
    closedir(d);
  }
  return indices;
}

// Every payload reference (superseded ones too: an edit keeps the original, which must stay readable): its datatype
// and size, and its blob read back. Returns the payload files referenced.
std::set<uint32_t> checkPayloads(TraceReader& reader, const std::string& dir, const Scan& s, RankReport& r, bool json) {
  std::set<uint32_t> referenced;
  Progress checking("verify " + dir + ": payloads", s.refs.size(), !json);
  for (const auto& [ref, where] : s.refs) {
    checking.tick();
    referenced.insert(ref.file);
    const std::string segFile = dir + "/" + segmentName(where.segment);
    const DtypeInfo* info = dtypeInfo(ref.datatype);
    if (info == nullptr) {
      r.add(true, "payload", segFile, where.offset,
            "PayloadRef for " + describeCall(ref.commId, ref.op, ref.peer, ref.seq) + ": datatype " +
                std::to_string(ref.datatype) + " is not an NCCL datatype");
      continue;
    }
    if (ref.count > ref.rawBytes / info->size || ref.count * info->size != ref.rawBytes)
      r.add(true, "payload", segFile, where.offset,
            "PayloadRef for " + describeCall(ref.commId, ref.op, ref.peer, ref.seq) + ": " + std::to_string(ref.count) +
                " x " + info->name + " is not " + std::to_string(ref.rawBytes) + " bytes");
    std::vector<uint8_t> bytes;
    Problem problem;
    if (!reader.readPayload(ref, &bytes, &problem)) {
      r.add(true, "payload", problem.file, problem.offset,
            problem.reason + " (payload of " + describeCall(ref.commId, ref.op, ref.peer, ref.seq) +
                ", referenced from " + segmentName(where.segment) + " offset " + std::to_string(where.offset) + ")",
            problem.truncated);
      continue;
    }
    ++r.payloadsChecked;
  }
  checking.done();
  return referenced;
}

// Payload files nothing points into, and payload references without their Call record.
void checkOrphans(const std::string& dir, const Scan& s, const std::set<uint32_t>& payloadFiles,
                  const std::set<uint32_t>& referenced, bool segmentDamage, RankReport& r) {
  for (uint32_t f : payloadFiles)
    if (!referenced.count(f) && !segmentDamage)  // with damage, references past it are simply unreadable
      r.add(false, "files", dir + "/" + payloadName(f), std::nullopt,
            "no payload reference points into this file (left by an interrupted edit or recording?)");
  for (const auto& [k, where] : s.effective) {
    if (!s.calls.count(k)) {
      const auto& [comm, kind, peer, seq] = k;
      r.add(false, "record", dir + "/" + segmentName(where.first), where.second,
            "payload reference for comm " + std::to_string(comm) +
                (kind == 1   ? " Send peer " + std::to_string(peer)
                 : kind == 2 ? " Recv peer " + std::to_string(peer)
                             : std::string(" collective")) +
                " seq " + std::to_string(seq) + " without a Call record");
    }
  }
}

// An interrupted in-place edit (its journal left) as a finding, with how to roll it back; false when there is none.
// The counters and files then disagree because of it, not damage.
bool reportInterruptedEdit(const std::string& dir, RankReport& r) {
  ranklens::trace::InterruptedEdit edit;
  if (!ranklens::trace::findInterruptedEdit(dir, &edit)) return false;
  const std::string text = edit.describe();
  r.add(true, "edit", edit.journal, std::nullopt, text.substr(edit.journal.size() + 2));
  return true;
}

// The manifest's counters against what the scan found (only meaningful for a cleanly closed trace without damage).
// Edits append a PayloadRef + an Edit each and do not change the recording's counters.
void checkCounters(const Manifest& m, const std::string& dir, const Scan& s, const std::set<uint32_t>& payloadFiles,
                   RankReport& r) {
  uint64_t recordedRefs = 0, raw = 0, compressed = 0;
  for (size_t i = 0; i < s.refs.size(); ++i) {
    if (s.editRefs.count(i)) continue;
    ++recordedRefs;
    raw += s.refs[i].first.rawBytes;
    compressed += s.refs[i].first.compressedBytes;
  }
  const uint64_t recorded = r.records - s.editRecords - s.editRefs.size();
  const std::string mp = dir + "/manifest.msgpack";
  auto expect = [&](const char* key, uint64_t said, uint64_t found, const char* what) {
    if (said != found)
      r.addAtKey(
          true, "counters", mp, key,
          std::string(key) + " is " + std::to_string(said) + ", but " + std::to_string(found) + " " + what + " found");
  };
  expect("records_written", m.records_written, recorded, "recorded records (edits not counted) were");
  expect("payloads_written", m.payloads_written, recordedRefs, "recorded payload references were");
  expect("payload_raw_bytes", m.payload_raw_bytes, raw, "bytes in recorded payloads were");
  expect("payload_compressed_bytes", m.payload_compressed_bytes, compressed, "compressed bytes were");
  expect("segments", m.segments, r.segments, "segment files were");
  const uint32_t payloadSpan = payloadFiles.empty() ? 0 : *payloadFiles.rbegin() + 1;
  if (!reportInterruptedEdit(dir, r))
    expect("payload_files", m.payload_files, payloadSpan, "(highest index + 1) payload files were");
  if (payloadSpan != payloadFiles.size())
    r.add(true, "files", dir, std::nullopt,
          "payload files are not contiguous: " + std::to_string(payloadFiles.size()) + " files, highest index " +
              std::to_string(payloadSpan - 1));
}

void verifyRank(const std::string& dir, RankReport& r, bool json) {
  r.dir = dir;
  r.rank = rankFromDirectoryName(dir);
  std::unique_ptr<TraceReader> reader;
  const Status opened = TraceReader::open(dir, Limits{}, &reader);
  if (!reader) {
    // The reader's message is "<manifest>: key 'K': why" (one key), "<manifest>: offset 0: why" (the whole map) or
    // "<manifest>: why" (unreadable): the finding names the key or the offset, as the spec asks, without the path
    // twice.
    const std::string path = dir + "/manifest.msgpack";
    std::string reason = opened.message();
    if (reason.rfind(path + ": ", 0) == 0) reason.erase(0, path.size() + 2);
    const size_t keyEnd = reason.find("': ");
    if (reason.rfind("key '", 0) == 0 && keyEnd != std::string::npos)
      r.addAtKey(true, "manifest", path, reason.substr(5, keyEnd - 5), reason.substr(keyEnd + 3));
    else if (reason.rfind("offset 0: ", 0) == 0)
      r.add(true, "manifest", path, 0, reason.substr(10));
    else
      r.add(true, "manifest", path, std::nullopt, reason);
    return;
  }
  r.opened = true;
  const Manifest& m = reader->manifest();
  checkManifest(m, dir, r);
  // The directory's version, not the manifest's, says which reader reads every field (docs/trace-format.md).
  if (const int minor = reader->directoryVersionMinor(); minor > kFormatMinor)
    r.add(false, "version", dir, std::nullopt,
          "holds files of format 1." + std::to_string(minor) + " (the manifest says 1." +
              std::to_string(m.version_minor) + "), newer than this reader's 1." + std::to_string(kFormatMinor) +
              ": it skips the fields and records it does not know; a newer ranklens reads them");
  r.segments = reader->segmentCount();
  const Scan scan = scanSegments(*reader, dir, r, json);
  const bool segmentDamage = reportSegmentDamage(*reader, r);
  checkIndex(r, segmentFileSizes(dir, r.segments), scan.calls, scan.effective, segmentDamage);
  const std::set<uint32_t> payloadFiles = payloadFileIndices(dir);
  r.payloadFiles = static_cast<uint32_t>(payloadFiles.size());
  const std::set<uint32_t> referenced = checkPayloads(*reader, dir, scan, r, json);
  checkOrphans(dir, scan, payloadFiles, referenced, segmentDamage, r);
  if (m.closed && !segmentDamage) checkCounters(m, dir, scan, payloadFiles, r);
}

std::string plural(uint64_t n, const std::string& word) { return std::to_string(n) + " " + word + (n == 1 ? "" : "s"); }

// Rank directories to check: those rankDirectories finds, and rank<R>/ directories it skips for lack of a
// manifest (a rank that crashed before writing one, or lost it).
Status candidates(const std::string& trace, std::optional<int> onlyRank, std::vector<std::string>* out) {
  std::error_code ec;
  if (!fs::is_directory(trace, ec))
    return Status::systemError(trace + (fs::exists(trace, ec) ? ": not a directory" : ": no such file or directory"));
  if (fs::exists(fs::path(trace) / "manifest.msgpack", ec)) {
    *out = {trace};
    return Status::ok();
  }
  bool segmentsHere = false;
  for (const auto& entry : fs::directory_iterator(trace, ec)) {
    uint32_t index;
    if (isNumberedName(entry.path().filename().string(), "seg-", ".rls", &index)) segmentsHere = true;
  }
  if (segmentsHere) {  // a rank directory that lost its manifest
    *out = {trace};
    return Status::ok();
  }
  for (const auto& dir : rankDirectories(trace)) {
    const int rank = rankFromDirectoryName(dir);
    if (onlyRank && rank >= 0 && rank != *onlyRank) continue;  // others (ranklens-pid<P>) are checked after opening
    out->push_back(dir);
  }
  // rank<R>/ without a manifest is among them, in rank order (rankDirectories): opening it reports it.
  if (out->empty())
    return Status::invalidUsage(trace +
                                ": no RankLens trace here (expected manifest.msgpack, or rank directories "
                                "below it)");
  return Status::ok();
}

// Every rank's report, in rank order: the directories verified, then rank<R> entries no reader can use (a file, a
// symlink loop, unreadable, padded, two for one rank), each a problem of its rank, never left out of the count.
Status verifyRanks(const VerifyOptions& o, std::vector<RankReport>* reports) {
  std::vector<std::string> dirs;
  RL_CHECK(candidates(o.trace, o.rank, &dirs));
  for (const auto& dir : dirs) {
    RankReport report;
    verifyRank(dir, report, o.json);
    if (o.rank && report.rank != *o.rank && dirs.size() > 1) continue;  // --rank: a directory not named rank<R>
    reports->push_back(std::move(report));
  }
  for (const auto& t : ranklens::trace::rankDirectoryTrouble(o.trace)) {
    if (o.rank && t.rank != *o.rank) continue;
    if (!t.duplicate && std::find(dirs.begin(), dirs.end(), t.path) != dirs.end()) continue;  // verified above
    RankReport report;
    report.rank = t.rank;
    report.dir = t.path;
    report.add(true, "files", t.path, std::nullopt, t.reason.substr(t.reason.find(": ") + 2));
    reports->push_back(std::move(report));
  }
  std::stable_sort(reports->begin(), reports->end(), [](const RankReport& a, const RankReport& b) {
    return (a.rank < 0 ? INT32_MAX : a.rank) < (b.rank < 0 ? INT32_MAX : b.rank);
  });
  if (reports->empty())
    return Status::invalidUsage(o.trace + ": no rank " + std::to_string(*o.rank) + " in this trace");
  return Status::ok();
}

nlohmann::json rankJson(const RankReport& r) {
  nlohmann::json jp = nlohmann::json::array(), jw = nlohmann::json::array();
  for (const auto& f : r.findings) {
    nlohmann::json j = {{"check", f.check}, {"file", f.file}, {"reason", f.reason}};
    if (!f.key.empty())
      j["key"] = f.key;  // instead of an offset: the manifest or index key it is about
    else
      j["offset"] = f.offset ? nlohmann::json(*f.offset) : nlohmann::json(nullptr);
    if (f.problem) j["truncated"] = f.truncated;
    (f.problem ? jp : jw).push_back(j);
  }
  return {{"rank", r.rank},
          {"dir", r.dir},
          {"ok", r.count(true) == 0},
          {"closed", r.closed},
          {"segments", r.segments},
          {"records", r.records},
          {"calls", r.calls},
          {"payload_refs", r.payloadRefs},
          {"edits", r.edits},
          {"payloads_checked", r.payloadsChecked},
          {"payload_files", r.payloadFiles},
          {"index", r.index},
          {"problems", jp},
          {"warnings", jw}};
}

void printRankText(const RankReport& r) {
  std::cout << "rank " << r.rank << ": " << r.dir << ": " << (r.count(true) ? "PROBLEMS" : "ok");
  if (r.opened)
    std::cout << " (" << (r.closed ? "closed" : "NOT closed") << "; " << plural(r.segments, "segment") << ", "
              << plural(r.records, "record") << ", " << plural(r.calls, "call") << ", "
              << plural(r.payloadRefs, "payload reference") << " (" << plural(r.edits, "edit") << "), "
              << plural(r.payloadsChecked, "payload") << " decoded and CRC-checked; index " << r.index << ")";
  std::cout << "\n";
  for (const auto& f : r.findings) {
    std::cout << "  " << (f.problem ? "problem" : "warning") << ": " << f.file;
    if (f.offset) std::cout << ": offset " << *f.offset;
    if (!f.key.empty()) std::cout << ": key '" << f.key << "'";
    std::cout << ": " << f.reason << "\n";
  }
}

}  // namespace

int runVerify(const VerifyOptions& o) {
  std::vector<RankReport> reports;
  if (Status verified = verifyRanks(o, &reports); !verified.isOk()) return reportFailure(verified);
  size_t problems = 0, warnings = 0;
  for (const auto& r : reports) {
    problems += r.count(true);
    warnings += r.count(false);
  }
  if (o.json) {
    nlohmann::json ranks = nlohmann::json::array();
    for (const auto& r : reports) ranks.push_back(rankJson(r));
    nlohmann::json doc = {{"format_version", kJsonFormatVersion},
                          {"trace", o.trace},
                          {"ok", problems == 0},
                          {"problems", problems},
                          {"warnings", warnings},
                          {"ranks", ranks}};
    std::cout << doc.dump(2) << "\n";
  } else {
    for (const auto& r : reports) printRankText(r);
    std::cout << "verify: " << plural(reports.size(), "rank") << ", " << plural(problems, "problem") << ", "
              << plural(warnings, "warning") << "\n";
  }
  return problems ? kExitFailure : kExitOk;
}

}  // namespace rlpayload

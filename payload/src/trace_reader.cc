// SPDX-License-Identifier: Apache-2.0
// TraceReader: manifest, segment list, index (validated against the segments or rebuilt), streaming scan,
// random access by call, bounded payload reads. Damage becomes a Problem; nothing here trusts a length.
#include <dirent.h>
#include <fcntl.h>
#include <sanitizer/asan_interface.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <tuple>

#include "ranklens/trace.h"
#include "trace_io.h"

namespace ranklens {
namespace trace {
namespace {
// Largest segment file read (see the scan).
constexpr uint64_t kMaxSegmentFileBytes = 4ull << 30;

using events::Op;

// (commId, kind, peer, seq): kind 0 collective (peer -1), 1 Send, 2 Recv.
using CallKey = std::tuple<uint64_t, int, int, uint64_t>;
CallKey keyOf(uint64_t commId, int op, int peer, uint64_t seq) {
  const int kind = op == static_cast<int>(Op::kSend) ? 1 : op == static_cast<int>(Op::kRecv) ? 2 : 0;
  return {commId, kind, kind ? peer : -1, seq};
}

struct SegmentFile {
  std::string name;
  uint64_t size = 0;
};

// How many fields docs/trace-format.md lists for a known record type (later ones are a newer writer's: not checked).
size_t listedFields(RecordType type) {
  switch (type) {
    case RecordType::kCommInit:
      return 12;
    case RecordType::kCommEnd:
      return 3;
    case RecordType::kCall:
      return 14;
    case RecordType::kGroupEnd:
      return 5;
    case RecordType::kStage:
      return 3;
    case RecordType::kGroupBegin:
      return 2;
    case RecordType::kTiming:
      return 12;
    case RecordType::kPayloadRef:
      return 13;
    case RecordType::kEdit:
      return 9;
    case RecordType::kCommBinding:
      return 4;
    case RecordType::kFlightRecorderEntry:
      return 22;
  }
  return 0;
}

// A msgpack str that is valid UTF-8, recursively through arrays; no bin (no known field is bytes).
Status textFieldOk(const msgpack::object& o) {
  if (o.type == msgpack::type::BIN) return Status::corrupt("msgpack bin where a str is expected");
  if (o.type == msgpack::type::STR && !validUtf8(o.via.str.ptr, o.via.str.size))
    return Status::corrupt("str that is not valid UTF-8");
  if (o.type == msgpack::type::ARRAY)
    for (uint32_t i = 0; i < o.via.array.size; ++i) RL_CHECK(textFieldOk(o.via.array.ptr[i]));
  return Status::ok();
}

// The 16-byte header every segment and payload file opens with (docs/trace-format.md), read from an open file.
struct FileHeader {
  uint32_t magic = 0, index = 0;
  uint16_t major = 0, minor = 0;
};
bool readFileHeader(int fd, FileHeader* h) {
  uint8_t bytes[kFileHeaderBytes];
  if (pread(fd, bytes, sizeof(bytes), 0) != sizeof(bytes)) return false;
  memcpy(&h->magic, bytes, 4);
  memcpy(&h->major, bytes + 4, 2);
  memcpy(&h->minor, bytes + 6, 2);
  memcpy(&h->index, bytes + 8, 4);
  return true;
}

const char* msgpackTypeName(msgpack::type::object_type type) {
  switch (type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "bool";
    case msgpack::type::POSITIVE_INTEGER:
      return "positive int";
    case msgpack::type::NEGATIVE_INTEGER:
      return "negative int";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "float";
    case msgpack::type::STR:
      return "str";
    case msgpack::type::BIN:
      return "bin";
    case msgpack::type::ARRAY:
      return "array";
    case msgpack::type::MAP:
      return "map";
    default:
      return "ext";
  }
}

// Converts a record's body and throws if a field has the wrong type or is out of its width; the message names the
// field, which msgpack's own exception ("std::bad_cast") does not.
template <typename Record>
void convertCheck(const msgpack::object& body) {
  Record record;
  try {
    body.convert(record);
  } catch (const std::exception& e) {
    if (body.type != msgpack::type::ARRAY) throw;
    // The first field that fails: the shortest prefix of the array that does not convert ends with it (an array
    // shorter than the record's list converts, the fields after it left at their defaults).
    msgpack::object prefix = body;
    for (uint32_t k = 1; k <= body.via.array.size; ++k) {
      prefix.via.array.size = k;
      Record probe;
      try {
        prefix.convert(probe);
      } catch (const std::exception&) {
        const msgpack::object& field = body.via.array.ptr[k - 1];
        throw std::runtime_error("field " + std::to_string(k - 1) + " (counted from 0), a msgpack " +
                                 msgpackTypeName(field.type) +
                                 ", is not of the type the spec's record table gives it, or out of its range");
      }
    }
    throw;
  }
}

}  // namespace

Status recordWellFormed(RecordType type, const msgpack::object& body) {
  try {
    switch (type) {
      case RecordType::kCommInit:
        convertCheck<events::CommInit>(body);
        break;
      case RecordType::kCommEnd:
        convertCheck<events::CommEnd>(body);
        break;
      case RecordType::kCall:
        convertCheck<events::Call>(body);
        break;
      case RecordType::kGroupEnd:
        convertCheck<events::GroupEnd>(body);
        break;
      case RecordType::kStage:
        convertCheck<events::Stage>(body);
        break;
      case RecordType::kGroupBegin:
        convertCheck<GroupBegin>(body);
        break;
      case RecordType::kTiming:
        convertCheck<Timing>(body);
        break;
      case RecordType::kPayloadRef:
        convertCheck<PayloadRef>(body);
        break;
      case RecordType::kEdit:
        convertCheck<Edit>(body);
        break;
      case RecordType::kCommBinding:
        convertCheck<CommBinding>(body);
        break;
      case RecordType::kFlightRecorderEntry:
        convertCheck<FlightRecorderEntry>(body);
        break;
      default:
        return Status::ok();  // a type this reader does not know: skipped, not checked
    }
  } catch (const std::exception& e) {
    return Status::corrupt(e.what());
  }
  if (body.type != msgpack::type::ARRAY) return Status::ok();  // parseSegment refuses such a body before
  const size_t fields = std::min<size_t>(body.via.array.size, listedFields(type));
  for (size_t i = 0; i < fields; ++i) {
    const Status text = textFieldOk(body.via.array.ptr[i]);
    if (!text.isOk()) return Status::corrupt("field " + std::to_string(i) + " is a " + text.message());
  }
  return Status::ok();
}

struct TraceReader::Impl {
  std::string dir;
  Limits limits;
  Manifest manifest;
  std::vector<SegmentFile> segments;
  std::vector<Problem> openProblems, scanProblems, allProblems;
  // Damage found while checking index entries (intactEnd) before any scan; a scan reports it itself.
  std::vector<Problem> checkProblems;
  bool scanned = false;
  // Per segment: the offset of its first truncated or corrupt frame (its size when none), or -1 not yet known.
  // Index entries at or past it are not part of the trace.
  std::vector<int64_t> intactEnds;
  bool rebuilt = false;
  std::map<CallKey, Location> calls;
  std::map<CallKey, Location> payloadRefs;  // the effective (last) reference

  std::string segPath(uint32_t index) const { return dir + "/" + segments[index].name; }

  void refreshProblems() {
    allProblems = openProblems;
    const auto& found = scanned ? scanProblems : checkProblems;
    allProblems.insert(allProblems.end(), found.begin(), found.end());
  }

  // A writer rolls segments over at tens of MiB (WriterOptions::segmentBytes, plus one record): a segment of
  // gigabytes is damaged or sparse, and reading it whole would exhaust memory before saying which file it is.
  Status readSegment(uint32_t index, std::vector<uint8_t>* data) {
    return readFile(segPath(index), kMaxSegmentFileBytes, data);
  }
  // A failed readSegment as a Problem of that segment: its reason without the path the Problem already names.
  Problem unreadable(uint32_t index, const Status& read) {
    std::string reason = read.message();
    const std::string path = segPath(index) + ": ";
    if (reason.rfind(path, 0) == 0) reason.erase(0, path.size());
    return {segPath(index), 0, reason, false};
  }

  // Where segment `index` stops being readable (docs/trace-format.md: readers stop reading a segment at its first
  // damaged frame, whichever way they read it): walked once per segment, its damage reported as a scan would.
  uint64_t intactEnd(uint32_t index) {
    if (intactEnds[index] >= 0) return static_cast<uint64_t>(intactEnds[index]);
    std::vector<uint8_t> data;
    uint64_t end = 0;
    if (Status read = readSegment(index, &data); !read.isOk()) {
      checkProblems.push_back(unreadable(index, read));
    } else {
      Problem problem;
      auto visit = [&](RecordType type, const msgpack::object& body, const Location& where) {
        if (Status formed = recordWellFormed(type, body); !formed.isOk())
          checkProblems.push_back({segPath(index), where.offset,
                                   std::string(recordTypeName(type)) + " record is malformed: " + formed.message(),
                                   false, true});
        return true;
      };
      if (parseSegment(data.data(), data.size(), index, segPath(index), limits, visit, &problem)) {
        end = data.size();
      } else {
        checkProblems.push_back(problem);
        end = problem.offset;
      }
    }
    intactEnds[index] = static_cast<int64_t>(end);
    refreshProblems();
    return end;
  }

  Status listSegments() {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return Status::systemError(dir + ": cannot list: " + strerror(errno));
    std::map<uint32_t, std::string> found;
    size_t entries = 0;
    while (dirent* e = readdir(d)) {
      if (++entries > limits.maxFiles) break;
      uint32_t index = 0;
      if (parseIndexedName(e->d_name, "seg-", ".rls", &index)) found[index] = e->d_name;
    }
    closedir(d);
    uint32_t expected = 0;
    for (const auto& [index, name] : found) {
      if (index != expected) {
        openProblems.push_back({dir + "/" + segmentName(expected), 0,
                                "segment missing (next present: " + name + "); later segments are not read", false});
        break;
      }
      struct stat st;
      // An unreadable entry (dangling link, directory) keeps its place with size 0: reading it reports the problem
      // and the segments after it are still read.
      const bool statOk = stat((dir + "/" + name).c_str(), &st) == 0 && S_ISREG(st.st_mode);
      segments.push_back({name, statOk ? static_cast<uint64_t>(st.st_size) : 0});
      ++expected;
    }
    if (segments.empty()) openProblems.push_back({dir + "/" + segmentName(0), 0, "no segment file", false});
    intactEnds.assign(segments.size(), -1);  // not known yet: found by intactEnd or a scan
    return Status::ok();
  }

  bool loadIndex() {
    std::vector<uint8_t> data;
    uint64_t segmentBytes = 0;
    for (const SegmentFile& seg : segments) segmentBytes += seg.size;
    if (!readFile(dir + "/index.msgpack", indexByteLimit(segmentBytes), &data).isOk()) return false;
    try {
      size_t used = 0;
      const auto n = static_cast<uint32_t>(std::min<size_t>(data.size(), 0xffffffffu));
      auto handle = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size(), used, nullptr, nullptr,
                                    msgpack::unpack_limit(n, n, n, n, n, 4));
      std::map<std::string, msgpack::object> index;
      handle.get().convert(index);
      if (index.at("version_major").as<int>() != kFormatMajor) return false;
      // The listed segments must be exactly the files read, same names and sizes, in any order.
      auto listed = index.at("segments").as<std::vector<std::tuple<std::string, uint64_t>>>();
      std::vector<std::tuple<std::string, uint64_t>> actual;
      for (const auto& seg : segments) actual.emplace_back(seg.name, seg.size);
      std::sort(listed.begin(), listed.end());
      std::sort(actual.begin(), actual.end());
      if (listed != actual) return false;
      std::map<CallKey, Location> c, p;
      auto load = [&](const msgpack::object& entries, std::map<CallKey, Location>* out) {
        if (entries.type != msgpack::type::ARRAY) return false;
        for (uint32_t i = 0; i < entries.via.array.size; ++i) {
          const msgpack::object& e = entries.via.array.ptr[i];
          if (e.type != msgpack::type::ARRAY || e.via.array.size < 6) return false;  // [comm, seq, op, peer, seg, off]
          const msgpack::object* f = e.via.array.ptr;
          const auto comm = f[0].as<uint64_t>(), seq = f[1].as<uint64_t>(), off = f[5].as<uint64_t>();
          const auto op = f[2].as<int32_t>(), peer = f[3].as<int32_t>();
          const auto seg = f[4].as<uint32_t>();
          if (seg >= segments.size() || off >= segments[seg].size) return false;
          (*out)[keyOf(comm, op, peer, seq)] = {seg, off};
        }
        return true;
      };
      if (!load(index.at("calls"), &c) || !load(index.at("payloads"), &p)) return false;
      calls.swap(c);
      payloadRefs.swap(p);
      return true;
    } catch (const std::exception&) {
      return false;  // a damaged index is only a cache: rebuild
    }
  }

  bool scan(const RecordVisitor& visit, bool indexing) {
    scanProblems.clear();
    scanned = true;
    if (indexing) {
      calls.clear();
      payloadRefs.clear();
    }
    bool stopped = false;
    uint64_t seen = 0;  // intact records, for the closed manifest's count
    uint64_t lastSegmentBytes = 0;
    for (uint32_t i = 0; i < segments.size() && !stopped; ++i) {
      std::vector<uint8_t> data;
      if (Status read = readSegment(i, &data); !read.isOk()) {
        scanProblems.push_back(unreadable(i, read));
        intactEnds[i] = 0;
        continue;
      }
      lastSegmentBytes = data.size();
      Problem problem;
      auto wrapped = [&](RecordType type, const msgpack::object& body, const Location& where) {
        ++seen;
        // Every field of every known record is checked on every scan (docs/trace-format.md: a malformed record is
        // reported and skipped), so that every command sees the same records: visitors never get a malformed one.
        if (Status formed = recordWellFormed(type, body); !formed.isOk()) {
          scanProblems.push_back({segPath(i), where.offset,
                                  std::string(recordTypeName(type)) + " record is malformed: " + formed.message(),
                                  false, true});
          return true;
        }
        if (indexing && type == RecordType::kCall) {
          auto call = body.as<events::Call>();
          calls[keyOf(call.commId, call.op, call.rootOrPeer, call.seq)] = where;
        } else if (indexing && type == RecordType::kPayloadRef) {
          auto ref = body.as<PayloadRef>();
          payloadRefs[keyOf(ref.commId, ref.op, ref.peer, ref.seq)] = where;
        }
        if (visit && !visit(type, body, where)) {
          stopped = true;
          return false;
        }
        return true;
      };
      const bool whole = parseSegment(data.data(), data.size(), i, segPath(i), limits, wrapped, &problem);
      if (!whole) scanProblems.push_back(problem);
      // Where the segment stops being readable, as intactEnd would find it (unless a visitor stopped the scan):
      // lookups after a scan do not parse the segment again.
      if (!stopped) intactEnds[i] = static_cast<int64_t>(whole ? data.size() : problem.offset);
    }
    // A segment cut exactly between two frames parses clean: only the closed manifest's count shows the loss. Said
    // here, where every reader's scan and index rebuild passes, so that no command reads such a trace as whole.
    // (More records than counted is not damage: an edit appends records after the manifest was closed.)
    if (!stopped && scanProblems.empty() && openProblems.empty() && manifest.closed && !segments.empty() &&
        seen < manifest.records_written)
      scanProblems.push_back({segPath(static_cast<uint32_t>(segments.size() - 1)), lastSegmentBytes,
                              "the segments end between two records after " + std::to_string(seen) +
                                  " records, but the closed manifest counts " +
                                  std::to_string(manifest.records_written) +
                                  ": the trace was cut (a copy or disk that stopped short); the records after this "
                                  "point are lost, those before it are read",
                              false});
    refreshProblems();
    return scanProblems.empty();
  }

  // Reads and parses the single frame at `where`.
  bool readFrame(const Location& where, RecordType* type, msgpack::object_handle* out) {
    if (where.segment >= segments.size()) return false;
    // A frame at or after its segment's first damaged frame is not part of the trace, however intact it is.
    if (where.offset >= intactEnd(where.segment)) return false;
    int fd = ::open(segPath(where.segment).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
    if (fd < 0) return false;
    // The segment's own header must pass its checks, as in a scan: a frame in a segment that fails them is not intact.
    FileHeader fileHeader;
    bool ok = readFileHeader(fd, &fileHeader) && fileHeader.magic == kSegmentMagic &&
              fileHeader.major == kFormatMajor && fileHeader.index == where.segment && where.offset >= kFileHeaderBytes;
    uint8_t header[kFrameHeaderBytes];
    ok = ok && pread(fd, header, sizeof(header), static_cast<off_t>(where.offset)) == sizeof(header);
    uint32_t length = 0, crc = 0;
    if (ok) {
      memcpy(&length, header, 4);
      memcpy(&crc, header + 4, 4);
      ok = length > 0 && length <= limits.maxRecordBytes &&
           where.offset + kFrameHeaderBytes + length <= segments[where.segment].size;
    }
    std::vector<uint8_t> body(ok ? length : 0);
    ok = ok && pread(fd, body.data(), length, static_cast<off_t>(where.offset + kFrameHeaderBytes)) ==
                   static_cast<ssize_t>(length);
    ::close(fd);
    if (!ok || crc32Bytes(body.data(), body.size()) != crc) return false;
    try {
      size_t used = 0;
      const auto n = static_cast<uint32_t>(body.size());
      *out = msgpack::unpack(reinterpret_cast<const char*>(body.data()), body.size(), used, nullptr, nullptr,
                             msgpack::unpack_limit(n, n, n, n, n, 8));
      const msgpack::object& obj = out->get();
      if (used != body.size()) return false;  // trailing bytes: corrupt, as in a scan
      if (obj.type != msgpack::type::ARRAY || obj.via.array.size != 2 ||
          obj.via.array.ptr[1].type != msgpack::type::ARRAY)
        return false;
      *type = static_cast<RecordType>(obj.via.array.ptr[0].as<int>());
      return true;
    } catch (const std::exception&) {
      return false;
    }
  }

  // The index is a cache: an entry that does not lead to the intact record it names (a stale or edited index)
  // triggers one rebuild by scanning, and the lookup is answered from the rebuilt index.
  bool rebuildOnce() {
    if (rebuilt) return false;
    rebuilt = true;
    scan(nullptr, true);
    return true;
  }

  template <typename Record>
  std::optional<Record> recordAt(const Location& where, RecordType expected) {
    RecordType type;
    msgpack::object_handle handle;
    if (!readFrame(where, &type, &handle) || type != expected) return std::nullopt;
    if (!recordWellFormed(type, handle.get().via.array.ptr[1]).isOk()) return std::nullopt;
    try {
      return handle.get().via.array.ptr[1].as<Record>();
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
};

TraceReader::TraceReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TraceReader::~TraceReader() = default;

Status TraceReader::open(const std::string& rankDir, const Limits& limits, std::unique_ptr<TraceReader>* reader) {
  reader->reset();
  auto impl = std::make_unique<Impl>();
  impl->dir = rankDir;
  impl->limits = limits;
  std::vector<uint8_t> data;
  const std::string manifestPath = rankDir + "/manifest.msgpack";
  if (Status read = readFile(manifestPath, 16u << 20, &data); !read.isOk())
    return Status::error(read.code(),
                         read.message() + " (is this a RankLens rank directory? expected " + manifestPath + ")");
  if (Status parsed = parseManifest(data.data(), data.size(), &impl->manifest); !parsed.isOk()) {
    // A problem of one key names the key (docs/trace-format.md); one of the whole map is at its start.
    static const std::string keyed = "manifest key ";
    const std::string& reason = parsed.message();
    return Status::corrupt(manifestPath + (reason.rfind(keyed, 0) == 0 ? ": key " + reason.substr(keyed.size())
                                                                       : ": offset 0: " + reason));
  }
  RL_CHECK(impl->listSegments());
  if (!impl->loadIndex()) {
    impl->rebuilt = true;
    impl->scan(nullptr, true);
  }
  impl->refreshProblems();
  reader->reset(new TraceReader(std::move(impl)));
  return Status::ok();
}

const Manifest& TraceReader::manifest() const { return impl_->manifest; }
const std::string& TraceReader::directory() const { return impl_->dir; }
const std::vector<Problem>& TraceReader::problems() const { return impl_->allProblems; }
bool TraceReader::indexRebuilt() const { return impl_->rebuilt; }

int TraceReader::directoryVersionMinor() const {
  int minor = impl_->manifest.version_minor;
  DIR* d = opendir(impl_->dir.c_str());
  if (d == nullptr) return minor;
  size_t entries = 0;
  while (dirent* e = readdir(d)) {
    if (++entries > impl_->limits.maxFiles) break;
    uint32_t index = 0;
    const bool segment = parseIndexedName(e->d_name, "seg-", ".rls", &index);
    if (!segment && !parseIndexedName(e->d_name, "pay-", ".rlp", &index)) continue;
    // A header that is not a version 1 one of its kind says nothing of the version (readers report it as damage).
    const int fd = ::open((impl_->dir + "/" + e->d_name).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    FileHeader header;
    struct stat st;
    const bool read = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && readFileHeader(fd, &header);
    ::close(fd);
    if (read && header.magic == (segment ? kSegmentMagic : kPayloadMagic) && header.major == kFormatMajor)
      minor = std::max(minor, static_cast<int>(header.minor));
  }
  closedir(d);
  return minor;
}
uint32_t TraceReader::segmentCount() const { return static_cast<uint32_t>(impl_->segments.size()); }
bool TraceReader::scan(const RecordVisitor& visit) { return impl_->scan(visit, false); }

std::optional<events::Call> TraceReader::call(uint64_t commId, int op, int peer, uint64_t seq) {
  const CallKey key = keyOf(commId, op, peer, seq);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = impl_->calls.find(key);
    if (it == impl_->calls.end()) {
      // The index carries no checksum: before answering "absent", make sure by scanning once.
      if (!impl_->rebuildOnce()) return std::nullopt;
      continue;
    }
    auto record = impl_->recordAt<events::Call>(it->second, RecordType::kCall);
    if (record && keyOf(record->commId, record->op, record->rootOrPeer, record->seq) == key) return record;
    if (!impl_->rebuildOnce()) return std::nullopt;
  }
  return std::nullopt;
}

std::optional<PayloadRef> TraceReader::payload(uint64_t commId, int op, int peer, uint64_t seq) const {
  const CallKey key = keyOf(commId, op, peer, seq);
  for (int attempt = 0; attempt < 2; ++attempt) {
    auto it = impl_->payloadRefs.find(key);
    if (it == impl_->payloadRefs.end()) {
      if (!impl_->rebuildOnce()) return std::nullopt;  // as in call(): an absence is confirmed by a scan
      continue;
    }
    auto ref = impl_->recordAt<PayloadRef>(it->second, RecordType::kPayloadRef);
    if (ref && keyOf(ref->commId, ref->op, ref->peer, ref->seq) == key) return ref;
    if (!impl_->rebuildOnce()) return std::nullopt;
  }
  return std::nullopt;
}

std::vector<PayloadRef> TraceReader::payloads() const {
  // Every record is checked once before any is listed, so that a command that lists payloads reports the same
  // problems as one that reads every record (a malformed Stage, a trace cut between two frames), not only the
  // damage its payload references happen to cross.
  if (!impl_->scanned) impl_->scan(nullptr, false);
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::vector<PayloadRef> out;
    bool consistent = true;
    for (const auto& [key, where] : impl_->payloadRefs) {
      auto ref = impl_->recordAt<PayloadRef>(where, RecordType::kPayloadRef);
      if (!ref || keyOf(ref->commId, ref->op, ref->peer, ref->seq) != key) {
        consistent = false;
        break;
      }
      out.push_back(*ref);
    }
    if (consistent || !impl_->rebuildOnce()) return out;
  }
  return {};
}

bool TraceReader::readPayload(const PayloadRef& ref, std::vector<uint8_t>* out, Problem* problem) {
  return readBlob(ref, problem,
                  [&](const uint8_t* blob, size_t size) { return decodePayload(blob, size, ref, impl_->limits, out); });
}

bool TraceReader::readPayload(const PayloadRef& ref, uint8_t* out, size_t outBytes, Problem* problem) {
  if (ref.compressedBytes <= kStreamingBlobBytes)
    return readBlob(ref, problem, [&](const uint8_t* blob, size_t size) {
      return decodePayloadInto(blob, size, ref, impl_->limits, out, outBytes);
    });
  std::string path;
  const int fd = openBlob(ref, &path, problem);
  if (fd < 0) return false;
  const Status decoded = decodePayloadStreaming(
      [&](uint64_t at, uint8_t* into, size_t bytes) {
        return pread(fd, into, bytes, static_cast<off_t>(ref.offset + at)) == static_cast<ssize_t>(bytes);
      },
      ref.compressedBytes, ref, impl_->limits, out, outBytes, kStreamingPieceBytes);
  ::close(fd);
  if (!decoded.isOk() && problem) *problem = Problem{path, ref.offset, decoded.message(), false};
  return decoded.isOk();
}

int TraceReader::openBlob(const PayloadRef& ref, std::string* openedPath, Problem* problem) {
  const std::string path = impl_->dir + "/" + payloadName(ref.file);
  *openedPath = path;
  auto fail = [&](std::string reason, bool truncated = false) {
    if (problem) *problem = Problem{path, ref.offset, std::move(reason), truncated};
    return -1;
  };
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // a FIFO must not block
  if (fd < 0) return fail(std::string("cannot open: ") + strerror(errno));
  struct stat st;
  FileHeader header;
  const bool headerOk = fstat(fd, &st) == 0 && readFileHeader(fd, &header);
  const uint32_t magic = header.magic, index = header.index;
  const uint16_t major = header.major;
  const uint64_t fileSize = headerOk ? static_cast<uint64_t>(st.st_size) : 0;
  std::string reason;
  if (!headerOk || magic != kPayloadMagic)
    reason = "not a RankLens payload file (bad header)";
  else if (major != kFormatMajor) {
    reason = "unsupported format version " + std::to_string(major) + "." + std::to_string(header.minor) +
             " (this reader: " + std::to_string(kFormatMajor) + ".x)";
  } else if (index != ref.file)
    reason = "payload header says index " + std::to_string(index);
  else if (ref.offset < kFileHeaderBytes || ref.offset > fileSize || ref.compressedBytes > fileSize - ref.offset)
    reason = "blob of " + std::to_string(ref.compressedBytes) + " bytes at offset " + std::to_string(ref.offset) +
             " lies outside the file (" + std::to_string(fileSize) + " bytes)";
  else if (ref.compressedBytes > impl_->limits.maxPayloadBytes + (1u << 20))
    reason = "compressed blob larger than the payload limit";
  if (!reason.empty()) {
    ::close(fd);
    const bool outOfBounds = headerOk && magic == kPayloadMagic && major == kFormatMajor && index == ref.file;
    return fail(reason, outOfBounds && ref.offset >= kFileHeaderBytes && ref.offset <= fileSize &&
                            ref.compressedBytes > fileSize - ref.offset);
  }
  return fd;
}

bool TraceReader::readBlob(const PayloadRef& ref, Problem* problem, const BlobDecoder& decode) {
  std::string path;
  const int fd = openBlob(ref, &path, problem);
  if (fd < 0) return false;
  auto fail = [&](std::string text) {
    if (problem) *problem = Problem{path, ref.offset, std::move(text), false};
    return false;
  };
  // A buffer per thread, kept between payloads (a fresh one costs a page fault per 4 KiB at every read) unless large.
  static thread_local std::vector<uint8_t> blob;
  try {
    if (blob.size() < ref.compressedBytes) blob.resize(ref.compressedBytes);
  } catch (const std::bad_alloc&) {
    ::close(fd);
    return fail("cannot allocate " + std::to_string(ref.compressedBytes) + " bytes to read the blob");
  }
  const bool readOk = pread(fd, blob.data(), ref.compressedBytes, static_cast<off_t>(ref.offset)) ==
                      static_cast<ssize_t>(ref.compressedBytes);
  ::close(fd);
  // The buffer may be larger than this blob: poisoned past its end, a decoder that reads past the blob still fails
  // under AddressSanitizer (no-ops in other builds).
  ASAN_POISON_MEMORY_REGION(blob.data() + ref.compressedBytes, blob.size() - ref.compressedBytes);
  const Status decoded = readOk ? decode(blob.data(), ref.compressedBytes) : Status::ok();
  ASAN_UNPOISON_MEMORY_REGION(blob.data() + ref.compressedBytes, blob.size() - ref.compressedBytes);
  if (blob.size() > (64u << 20)) std::vector<uint8_t>().swap(blob);
  if (!readOk) return fail("short read");
  if (!decoded.isOk()) return fail(decoded.message());
  return true;
}

Status rebuildIndex(const std::string& rankDir, const Limits& limits) {
  // Scan directly (the existing index, if any, is not trusted).
  auto impl = std::make_unique<TraceReader::Impl>();
  impl->dir = rankDir;
  impl->limits = limits;
  RL_CHECK(impl->listSegments());
  impl->scan(nullptr, true);
  if (!impl->allProblems.empty()) {
    // An index of a damaged trace would let readers skip the scan that reports the damage: leave none instead.
    if (unlink((rankDir + "/index.msgpack").c_str()) != 0 && errno != ENOENT)
      return Status::systemError(rankDir + "/index.msgpack: cannot remove: " + strerror(errno));
    return Status::ok();
  }
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(5);
  pk.pack(std::string("version_major"));
  pk.pack(kFormatMajor);
  pk.pack(std::string("version_minor"));
  pk.pack(kFormatMinor);
  pk.pack(std::string("segments"));
  pk.pack_array(static_cast<uint32_t>(impl->segments.size()));
  for (const auto& s : impl->segments) pk.pack(std::make_tuple(s.name, s.size));
  auto packEntries = [&](const std::map<CallKey, Location>& entries) {
    pk.pack_array(static_cast<uint32_t>(entries.size()));
    for (const auto& [key, where] : entries) {
      const auto& [comm, kind, peer, seq] = key;
      // Store the op as the record has it for P2P; collectives are found by (comm, seq) whatever their op.
      const int op = kind == 1 ? static_cast<int>(Op::kSend) : kind == 2 ? static_cast<int>(Op::kRecv) : -1;
      pk.pack(std::make_tuple(comm, seq, op, peer, where.segment, where.offset));
    }
  };
  pk.pack(std::string("calls"));
  packEntries(impl->calls);
  pk.pack(std::string("payloads"));
  packEntries(impl->payloadRefs);
  return writeFileAtomically(rankDir + "/index.msgpack", buffer.data(), buffer.size());
}

bool holdsTrace(const std::string& dir) { return access((dir + "/manifest.msgpack").c_str(), F_OK) == 0; }

std::vector<std::string> rankDirectories(const std::string& traceDir) {
  std::vector<std::string> out;
  if (holdsTrace(traceDir)) return {traceDir};
  DIR* d = opendir(traceDir.c_str());
  if (d == nullptr) return out;
  // rank<R> directories in rank order, then any other directory holding a manifest (e.g. ranklens-pid<P>). A
  // rank<R> directory is listed with or without a manifest (docs/trace-format.md): opening one without reports it,
  // in its place, where skipping it would let a rank vanish from every answer unnoticed.
  std::vector<std::tuple<int, long, std::string>> found;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    const std::string digits = name.rfind("rank", 0) == 0 ? name.substr(4) : "";
    const bool allDigits = !digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos;
    // rank01/ beside rank1/ (or alone): which one a tool read would be a guess, so none reads it and
    // rankDirectoryTrouble says why.
    if (allDigits && digits.size() > 1 && digits[0] == '0') continue;
    const bool numbered = allDigits && digits.size() <= 10 && std::stoll(digits) <= 0x7FFFFFFF;
    struct stat st;
    const std::string path = traceDir + "/" + name;
    if (numbered ? stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) : !holdsTrace(path)) continue;
    found.emplace_back(numbered ? 0 : 1, numbered ? std::stol(digits) : 0, name);
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  for (const auto& [group, rank, name] : found) out.push_back(traceDir + "/" + name);
  return out;
}

std::vector<RankDirectoryTrouble> rankDirectoryTrouble(const std::string& traceDir) {
  std::vector<RankDirectoryTrouble> out;
  if (holdsTrace(traceDir)) return out;
  DIR* d = opendir(traceDir.c_str());
  if (d == nullptr) return out;
  std::vector<std::pair<long, std::string>> named;  // every rank<digits> entry, padded or not
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("rank", 0) != 0) continue;
    const std::string digits = name.substr(4);
    if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    named.emplace_back(std::stol(digits), name);
  }
  closedir(d);
  std::sort(named.begin(), named.end());
  for (size_t i = 0; i < named.size(); ++i) {
    const auto& [rank, name] = named[i];
    const std::string path = traceDir + "/" + name;
    RankDirectoryTrouble t;
    t.rank = static_cast<int>(rank);
    t.path = path;
    std::string others;
    for (const auto& [r, n] : named)
      if (r == rank && n != name) others += (others.empty() ? "" : ", ") + traceDir + "/" + n;
    struct stat st;
    if (!others.empty()) {
      t.duplicate = true;
      t.reason = path + " and " + others + " both name rank " + std::to_string(rank) +
                 ": which one a tool reads would be a guess; remove or rename all but one (rank" +
                 std::to_string(rank) + "/)";
    } else if (stat(path.c_str(), &st) != 0) {
      t.reason = path + ": unusable rank directory: " + strerror(errno) +
                 (errno == ELOOP    ? " (a symlink loop)"
                  : errno == ENOENT ? " (a dangling symlink)"
                                    : "");
    } else if (!S_ISDIR(st.st_mode)) {
      t.reason = path + ": not a directory, so no recording of rank " + std::to_string(rank) +
                 " (a rank<R> entry must be the rank's directory)";
    } else if (access(path.c_str(), R_OK | X_OK) != 0) {
      t.reason = path + ": cannot read the rank directory: " + strerror(errno);
    } else if (!holdsTrace(path)) {
      t.reason = path + ": no manifest.msgpack, so no usable recording of rank " + std::to_string(rank) +
                 " (a rank that crashed before writing one, or lost it; rlpayload verify says more)";
    } else if (name != "rank" + std::to_string(rank)) {
      t.reason =
          path + ": a rank directory with a padded number is not read (rename it rank" + std::to_string(rank) + "/)";
    } else {
      continue;
    }
    out.push_back(std::move(t));
  }
  return out;
}

Status resolveRankDirectory(const std::string& path, int rank, std::string* rankDir) {
  DIR* d = opendir(path.c_str());
  if (d == nullptr)
    return Status::invalidArgument(path + ": " + (errno == ENOTDIR ? std::string("not a directory") : strerror(errno)));
  closedir(d);
  if (holdsTrace(path)) {
    *rankDir = path;
    return Status::ok();
  }
  // A rank whose entry cannot be used, or that two entries name, is said as such: not "no recording of rank R",
  // nor another rank's directory taken in its place.
  for (const auto& t : rankDirectoryTrouble(path))
    if (t.duplicate && (rank < 0 || t.rank == rank)) return Status::invalidArgument(t.reason);
  for (const auto& t : rankDirectoryTrouble(path))
    if (rank >= 0 && t.rank == rank) return Status::invalidArgument(t.reason);
  const std::string wanted = path + "/rank" + std::to_string(rank);
  if (rank >= 0 && holdsTrace(wanted)) {
    *rankDir = wanted;
    return Status::ok();
  }
  const std::vector<std::string> dirs = rankDirectories(path);
  if (rank < 0 && dirs.size() == 1) {
    *rankDir = dirs[0];
    return Status::ok();
  }
  std::string list;
  for (size_t i = 0; i < dirs.size() && i < 8; ++i) list += (i ? ", " : "") + dirs[i].substr(path.size() + 1);
  if (dirs.size() > 8) list += ", ... (" + std::to_string(dirs.size()) + " in all)";
  return Status::invalidArgument(
      path + ": " +
      (rank >= 0 ? "no recording of rank " + std::to_string(rank)
                 : std::string(dirs.empty() ? "no rank directory" : "more than one rank directory")) +
      (dirs.empty() ? std::string(" (no rank<N> directory with a manifest.msgpack: is this a RankLens trace?)")
                    : " (recorded: " + list + ")"));
}

}  // namespace trace
}  // namespace ranklens

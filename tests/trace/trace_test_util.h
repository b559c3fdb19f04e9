// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the trace store tests: temporary directories, whole-file I/O, hand-made frames and files (for
// compatibility and corruption tests), equality and printing of every record struct, and a scan that keeps copies
// of the visited records.
#pragma once

#ifndef ZSTD_STATIC_LINKING_ONLY
#define ZSTD_STATIC_LINKING_ONLY 1  // frame header inspection; the tests link libzstd statically
#endif

#include <dirent.h>
#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <ostream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

// ------------------------------------------------------------------------------ equality and printing of records
// Field-by-field equality (every field listed), and printing through msgpack's JSON-like output for diagnostics.
namespace ranklens {
namespace events {
inline auto fieldsOf(const CommInit& r) {
  return std::tie(r.commId, r.nranks, r.rank, r.parentId, r.color, r.key, r.how, r.name, r.worldRanks, r.cudaDev,
                  r.blocking, r.timeNs);
}
inline auto fieldsOf(const CommEnd& r) { return std::tie(r.commId, r.how, r.timeNs); }
inline auto fieldsOf(const Call& r) {
  return std::tie(r.commId, r.seq, r.op, r.datatype, r.count, r.rootOrPeer, r.redop, r.stream, r.groupId, r.nranks,
                  r.rank, r.bytes, r.timeNs);
}
inline auto fieldsOf(const GroupEnd& r) { return std::tie(r.groupId, r.calls, r.result, r.timeNs); }
inline auto fieldsOf(const Stage& r) { return std::tie(r.name, r.step, r.timeNs); }
inline bool operator==(const CommInit& a, const CommInit& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const CommEnd& a, const CommEnd& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const Call& a, const Call& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const GroupEnd& a, const GroupEnd& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const Stage& a, const Stage& b) { return fieldsOf(a) == fieldsOf(b); }
template <typename T>
void printRecord(const T& r, std::ostream* os) {
  msgpack::zone zone;
  *os << msgpack::object(r, zone);
}
inline void PrintTo(const CommInit& r, std::ostream* os) { printRecord(r, os); }
inline void PrintTo(const CommEnd& r, std::ostream* os) { printRecord(r, os); }
inline void PrintTo(const Call& r, std::ostream* os) { printRecord(r, os); }
inline void PrintTo(const GroupEnd& r, std::ostream* os) { printRecord(r, os); }
inline void PrintTo(const Stage& r, std::ostream* os) { printRecord(r, os); }
}  // namespace events

namespace trace {
inline auto fieldsOf(const GroupBegin& r) { return std::tie(r.groupId, r.timeNs); }
inline auto fieldsOf(const Timing& r) {
  return std::tie(r.commId, r.seq, r.op, r.stream, r.groupId, r.startNs, r.durationNs, r.captured, r.peer);
}
inline auto fieldsOf(const PayloadRef& r) {
  return std::tie(r.commId, r.seq, r.op, r.datatype, r.count, r.rawBytes, r.file, r.offset, r.compressedBytes,
                  r.rawCrc32, r.zstdLevel, r.peer);
}
inline auto fieldsOf(const Edit& r) {
  return std::tie(r.commId, r.seq, r.tool, r.action, r.detail, r.user, r.timeNs, r.op, r.peer);
}
inline bool operator==(const GroupBegin& a, const GroupBegin& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const Timing& a, const Timing& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const PayloadRef& a, const PayloadRef& b) { return fieldsOf(a) == fieldsOf(b); }
inline bool operator==(const Edit& a, const Edit& b) { return fieldsOf(a) == fieldsOf(b); }
inline void PrintTo(const GroupBegin& r, std::ostream* os) { events::printRecord(r, os); }
inline void PrintTo(const Timing& r, std::ostream* os) { events::printRecord(r, os); }
inline void PrintTo(const PayloadRef& r, std::ostream* os) { events::printRecord(r, os); }
inline void PrintTo(const Edit& r, std::ostream* os) { events::printRecord(r, os); }
inline void PrintTo(const Problem& p, std::ostream* os) {
  *os << "{" << p.describe() << (p.truncated ? " [truncated]" : "") << "}";
}
}  // namespace trace
}  // namespace ranklens

namespace tracetest {

using namespace ranklens;
using namespace ranklens::trace;

// ------------------------------------------------------------------------------------------------ files
// `length` bytes from `offset` (all of the rest by default); fewer if the file is shorter.
inline std::string readRange(const std::string& path, uint64_t offset, uint64_t length) {
  std::string out;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  if (fseeko(f, static_cast<off_t>(offset), SEEK_SET) == 0) {
    char buffer[1 << 16];
    while (out.size() < length) {
      const size_t n = fread(buffer, 1, std::min<uint64_t>(sizeof(buffer), length - out.size()), f);
      if (n == 0) break;
      out.append(buffer, n);
    }
  }
  fclose(f);
  return out;
}
inline std::string readAll(const std::string& path) { return readRange(path, 0, UINT64_MAX); }
// Replaces a file's content. Unlink + create rather than truncate: ext4 (auto_da_alloc) flushes a file that is
// truncated and rewritten on close, which makes thousands of rewrites take seconds.
inline void writeAll(const std::string& path, const std::string& bytes) {
  ::unlink(path.c_str());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}
inline void appendBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}
inline int64_t realtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}
inline bool exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }
inline uint64_t fileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}
inline std::vector<std::string> listDir(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}
inline std::vector<std::string> listWithPrefix(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto& name : listDir(dir))
    if (name.rfind(prefix, 0) == 0) out.push_back(name);
  return out;
}
inline void copyFile(const std::string& from, const std::string& to) { writeAll(to, readAll(from)); }
inline void copyDir(const std::string& from, const std::string& to) {
  mkdir(to.c_str(), 0755);
  for (auto& name : listDir(from)) copyFile(from + "/" + name, to + "/" + name);
}

// A fresh directory under the test temp dir, removed with everything in it at destruction (kept when the
// environment says RANKLENS_KEEP_TEST_DIRS=1, for post-mortems).
class TempDir {
 public:
  TempDir() {
    std::string base = testing::TempDir();
    if (base.empty() || base.back() != '/') base += '/';
    std::string tmpl = base + "ranklens-trace-XXXXXX";
    std::vector<char> buffer(tmpl.begin(), tmpl.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) {
      ADD_FAILURE() << "mkdtemp(" << tmpl << ") failed: " << strerror(errno);
      return;
    }
    path_ = buffer.data();
  }
  ~TempDir() {
    const char* keep = getenv("RANKLENS_KEEP_TEST_DIRS");
    if (path_.empty() || (keep && strcmp(keep, "1") == 0)) return;
    nftw(
        path_.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// ------------------------------------------------------------------------------------------------ crafting
inline void putU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
inline void putU16(std::string* out, uint16_t v) { out->append(reinterpret_cast<const char*>(&v), 2); }
inline uint32_t getU32(const std::string& s, size_t at) {
  uint32_t v;
  memcpy(&v, s.data() + at, 4);
  return v;
}
inline std::string fileHeader(uint32_t magic, uint16_t major, uint16_t minor, uint32_t index, uint32_t reserved = 0) {
  std::string out;
  putU32(&out, magic);
  putU16(&out, major);
  putU16(&out, minor);
  putU32(&out, index);
  putU32(&out, reserved);
  return out;
}
inline std::string frame(const std::string& body) {
  std::string out;
  putU32(&out, static_cast<uint32_t>(body.size()));
  putU32(&out, crc32Bytes(body.data(), body.size()));
  return out + body;
}
// [type, record] exactly as the writer packs it.
template <typename Record>
std::string body(int type, const Record& record) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(2);
  pk.pack(type);
  pk.pack(record);
  return std::string(buffer.data(), buffer.size());
}
// [type, record] where the record array is cut to its first `keep` fields (older writer) and then gets `extra`
// appended (newer writer): what a 1.x reader must accept from any 1.y file.
template <typename Record>
std::string bodyWithFields(int type, const Record& record, size_t keep, const std::vector<msgpack::object>& extra) {
  msgpack::zone zone;
  msgpack::object obj(record, zone);
  const size_t kept = std::min<size_t>(keep, obj.via.array.size);
  std::vector<msgpack::object> fields(obj.via.array.ptr, obj.via.array.ptr + kept);
  fields.insert(fields.end(), extra.begin(), extra.end());
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(2);
  pk.pack(type);
  pk.pack_array(static_cast<uint32_t>(fields.size()));
  for (const auto& f : fields) pk.pack(f);
  return std::string(buffer.data(), buffer.size());
}
// Where each zstd frame of the payload blob `ref` points at in `rankDir` ends (format 1.10: a frame per MiB);
// a damaged frame fails the test and ends the list.
inline std::vector<size_t> payloadFrameEnds(const std::string& rankDir, const PayloadRef& ref) {
  const std::string blob = readRange(rankDir + "/" + payloadName(ref.file), ref.offset, ref.compressedBytes);
  std::vector<size_t> ends;
  for (size_t at = 0; at < blob.size();) {
    const size_t frame = ZSTD_findFrameCompressedSize(blob.data() + at, blob.size() - at);
    EXPECT_FALSE(ZSTD_isError(frame)) << "payload seq " << ref.seq << ": " << ZSTD_getErrorName(frame);
    if (ZSTD_isError(frame)) break;
    at += frame;
    ends.push_back(at);
  }
  return ends;
}
// One zstd frame with the flags the writer uses (content size, checksum) unless told otherwise.
inline std::string zstdFrame(const std::string& raw, int level = 3, bool contentSize = true, bool checksum = true) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, checksum ? 1 : 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, contentSize ? 1 : 0);
  std::string out(ZSTD_compressBound(raw.size()), '\0');
  size_t n;
  if (contentSize) {
    n = ZSTD_compress2(cctx, out.data(), out.size(), raw.data(), raw.size());
  } else {
    // ZSTD_compress2 always knows the size; streaming without a pledged size leaves it out of the header.
    ZSTD_outBuffer o{out.data(), out.size(), 0};
    ZSTD_inBuffer i{raw.data(), raw.size(), 0};
    n = ZSTD_compressStream2(cctx, &o, &i, ZSTD_e_end);
    if (!ZSTD_isError(n)) n = o.pos;
  }
  ZSTD_freeCCtx(cctx);
  EXPECT_FALSE(ZSTD_isError(n)) << ZSTD_getErrorName(n);
  out.resize(ZSTD_isError(n) ? 0 : n);
  return out;
}

// ------------------------------------------------------------------------------------------------ reading
// A visited record, copied out of the parser's zone.
struct Rec {
  RecordType type;
  std::string packed;  // the record array, re-packed
  Location where;
  template <typename T>
  T as() const {
    msgpack::object_handle h = msgpack::unpack(packed.data(), packed.size());
    return h.get().as<T>();
  }
};
inline RecordVisitor collector(std::vector<Rec>* out) {
  return [out](RecordType type, const msgpack::object& obj, const Location& where) {
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, obj);
    out->push_back(Rec{type, std::string(buffer.data(), buffer.size()), where});
    return true;
  };
}
inline std::vector<Rec> scanAll(TraceReader& reader, bool* clean = nullptr) {
  std::vector<Rec> out;
  const bool ok = reader.scan(collector(&out));
  if (clean) *clean = ok;
  return out;
}
inline std::vector<Rec> parseImage(const std::string& image, uint32_t index, const Limits& limits, Problem* problem,
                                   bool* ok) {
  std::vector<Rec> out;
  *ok = parseSegment(reinterpret_cast<const uint8_t*>(image.data()), image.size(), index, "image", limits,
                     collector(&out), problem);
  return out;
}
// Frame boundaries of an intact segment image: offsets of every frame header, then the end of the file.
inline std::vector<size_t> frameOffsets(const std::string& image) {
  std::vector<size_t> out;
  size_t at = kFileHeaderBytes;
  while (at + kFrameHeaderBytes <= image.size()) {
    out.push_back(at);
    at += kFrameHeaderBytes + getU32(image, at);
  }
  out.push_back(at);
  return out;
}
inline std::string problemsText(const std::vector<Problem>& problems) {
  std::string out;
  for (const auto& p : problems) out += p.describe() + (p.truncated ? " [truncated]\n" : "\n");
  return out;
}

// Every call() and payload() answer of a reader for comms [0, comms) and seqs [0, seqs) (collectives, Send and
// Recv with peers 1 and 2), printed: for comparing a stored index with a rebuilt or damaged one.
inline std::vector<std::string> answers(TraceReader& reader, uint64_t comms, uint64_t seqs) {
  const int kAllReduce = static_cast<int>(events::Op::kAllReduce), kSend = static_cast<int>(events::Op::kSend),
            kRecv = static_cast<int>(events::Op::kRecv);
  std::vector<std::string> out;
  for (uint64_t comm = 0; comm < comms; ++comm)
    for (uint64_t seq = 0; seq < seqs; ++seq)
      for (auto [op, peer] : {std::pair{kAllReduce, -1}, {kSend, 1}, {kSend, 2}, {kRecv, 1}, {kRecv, 2}}) {
        std::ostringstream s;
        s << comm << "/" << op << "/" << peer << "/" << seq << ": ";
        if (auto c = reader.call(comm, op, peer, seq)) s << "call ", PrintTo(*c, &s);
        s << " | ";
        if (auto p = reader.payload(comm, op, peer, seq)) s << "payload ", PrintTo(*p, &s);
        out.push_back(s.str());
      }
  return out;
}

inline Manifest sampleManifest() {
  Manifest m;
  m.rank = 3;
  m.world_size = 8;
  m.local_rank = 1;
  m.host = "node-\xc3\xa9-17";  // UTF-8
  m.pid = 424242;
  m.gpu_name = "NVIDIA H200";
  m.gpu_uuid = "GPU-01234567-89ab-cdef-0123-456789abcdef";
  m.cpu_model = "Test CPU @ 2.00GHz";
  m.cpus = 16;
  m.nccl_version = 22809;
  m.mode = "record";
  m.writer = "ranklens-tests 0.1.0";
  m.start_time_ns = 1718000000123456789LL;
  m.env = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"NCCL_DEBUG", "INFO"}, {"EMPTY_", ""}};
  return m;
}

inline std::unique_ptr<TraceWriter> makeWriter(const std::string& dir, const WriterOptions& options = {},
                                               const Manifest& manifest = sampleManifest()) {
  std::string error;
  std::unique_ptr<TraceWriter> writer;
  error = TraceWriter::create(dir, manifest, options, &writer).message();
  EXPECT_NE(writer, nullptr) << error;
  return writer;
}
inline std::unique_ptr<TraceReader> openReader(const std::string& dir, const Limits& limits = {}) {
  std::string error;
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(dir, limits, &reader).message();
  EXPECT_NE(reader, nullptr) << error;
  return reader;
}

}  // namespace tracetest

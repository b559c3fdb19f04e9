// SPDX-License-Identifier: Apache-2.0
// trace_dump: prints a trace (or one rank directory) as the canonical JSON document of
// tools/python/ranklens_trace.py `dump --json`, using the C++ reader (ranklens::trace::TraceReader). The Python
// reader is written from docs/trace-format.md alone; tests/python/test_reader.py checks that both print the same
// bytes for the same traces, which is what shows the spec is complete.
//
//   trace_dump [--with-reasons] TRACE_OR_RANK_DIR      the document, one line
//   trace_dump --selftest                              checks the SHA-256 below against known vectors
//
// Document: {"ranks": [{"dir", "indexRebuilt", "directoryVersion", "manifest", "records", "payloads", "problems"}]},
// see the Python module's docstring; a rank whose manifest is missing or unusable is {"dir", "unusable": true} (exit
// 1). Keys sorted (nlohmann's default object is a std::map), no whitespace, ASCII only.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace {

using json = nlohmann::json;
namespace ev = ranklens::events;
namespace tr = ranklens::trace;

// ---------------------------------------------------------------------------------------------- SHA-256 (FIPS 180-4)

class Sha256 {
 public:
  void update(const uint8_t* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      block_[used_++] = data[i];
      if (used_ == 64) {
        compress();
        used_ = 0;
      }
    }
    bits_ += static_cast<uint64_t>(size) * 8;
  }
  std::string hex() {
    uint64_t bits = bits_;
    uint8_t pad = 0x80;
    update(&pad, 1);
    uint8_t zero = 0;
    while (used_ != 56) update(&zero, 1);
    uint8_t length[8];
    for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    update(length, 8);
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (uint32_t word : h_) {
      for (int shift = 28; shift >= 0; shift -= 4) out += digits[(word >> shift) & 0xf];
    }
    return out;
  }

 private:
  static uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }
  void compress() {
    static const uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      w[i] = (uint32_t{block_[4 * i]} << 24) | (uint32_t{block_[4 * i + 1]} << 16) |
             (uint32_t{block_[4 * i + 2]} << 8) | uint32_t{block_[4 * i + 3]};
    }
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h_[0], b = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6], h = h_[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    uint32_t add[8] = {a, b, c, d, e, f, g, h};
    for (int i = 0; i < 8; ++i) h_[i] += add[i];
  }
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64] = {};
  size_t used_ = 0;
  uint64_t bits_ = 0;
};

std::string sha256Hex(const std::vector<uint8_t>& data) {
  Sha256 sha;
  sha.update(data.data(), data.size());
  return sha.hex();
}

bool selfTest() {
  struct Vector {
    std::string input;
    const char* digest;
  };
  const Vector vectors[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  bool ok = true;
  for (const Vector& v : vectors) {
    std::string got = sha256Hex(std::vector<uint8_t>(v.input.begin(), v.input.end()));
    if (got != v.digest) {
      std::fprintf(stderr, "trace_dump: SHA-256 self-test failed for a %zu-byte input: %s != %s\n", v.input.size(),
                   got.c_str(), v.digest);
      ok = false;
    }
  }
  return ok;
}

// ------------------------------------------------------------------------------------------------------ records

int callKind(int op) { return op == 8 ? 1 : op == 9 ? 2 : 0; }

template <typename T>
T as(const msgpack::object& record) {
  T value;
  record.convert(value);  // missing trailing fields keep the struct defaults, extra ones are ignored
  return value;
}

// The record's fields by the spec's names; false for record types this reader does not know.
bool recordFields(tr::RecordType type, const msgpack::object& record, json* out) {
  json& j = *out;
  switch (type) {
    case tr::RecordType::kCommInit: {
      auto r = as<ev::CommInit>(record);
      j = {{"commId", r.commId},         {"nranks", r.nranks},   {"rank", r.rank},         {"parentId", r.parentId},
           {"color", r.color},           {"key", r.key},         {"how", r.how},           {"name", r.name},
           {"worldRanks", r.worldRanks}, {"cudaDev", r.cudaDev}, {"blocking", r.blocking}, {"timeNs", r.timeNs}};
      return true;
    }
    case tr::RecordType::kCommEnd: {
      auto r = as<ev::CommEnd>(record);
      j = {{"commId", r.commId}, {"how", r.how}, {"timeNs", r.timeNs}};
      return true;
    }
    case tr::RecordType::kCall: {
      auto r = as<ev::Call>(record);
      j = {{"commId", r.commId},     {"seq", r.seq},       {"op", r.op},
           {"datatype", r.datatype}, {"count", r.count},   {"rootOrPeer", r.rootOrPeer},
           {"redop", r.redop},       {"stream", r.stream}, {"groupId", r.groupId},
           {"nranks", r.nranks},     {"rank", r.rank},     {"bytes", r.bytes},
           {"timeNs", r.timeNs},     {"hostNs", r.hostNs}};
      return true;
    }
    case tr::RecordType::kGroupEnd: {
      auto r = as<ev::GroupEnd>(record);
      j = {
          {"groupId", r.groupId}, {"calls", r.calls}, {"result", r.result}, {"timeNs", r.timeNs}, {"hostNs", r.hostNs}};
      return true;
    }
    case tr::RecordType::kStage: {
      auto r = as<ev::Stage>(record);
      j = {{"name", r.name}, {"step", r.step}, {"timeNs", r.timeNs}};
      return true;
    }
    case tr::RecordType::kGroupBegin: {
      auto r = as<tr::GroupBegin>(record);
      j = {{"groupId", r.groupId}, {"timeNs", r.timeNs}};
      return true;
    }
    case tr::RecordType::kTiming: {
      auto r = as<tr::Timing>(record);
      j = {{"commId", r.commId},         {"seq", r.seq},           {"op", r.op},
           {"stream", r.stream},         {"groupId", r.groupId},   {"startNs", r.startNs},
           {"durationNs", r.durationNs}, {"captured", r.captured}, {"peer", r.peer},
           {"eventNs", r.eventNs},       {"clock", r.clock},       {"gapNs", r.gapNs}};
      return true;
    }
    case tr::RecordType::kPayloadRef: {
      auto r = as<tr::PayloadRef>(record);
      j = {{"commId", r.commId},
           {"seq", r.seq},
           {"op", r.op},
           {"datatype", r.datatype},
           {"count", r.count},
           {"rawBytes", r.rawBytes},
           {"file", r.file},
           {"offset", r.offset},
           {"compressedBytes", r.compressedBytes},
           {"rawCrc32", r.rawCrc32},
           {"zstdLevel", r.zstdLevel},
           {"peer", r.peer},
           {"shuffle", r.shuffle}};
      return true;
    }
    case tr::RecordType::kEdit: {
      auto r = as<tr::Edit>(record);
      j = {{"commId", r.commId}, {"seq", r.seq},       {"tool", r.tool}, {"action", r.action}, {"detail", r.detail},
           {"user", r.user},     {"timeNs", r.timeNs}, {"op", r.op},     {"peer", r.peer}};
      return true;
    }
    case tr::RecordType::kCommBinding: {
      auto r = as<tr::CommBinding>(record);
      j = {{"commId", r.commId}, {"recordedCommId", r.recordedCommId}, {"rule", r.rule}, {"timeNs", r.timeNs}};
      return true;
    }
    case tr::RecordType::kFlightRecorderEntry: {
      auto r = as<tr::FlightRecorderEntry>(record);
      j = {{"commId", r.commId},
           {"seq", r.seq},
           {"op", r.op},
           {"peer", r.peer},
           {"recordId", r.recordId},
           {"collectiveSeqId", r.collectiveSeqId},
           {"p2pSeqId", r.p2pSeqId},
           {"opId", r.opId},
           {"profilingName", r.profilingName},
           {"pgName", r.pgName},
           {"pgDesc", r.pgDesc},
           {"state", r.state},
           {"timeCreatedNs", r.timeCreatedNs},
           {"durationNs", r.durationNs},
           {"timeoutMs", r.timeoutMs},
           {"isP2p", r.isP2p},
           {"inputSizes", r.inputSizes},
           {"outputSizes", r.outputSizes},
           {"inputDtypes", r.inputDtypes},
           {"outputDtypes", r.outputDtypes},
           {"frames", r.frames},
           {"unknown", r.unknown}};
      return true;
    }
  }
  return false;
}

json manifestJson(const tr::Manifest& m) {
  return {{"format", m.format},
          {"version_major", m.version_major},
          {"version_minor", m.version_minor},
          {"rank", m.rank},
          {"world_size", m.world_size},
          {"local_rank", m.local_rank},
          {"host", m.host},
          {"pid", m.pid},
          {"gpu_name", m.gpu_name},
          {"gpu_uuid", m.gpu_uuid},
          {"nccl_version", m.nccl_version},
          {"mode", m.mode},
          {"writer", m.writer},
          {"start_time_ns", m.start_time_ns},
          {"end_time_ns", m.end_time_ns},
          {"env", m.env},
          {"closed", m.closed},
          {"records_written", m.records_written},
          {"records_dropped", m.records_dropped},
          {"payloads_written", m.payloads_written},
          {"payloads_dropped", m.payloads_dropped},
          {"payload_raw_bytes", m.payload_raw_bytes},
          {"payload_compressed_bytes", m.payload_compressed_bytes},
          {"segments", m.segments},
          {"payload_files", m.payload_files},
          {"counters", m.counters},
          {"cpu_model", m.cpu_model},
          {"cpus", m.cpus},
          {"shared_gpu", m.shared_gpu},
          {"imported", m.imported}};
}

json problemJson(const tr::Problem& p, bool withReasons) {
  json j = {
      {"file", std::filesystem::path(p.file).filename().string()}, {"offset", p.offset}, {"truncated", p.truncated}};
  if (withReasons) j["reason"] = p.reason;
  return j;
}

std::string baseName(const std::string& dir) {
  std::filesystem::path path(dir);
  if (!path.has_filename()) path = path.parent_path();  // "rank0/" -> "rank0"
  return path.filename().string();
}

bool dumpRank(const std::string& dir, bool withReasons, json* out, std::string* error) {
  tr::Limits limits;
  std::unique_ptr<tr::TraceReader> reader;
  *error = tr::TraceReader::open(dir, limits, &reader).message();
  if (!reader) return false;
  json records = json::array();
  // A record of a known type whose fields do not convert (wrong msgpack type or range) is reported and skipped,
  // as the Python reader does. The library itself reports malformed Call and PayloadRef records on every scan
  // ("<Type> record is malformed: ..."); other types are left to the visitor, so this reports them, once per frame.
  std::vector<tr::Problem> found;
  reader->scan([&](tr::RecordType type, const msgpack::object& record, const tr::Location& where) {
    json fields;
    try {
      if (!recordFields(type, record, &fields)) return true;  // unknown record type: skipped
    } catch (const std::exception& e) {
      found.push_back({dir + "/" + tr::segmentName(where.segment), where.offset,
                       std::string("malformed record: ") + e.what(), false});
      return true;
    }
    records.push_back(
        {{"segment", where.segment}, {"offset", where.offset}, {"type", tr::recordTypeName(type)}, {"fields", fields}});
    return true;
  });
  // Directory and segment problems by (file, offset), stable; then payload problems in payload order.
  std::vector<tr::Problem> all = reader->problems();
  for (const tr::Problem& mine : found) {
    const bool reported = std::any_of(all.begin(), all.end(), [&](const tr::Problem& p) {
      return baseName(p.file) == baseName(mine.file) && p.offset == mine.offset;
    });
    if (!reported) all.push_back(mine);
  }
  std::stable_sort(all.begin(), all.end(), [](const tr::Problem& a, const tr::Problem& b) {
    return std::make_pair(baseName(a.file), a.offset) < std::make_pair(baseName(b.file), b.offset);
  });
  json problems = json::array();
  for (const tr::Problem& p : all) problems.push_back(problemJson(p, withReasons));
  json payloads = json::array();
  for (const tr::PayloadRef& ref : reader->payloads()) {
    int kind = callKind(ref.op);
    json entry = {
        {"commId", ref.commId},     {"op", ref.op},       {"peer", kind ? ref.peer : -1}, {"seq", ref.seq},
        {"datatype", ref.datatype}, {"count", ref.count}, {"rawBytes", ref.rawBytes},     {"sha256", nullptr}};
    std::vector<uint8_t> bytes;
    tr::Problem problem;
    if (reader->readPayload(ref, &bytes, &problem)) {
      entry["sha256"] = sha256Hex(bytes);
    } else {
      problems.push_back(problemJson(problem, withReasons));
    }
    payloads.push_back(entry);
  }
  *out = {{"dir", baseName(dir)},
          {"indexRebuilt", reader->indexRebuilt()},
          {"directoryVersion", "1." + std::to_string(reader->directoryVersionMinor())},
          {"manifest", manifestJson(reader->manifest())},
          {"records", records},
          {"payloads", payloads},
          {"problems", problems}};
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool withReasons = false;
  std::string trace;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--selftest") return selfTest() ? 0 : 1;
    if (arg == "--with-reasons") {
      withReasons = true;
    } else if (trace.empty() && arg.rfind("--", 0) != 0) {
      trace = arg;
    } else {
      std::fprintf(stderr, "usage: trace_dump [--with-reasons] TRACE_OR_RANK_DIR | --selftest\n");
      return 2;
    }
  }
  if (trace.empty() || !selfTest()) {
    if (trace.empty()) std::fprintf(stderr, "usage: trace_dump [--with-reasons] TRACE_OR_RANK_DIR | --selftest\n");
    return 2;
  }
  // rankDirectories() lists nothing for a path it cannot list; like the Python reader, refuse that path instead.
  std::error_code ec;
  if (!std::filesystem::is_directory(trace, ec)) {
    std::fprintf(stderr, "trace_dump: %s: not a directory\n", trace.c_str());
    return 2;
  }
  json ranks = json::array();
  int status = 0;
  for (const std::string& dir : tr::rankDirectories(trace)) {  // in the library's order
    json rank;
    std::string error;
    if (!dumpRank(dir, withReasons, &rank, &error)) {
      // docs/trace-format.md: an unusable rank directory is reported in its place; the other ranks are still read.
      std::fprintf(stderr, "trace_dump: %s\n", error.c_str());
      rank = {{"dir", baseName(dir)}, {"unusable", true}};
      if (withReasons) rank["reason"] = error;
      status = 1;
    }
    ranks.push_back(rank);
  }
  json doc = {{"ranks", ranks}};
  // Invalid UTF-8 in a str (the library does not check) becomes U+FFFD rather than an exception.
  std::cout << doc.dump(-1, ' ', true, json::error_handler_t::replace) << "\n";
  return status;
}

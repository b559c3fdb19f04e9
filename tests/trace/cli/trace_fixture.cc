// SPDX-License-Identifier: Apache-2.0
#include "trace_fixture.h"

#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace rltest {

namespace fs = std::filesystem;
using namespace ranklens::trace;
using ranklens::events::Call;
using ranklens::events::CommInit;
using ranklens::events::Op;

std::string makeTempDir(const std::string& tag) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/rlpayload-" + tag + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  return buf.data();
}

std::vector<float> allReduceValues() {
  std::vector<float> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.5f - 8.0f;  // -8 .. 23.5, exact
  return v;
}

namespace {

template <typename T>
std::vector<uint8_t> asBytes(const std::vector<T>& values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  memcpy(out.data(), values.data(), out.size());
  return out;
}

uint16_t bf16(float f) {  // exact for the values used (few mantissa bits)
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return static_cast<uint16_t>(bits >> 16);
}

struct RankWriter {
  std::unique_ptr<TraceWriter> writer;
  int rank;
  std::vector<FixturePayload>* out;
  int64_t time = 1000;

  void comm(uint64_t id, int64_t parent, const std::string& how) {
    CommInit c;
    c.commId = id;
    c.nranks = 2;
    c.rank = rank;
    c.parentId = parent;
    c.how = how;
    c.worldRanks = {0, 1};
    c.timeNs = time++;
    if (!writer->append(RecordType::kCommInit, c)) throw std::runtime_error("CommInit dropped");
  }
  void call(uint64_t comm, uint64_t seq, Op op, int datatype, uint64_t count, int peer,
            const std::vector<uint8_t>* payload, uint64_t payloadCount) {
    Call c;
    c.commId = comm;
    c.seq = seq;
    c.op = static_cast<int>(op);
    c.datatype = datatype;
    c.count = count;
    c.rootOrPeer = peer;
    c.redop = op == Op::kAllReduce ? 0 : -1;
    c.nranks = 2;
    c.rank = rank;
    c.bytes = payload ? payload->size() : 0;
    c.timeNs = time++;
    if (!writer->append(RecordType::kCall, c)) throw std::runtime_error("Call dropped");
    if (payload) {
      PayloadRef ref;
      ref.commId = comm;
      ref.seq = seq;
      ref.op = c.op;
      ref.datatype = datatype;
      ref.count = payloadCount;
      ref.peer = (op == Op::kSend || op == Op::kRecv) ? peer : -1;
      if (!writer->appendPayload(ref, payload->data(), payload->size())) throw std::runtime_error("payload dropped");
      out->push_back({rank, comm, seq, c.op, ref.peer, datatype, *payload, payloadCount});
    }
  }
};

}  // namespace

std::vector<FixturePayload> writeFixtureTrace(const std::string& traceDir) {
  std::vector<FixturePayload> payloads;
  for (int rank = 0; rank < 2; ++rank) {
    Manifest manifest;
    manifest.rank = rank;
    manifest.world_size = 2;
    manifest.local_rank = rank;
    manifest.host = "testhost";
    manifest.pid = 1;  // not a live writer on this host
    manifest.mode = "record";
    manifest.writer = "rlpayload tests";
    WriterOptions options;
    options.compressionThreads = 1;
    // Rank 1 stores its payloads of 2-, 4- and 8-byte types as byte planes (format 1.8): every command reads both.
    options.shuffle = rank == 1 ? WriterOptions::Shuffle::kAlways : WriterOptions::Shuffle::kOff;
    std::string error;
    RankWriter w;
    error = TraceWriter::create(traceDir + "/rank" + std::to_string(rank), manifest, options, &w.writer).message();
    if (!w.writer) throw std::runtime_error(error);
    w.rank = rank;
    w.out = &payloads;
    w.comm(0, -1, "init");
    w.comm(1, 0, "split");
    w.comm(2, 0, "split");

    // comm 0: AllReduce float32 (seq 0), AllGather bfloat16 (seq 1), AllReduce without payload (seq 2)
    std::vector<float> f32 = allReduceValues();
    if (rank == 1)
      for (auto& v : f32) v = -v;
    const auto f32Bytes = asBytes(f32);
    w.call(0, 0, Op::kAllReduce, 7, 64, -1, &f32Bytes, 64);
    std::vector<uint16_t> b16(32);
    for (size_t i = 0; i < b16.size(); ++i) b16[i] = bf16(static_cast<float>(i) - 4.0f);
    const auto b16Bytes = asBytes(b16);
    w.call(0, 1, Op::kAllGather, 9, 16, -1, &b16Bytes, 32);
    w.call(0, 2, Op::kAllReduce, 7, 1024, -1, nullptr, 0);
    // comm 1: AllReduce int32 (seq 0), Broadcast float32 (seq 1)
    std::vector<int32_t> i32(16);
    for (size_t i = 0; i < i32.size(); ++i) i32[i] = static_cast<int32_t>(i * 1000) - 3000 + rank;
    const auto i32Bytes = asBytes(i32);
    w.call(1, 0, Op::kAllReduce, 2, 16, -1, &i32Bytes, 16);
    std::vector<float> bcast = {1.5f, 2.5f, 3.5f, 4.5f};
    const auto bcastBytes = asBytes(bcast);
    w.call(1, 1, Op::kBroadcast, 7, 4, 0, &bcastBytes, 4);
    // comm 2: Send to the peer (no payload: only receives are stored) and Recv from it, in a group
    const int peer = 1 - rank;
    std::vector<float> recv(8);
    for (size_t i = 0; i < recv.size(); ++i) recv[i] = 100.0f + static_cast<float>(i) + 10.0f * rank;
    const auto recvBytes = asBytes(recv);
    w.call(2, 0, Op::kSend, 7, 8, peer, nullptr, 0);
    w.call(2, 0, Op::kRecv, 7, 8, peer, &recvBytes, 8);
    if (!w.writer->close().isOk()) throw std::runtime_error(w.writer->lastError());
  }
  return payloads;
}

std::vector<uint8_t> readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void writeBytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

void copyTree(const std::string& from, const std::string& to) { fs::copy(from, to, fs::copy_options::recursive); }

void removeTree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::vector<ScannedRecord> scanRecords(const std::string& rankDir) {
  std::vector<ScannedRecord> out;
  std::string error;
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(rankDir, Limits{}, &reader).message();
  if (!reader) throw std::runtime_error(error);
  reader->scan([&](RecordType type, const msgpack::object& body, const Location& where) {
    ScannedRecord r;
    r.type = type;
    // Keep the record past the scan by re-packing it (msgpack-cxx 4.1's deep copy memcpy()s empty strings from a
    // null pointer, which UBSan rejects).
    msgpack::sbuffer packed;
    msgpack::pack(packed, body);
    r.body = msgpack::unpack(packed.data(), packed.size());
    r.where = where;
    out.push_back(std::move(r));
    return true;
  });
  return out;
}

}  // namespace rltest

// SPDX-License-Identifier: Apache-2.0
// trace_make OUT: writes, with the C++ TraceWriter, a 2-rank trace that exercises the whole format, and two damaged
// copies of it, for the Python/C++ reader cross-check (tests/python/test_reader.py):
//
//   OUT/clean/rank{0,1}    every record type; a payload of every datatype; Send and Recv whose sequences collide
//                          with collective ones (and with each other, per peer); a payload written twice for one
//                          call (edit: the second PayloadRef wins) on collectives and on a Recv; records with
//                          missing and with extra trailing fields (a Timing and an Edit without their later-added
//                          peer / op) and of an unknown type (rank 1); several segments and payload files (small
//                          WriterOptions limits).
//   OUT/damaged/rank{0,1}  a copy with: rank0's seg-000001 cut inside its second frame's header and its last
//                          payload file cut inside its last effective blob; rank1's last segment cut inside its
//                          last frame's body and its index removed.
//   OUT/corrupt/rank{0,1}  a copy with bytes changed in place (sizes kept, so the indexes stay consistent): a body
//                          byte of rank0's seg-000000 third frame (CRC mismatch), a byte in the middle of rank1's
//                          first effective payload blob.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace {

namespace fs = std::filesystem;
namespace ev = ranklens::events;
namespace tr = ranklens::trace;

constexpr size_t kElementSize[12] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "trace_make: %s\n", message.c_str());
  std::exit(1);
}

std::vector<uint8_t> pattern(size_t bytes, uint32_t seed) {
  std::vector<uint8_t> out(bytes);
  uint32_t x = seed * 2654435761u + 12345;
  for (auto& b : out) {
    x = x * 1103515245u + 12345;
    b = static_cast<uint8_t>(x >> 16);
  }
  return out;
}

struct Rank {
  int rank;
  std::unique_ptr<tr::TraceWriter> writer;
  int64_t now = 1000;

  template <typename Record>
  void record(tr::RecordType type, const Record& r) {
    if (!writer->append(type, r)) die("record dropped");
  }
  ev::Call call(uint64_t comm, uint64_t seq, ev::Op op, int datatype, uint64_t count, int peer, uint64_t group) {
    ev::Call c;
    c.commId = comm;
    c.seq = seq;
    c.op = static_cast<int>(op);
    c.datatype = datatype;
    c.count = count;
    c.rootOrPeer = peer;
    c.redop = (op == ev::Op::kAllReduce || op == ev::Op::kReduce || op == ev::Op::kReduceScatter) ? 0 : -1;
    c.stream = 0x7f0000001000ull + rank;
    c.groupId = group;
    c.nranks = 2;
    c.rank = rank;
    c.bytes = count * kElementSize[datatype];
    c.timeNs = now++;
    record(tr::RecordType::kCall, c);
    return c;
  }
  void payload(const ev::Call& c, int peer, uint32_t seed) {
    tr::PayloadRef ref;
    ref.commId = c.commId;
    ref.seq = c.seq;
    ref.op = c.op;
    ref.datatype = c.datatype;
    ref.count = c.count;
    ref.peer = peer;
    std::vector<uint8_t> bytes = pattern(c.count * kElementSize[c.datatype], seed);
    if (!writer->appendPayload(ref, bytes.data(), bytes.size())) die("payload dropped");
  }
  void flush() {
    if (!writer->flush().isOk()) die("flush: " + writer->lastError());
  }
};

void writeRank(const std::string& dir, int rank) {
  tr::Manifest manifest;
  manifest.rank = rank;
  manifest.world_size = 2;
  manifest.local_rank = rank;
  manifest.host = "trace-make";
  manifest.pid = 1000 + rank;
  manifest.gpu_name = "Test GPU";
  manifest.gpu_uuid = "GPU-00000000-0000-0000-0000-00000000000" + std::to_string(rank);
  manifest.nccl_version = 22809;
  manifest.mode = "record";
  manifest.imported = {{"from", "trace_make"}, {"missing", "nothing: a test"}};
  manifest.writer = "trace_make";
  manifest.env = {{"RANK", std::to_string(rank)},
                  {"WORLD_SIZE", "2"},
                  {"NCCL_DEBUG", "WARN"},
                  {"RANKLENS_NOTE", "caf\xc3\xa9 \"quoted\"\n"}};
  tr::WriterOptions options;
  options.segmentBytes = 600;       // several segments
  options.payloadFileBytes = 2048;  // several payload files
  options.policy = tr::BackPressure::kWait;
  options.compressionThreads = 1;  // one worker writes every payload file, in order: the tests name files and offsets
  options.shuffle = rank == 1 ? tr::WriterOptions::Shuffle::kAlways
                              : tr::WriterOptions::Shuffle::kOff;  // rank 1's payloads of 2-, 4- and 8-byte types are
                                                                   // stored as byte planes (1.8)
  std::string error;
  Rank r{rank, nullptr};
  error = tr::TraceWriter::create(dir, manifest, options, &r.writer).message();
  if (!r.writer) die("create " + dir + ": " + error);
  const int other = 1 - rank;

  ev::CommInit world;
  world.commId = 0, world.nranks = 2, world.rank = rank, world.how = "init", world.name = "world";
  world.worldRanks = {0, 1}, world.cudaDev = rank, world.blocking = true, world.timeNs = r.now++;
  r.record(tr::RecordType::kCommInit, world);
  ev::CommInit sub = world;
  sub.commId = 1, sub.parentId = 0, sub.color = 7, sub.key = rank, sub.how = "split", sub.name = "";
  sub.blocking = false, sub.timeNs = r.now++;
  r.record(tr::RecordType::kCommInit, sub);
  r.record(tr::RecordType::kStage, ev::Stage{"forward", 3, r.now++});

  // Collectives on comm 0, one per datatype, seq 0..11, all collective ops; inside a group.
  r.record(tr::RecordType::kGroupBegin, tr::GroupBegin{1, r.now++});
  static const ev::Op kCollectives[] = {ev::Op::kAllReduce,     ev::Op::kBroadcast, ev::Op::kReduce, ev::Op::kAllGather,
                                        ev::Op::kReduceScatter, ev::Op::kAlltoAll,  ev::Op::kGather, ev::Op::kScatter};
  std::vector<ev::Call> collectives;
  for (int dt = 0; dt < 12; ++dt) {
    ev::Op op = kCollectives[dt % 8];
    int root =
        (op == ev::Op::kBroadcast || op == ev::Op::kReduce || op == ev::Op::kGather || op == ev::Op::kScatter) ? 0 : -1;
    collectives.push_back(r.call(0, dt, op, dt, 40 + dt * 24, root, 1));
    r.payload(collectives.back(), -1, 100 * rank + dt);
  }
  r.record(tr::RecordType::kGroupEnd, ev::GroupEnd{1, 12, 0, r.now++});
  r.record(tr::RecordType::kTiming, tr::Timing{0, 0, 0, 0x7f0000001000ull, 1, 5000, 1234, false});
  r.record(tr::RecordType::kTiming, tr::Timing{0, 1, 1, 0x7f0000001000ull, 1, 6000, 99, true});

  // Send/Recv on comm 0: sequences 0..2 per peer and direction, colliding with the collectives' 0..2 and with each
  // other; a self Send/Recv (peer = own rank) with seq 0 too. Payloads for the receives and for one send.
  r.record(tr::RecordType::kGroupBegin, tr::GroupBegin{2, r.now++});
  std::vector<ev::Call> recvs;
  for (uint64_t seq = 0; seq < 3; ++seq) {
    ev::Call send = r.call(0, seq, ev::Op::kSend, 7, 4 + seq, other, 2);
    if (seq == 0) r.payload(send, other, 900 + rank);
    recvs.push_back(r.call(0, seq, ev::Op::kRecv, 7, 4 + seq, other, 2));
    r.payload(recvs.back(), other, 500 + 10 * rank + seq);
  }
  r.call(0, 0, ev::Op::kSend, 2, 3, rank, 2);
  ev::Call self = r.call(0, 0, ev::Op::kRecv, 2, 3, rank, 2);
  r.payload(self, rank, 700 + rank);
  r.record(tr::RecordType::kGroupEnd, ev::GroupEnd{2, 8, 0, r.now++});
  // P2P timings name their peer (sequences are per peer).
  r.record(tr::RecordType::kTiming, tr::Timing{0, 1, 9, 0x7f0000002000ull, 2, 7000, 321, false, other});

  // Comm 1: a collective with seq 0 (comm ids keep the sequences apart).
  ev::Call bcast = r.call(1, 0, ev::Op::kBroadcast, 9, 6, 1, 0);
  r.payload(bcast, -1, 300 + rank);

  // Edits: a second payload for collective (0, seq 3) and for the Recv (0, peer other, seq 1), written after the
  // first ones are on disk so that segment order is the order written; each with an Edit record.
  r.flush();
  r.payload(collectives[3], -1, 4000 + rank);
  r.payload(recvs[1], other, 4100 + rank);
  // The broadcast's second reference carries its root as `peer`: a collective's identity ignores peer (it is -1
  // for collectives in the identity), so this one supersedes the first.
  r.payload(bcast, 1, 4200 + rank);
  r.flush();
  r.record(tr::RecordType::kEdit, tr::Edit{0, 3, "trace_make", "inject", "collective seq 3 replaced", "tester",
                                           1700000000000000000, collectives[3].op, -1});
  r.record(tr::RecordType::kEdit, tr::Edit{0, 1, "trace_make", "inject", "recv seq 1 replaced", "tester",
                                           1700000000000000001, static_cast<int>(ev::Op::kRecv), other});
  r.record(tr::RecordType::kCommBinding, tr::CommBinding{1, 0, "first call", r.now++});
  // 1.13: an imported Flight Recorder entry, every field set (the unknown list, a stack with a newline).
  tr::FlightRecorderEntry fe;
  fe.commId = 0;
  fe.seq = 3;
  fe.op = 0;
  fe.recordId = 7;
  fe.collectiveSeqId = 4;
  fe.p2pSeqId = 1;
  fe.opId = 9;
  fe.profilingName = "nccl:all_reduce";
  fe.pgName = "0";
  fe.pgDesc = "default_pg";
  fe.state = "started";
  fe.timeCreatedNs = 1764000000000000000;
  fe.durationNs = -1;
  fe.timeoutMs = 20000;
  fe.inputSizes = fe.outputSizes = "[[1024]]";
  fe.inputDtypes = fe.outputDtypes = "Float";
  fe.frames = "#0 all_reduce from distributed_c10d.py:2950\n#1 main from train.py:12\n";
  fe.unknown = "redop,stream,payload";
  r.record(tr::RecordType::kFlightRecorderEntry, fe);

  if (rank == 1) {
    // Minor-version compatibility as a 1.0 reader sees it: a Call with only its first three fields (the rest take
    // their defaults), a Call with two extra trailing fields, a Stage with only its name, an unknown record type.
    r.record(tr::RecordType::kCall, std::make_tuple(uint64_t{1}, uint64_t{1}, 0));
    r.record(tr::RecordType::kCall,
             std::make_tuple(uint64_t{1}, uint64_t{2}, 0, 7, uint64_t{8}, -1, 0, uint64_t{5}, uint64_t{0}, 2, 1,
                             uint64_t{32}, int64_t{77}, int64_t{-1}, std::string("future"), 42));
    r.record(tr::RecordType::kStage, std::make_tuple(std::string("optimizer")));
    // A Timing and an Edit as 1.0 writers wrote them before `peer` / `op` were appended: those take -1.
    r.record(tr::RecordType::kTiming,
             std::make_tuple(uint64_t{1}, uint64_t{0}, 1, uint64_t{5}, uint64_t{0}, int64_t{8000}, int64_t{10}, false));
    r.record(tr::RecordType::kEdit,
             std::make_tuple(uint64_t{1}, uint64_t{0}, std::string("trace_make"), std::string("note"),
                             std::string("old layout"), std::string("tester"), int64_t{1700000000000000002}));
    r.record(static_cast<tr::RecordType>(42), std::make_tuple(1, std::string("from a later minor version")));
  }
  r.record(tr::RecordType::kCommEnd, ev::CommEnd{1, "destroy", r.now++});
  r.record(tr::RecordType::kCommEnd, ev::CommEnd{0, "finalize", r.now++});
  if (!r.writer->close().isOk()) die("close: " + r.writer->lastError());
  tr::WriterStats stats = r.writer->stats();
  if (stats.recordsDropped || stats.payloadsDropped) die("dropped records or payloads");
}

std::vector<uint8_t> readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

// Offsets of the intact frames of a segment file.
std::vector<uint64_t> frameOffsets(const fs::path& path, uint32_t index) {
  std::vector<uint8_t> data = readFile(path);
  std::vector<uint64_t> offsets;
  tr::Problem problem;
  tr::parseSegment(
      data.data(), data.size(), index, path.string(), tr::Limits{},
      [&](tr::RecordType, const msgpack::object&, const tr::Location& where) {
        offsets.push_back(where.offset);
        return true;
      },
      &problem);
  return offsets;
}

uint32_t frameLength(const fs::path& path, uint64_t offset) {
  std::vector<uint8_t> data = readFile(path);
  return uint32_t{data[offset]} | uint32_t{data[offset + 1]} << 8 | uint32_t{data[offset + 2]} << 16 |
         uint32_t{data[offset + 3]} << 24;
}

void damage(const fs::path& out) {
  fs::path rank0 = out / "damaged" / "rank0", rank1 = out / "damaged" / "rank1";
  // rank0: a middle segment cut inside its second frame's header.
  fs::path seg = rank0 / tr::segmentName(1);
  std::vector<uint64_t> offsets = frameOffsets(seg, 1);
  if (offsets.size() < 2 || !fs::exists(rank0 / tr::segmentName(2))) die("rank0 needs 3 segments of 2+ frames");
  fs::resize_file(seg, offsets[1] + 5);
  // rank0: the last payload file cut inside the last effective blob it holds.
  std::string error;
  std::unique_ptr<tr::TraceReader> reader;
  error = tr::TraceReader::open((out / "clean" / "rank0").string(), tr::Limits{}, &reader).message();
  if (!reader) die(error);
  std::vector<tr::PayloadRef> refs = reader->payloads();
  auto last = std::max_element(refs.begin(), refs.end(), [](const tr::PayloadRef& a, const tr::PayloadRef& b) {
    return std::tie(a.file, a.offset) < std::tie(b.file, b.offset);
  });
  fs::resize_file(rank0 / tr::payloadName(last->file), last->offset + last->compressedBytes / 2);
  // rank1: the last segment cut inside its last frame's body; no index.
  reader.reset();
  uint32_t count = 0;
  while (fs::exists(rank1 / tr::segmentName(count))) ++count;
  seg = rank1 / tr::segmentName(count - 1);
  offsets = frameOffsets(seg, count - 1);
  if (offsets.empty()) die("rank1's last segment has no frame");
  fs::resize_file(seg, offsets.back() + 8 + frameLength(seg, offsets.back()) / 2);
  fs::remove(rank1 / "index.msgpack");
}

void flipByte(const fs::path& path, uint64_t offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(static_cast<std::streamoff>(offset));
  char byte = 0;
  file.get(byte);
  byte = static_cast<char>(byte ^ 0x5a);
  file.seekp(static_cast<std::streamoff>(offset));
  file.put(byte);
  if (!file) die("cannot change " + path.string());
}

void corrupt(const fs::path& out) {
  fs::path seg = out / "corrupt" / "rank0" / tr::segmentName(0);
  std::vector<uint64_t> offsets = frameOffsets(seg, 0);
  if (offsets.size() < 4) die("rank0's first segment needs 4+ frames");
  flipByte(seg, offsets[2] + 8 + 1);
  std::string error;
  std::unique_ptr<tr::TraceReader> reader;
  error = tr::TraceReader::open((out / "corrupt" / "rank1").string(), tr::Limits{}, &reader).message();
  if (!reader) die(error);
  tr::PayloadRef ref = reader->payloads().at(0);
  flipByte(out / "corrupt" / "rank1" / tr::payloadName(ref.file), ref.offset + ref.compressedBytes / 2);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: trace_make OUT_DIR\n");
    return 2;
  }
  fs::path out = argv[1];
  std::error_code ec;
  fs::remove_all(out / "clean", ec);
  fs::remove_all(out / "damaged", ec);
  fs::remove_all(out / "corrupt", ec);
  for (int rank = 0; rank < 2; ++rank) writeRank((out / "clean" / ("rank" + std::to_string(rank))).string(), rank);
  fs::copy(out / "clean", out / "damaged", fs::copy_options::recursive);
  damage(out);
  fs::copy(out / "clean", out / "corrupt", fs::copy_options::recursive);
  corrupt(out);
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// make_fuzz_seeds OUTDIR: writes the seed corpora of the fuzz targets (tests/fuzz/) from real TraceWriter output:
//   OUTDIR/fuzz_segment/   segment images (a real one, one cut inside its last frame, one of a newer minor version
//                          with extra trailing fields and an unknown record type, a bare header)
//   OUTDIR/fuzz_payload/   rawBytes u32 (shuffle in its top bits), rawCrc32 u32, then one blob as the writer stored
//                          it (fuzz_payload's layout, payload_seed_layout.h); one of them byte-shuffled, one a
//                          frame with zstd's content checksum, as writers before format 1.9 made them, one of two
//                          frames (format 1.10)
//   OUTDIR/fuzz_manifest/  manifests (of an open and of a closed trace, and a 1.7 one with unknown keys)
// Every seed is under 4 KiB. Regenerate the committed corpus with:
//   build/dev/tests/trace/make_fuzz_seeds tests/fuzz/corpus
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "../fuzz/payload_seed_layout.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace {

using namespace ranklens;
using namespace ranklens::trace;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool emit(const std::string& path, const std::string& bytes) {
  if (bytes.size() >= 4096) {
    fprintf(stderr, "make_fuzz_seeds: %s would be %zu bytes (seeds stay under 4 KiB)\n", path.c_str(), bytes.size());
    return false;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) {
    fprintf(stderr, "make_fuzz_seeds: cannot write %s\n", path.c_str());
    return false;
  }
  printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
  return true;
}

void u32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }

std::string frame(const std::string& body) {
  std::string out;
  u32(&out, static_cast<uint32_t>(body.size()));
  u32(&out, crc32Bytes(body.data(), body.size()));
  return out + body;
}

// [type, record + extra trailing fields], as a newer minor version may write.
template <typename Record>
std::string newerBody(int type, const Record& record) {
  msgpack::zone zone;
  msgpack::object obj(record, zone);
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_array(2);
  pk.pack(type);
  pk.pack_array(obj.via.array.size + 2);
  for (uint32_t i = 0; i < obj.via.array.size; ++i) pk.pack(obj.via.array.ptr[i]);
  pk.pack(99);
  pk.pack(std::string("future"));
  return std::string(buffer.data(), buffer.size());
}

}  // namespace

// A zstd frame of `bytes` at `data` as writers since 1.9 make them (content size, no checksum); empty on failure.
std::string zstdFrameOf(const uint8_t* data, size_t bytes) {
  std::string frame(ZSTD_compressBound(bytes), '\0');
  const size_t n = ZSTD_compress(frame.data(), frame.size(), data, bytes, 3);
  if (ZSTD_isError(n)) {
    fprintf(stderr, "make_fuzz_seeds: zstd: %s\n", ZSTD_getErrorName(n));
    return {};
  }
  frame.resize(n);
  return frame;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  char tmpl[] = "/tmp/ranklens-seeds-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  const std::string dir = std::string(tmpl) + "/rank0";
  for (const char* sub : {"", "/fuzz_segment", "/fuzz_payload", "/fuzz_manifest"}) mkdir((out + sub).c_str(), 0755);

  Manifest manifest;
  manifest.rank = 0;
  manifest.world_size = 2;
  manifest.local_rank = 0;
  manifest.host = "seed-host";
  manifest.pid = 4242;
  manifest.gpu_name = "NVIDIA H200";
  manifest.nccl_version = 22809;
  manifest.mode = "record";
  manifest.writer = "make_fuzz_seeds";
  manifest.start_time_ns = 1718000000000000000LL;
  manifest.env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"NCCL_DEBUG", "WARN"}};
  std::string error;
  std::unique_ptr<TraceWriter> writer;
  error = TraceWriter::create(dir, manifest, WriterOptions{}, &writer).message();
  if (!writer) {
    fprintf(stderr, "make_fuzz_seeds: %s\n", error.c_str());
    return 1;
  }
  bool ok = emit(out + "/fuzz_manifest/open.msgpack", slurp(dir + "/manifest.msgpack"));

  // One record of every type, and payloads of a few datatypes (float32 gradients, int32, one bfloat16, empty).
  events::CommInit init;
  init.nranks = 2;
  init.how = "init";
  init.name = "world";
  init.worldRanks = {0, 1};
  events::Call call;
  call.seq = 0;
  call.op = static_cast<int>(events::Op::kAllReduce);
  call.datatype = 7;
  call.count = 64;
  call.redop = 0;
  call.nranks = 2;
  call.bytes = 256;
  call.timeNs = 1000;
  events::Call recv = call;
  recv.seq = 0;
  recv.op = static_cast<int>(events::Op::kRecv);
  recv.rootOrPeer = 1;
  recv.datatype = 2;
  recv.count = 16;
  recv.redop = -1;
  events::GroupEnd groupEnd;
  groupEnd.groupId = 1;
  groupEnd.calls = 1;
  events::Stage stage;
  stage.name = "forward";
  stage.step = 0;
  GroupBegin groupBegin;
  groupBegin.groupId = 1;
  Timing timing;
  timing.durationNs = 12345;
  Edit edit;
  edit.tool = "rlpayload";
  edit.action = "inject";
  edit.detail = "seed";
  events::CommEnd end;
  end.how = "destroy";

  std::mt19937 rng(1);
  std::normal_distribution<float> grad(0.f, 1e-3f);
  std::string f32(64 * 4, '\0'), i32(16 * 4, '\0');
  for (size_t i = 0; i < 64; ++i) {
    const float v = grad(rng);
    memcpy(&f32[i * 4], &v, 4);
  }
  for (size_t i = 0; i < 16; ++i) {
    const int32_t v = static_cast<int32_t>(i * i) - 7;
    memcpy(&i32[i * 4], &v, 4);
  }
  const float one = 0.0078125f;
  uint32_t oneBits;
  memcpy(&oneBits, &one, 4);
  const uint16_t bf16 = static_cast<uint16_t>(oneBits >> 16);
  PayloadRef ref;
  ref.datatype = 7;
  ref.count = 64;
  ok = ok && writer->append(RecordType::kCommInit, init) && writer->append(RecordType::kStage, stage) &&
       writer->append(RecordType::kGroupBegin, groupBegin) && writer->append(RecordType::kCall, call) &&
       writer->appendPayload(ref, f32.data(), f32.size()) && writer->append(RecordType::kCall, recv);
  ref.op = recv.op;
  ref.peer = 1;
  ref.datatype = 2;
  ref.count = 16;
  ok = ok && writer->appendPayload(ref, i32.data(), i32.size()) && writer->append(RecordType::kGroupEnd, groupEnd) &&
       writer->append(RecordType::kTiming, timing);
  ref.seq = 1;
  ref.op = 0;
  ref.peer = -1;
  ref.datatype = 9;
  ref.count = 1;
  ok = ok && writer->appendPayload(ref, &bf16, 2);
  ref.seq = 2;
  ref.count = 0;
  ok = ok && writer->appendPayload(ref, nullptr, 0) && writer->append(RecordType::kEdit, edit) &&
       writer->append(RecordType::kCommEnd, end) && writer->close().isOk();
  if (!ok) {
    fprintf(stderr, "make_fuzz_seeds: writing the trace failed: %s\n", writer->lastError().c_str());
    return 1;
  }
  writer.reset();
  ok = emit(out + "/fuzz_manifest/closed.msgpack", slurp(dir + "/manifest.msgpack"));

  // Segments.
  const std::string seg = slurp(dir + "/" + segmentName(0));
  ok = ok && emit(out + "/fuzz_segment/every-record-type.rls", seg);
  ok = ok && emit(out + "/fuzz_segment/truncated-tail.rls", seg.substr(0, seg.size() - 5));
  ok = ok && emit(out + "/fuzz_segment/header-only.rls", seg.substr(0, kFileHeaderBytes));
  std::string newer = seg.substr(0, kFileHeaderBytes);
  newer[6] = 7;  // minor 7
  newer += frame(newerBody(1, init)) + frame(newerBody(3, recv)) + frame(newerBody(5, stage));
  newer += frame(newerBody(42, std::vector<int>{1, 2, 3}));  // a record type from the future
  newer += frame(newerBody(9, edit)) + frame(newerBody(7, timing));
  ok = ok && emit(out + "/fuzz_segment/minor7-extra-fields.rls", newer);

  // Payload blobs, as stored, behind their reference's rawBytes and rawCrc32.
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(dir, Limits{}, &reader).message();
  if (!reader) {
    fprintf(stderr, "make_fuzz_seeds: %s\n", error.c_str());
    return 1;
  }
  const char* names[] = {"float32-gradients", "int32-recv", "bfloat16-one", "empty"};
  std::vector<PayloadRef> refs;
  reader->scan([&](RecordType type, const msgpack::object& body, const Location&) {
    if (type == RecordType::kPayloadRef) refs.push_back(body.as<PayloadRef>());
    return true;
  });
  if (refs.size() != 4) {
    fprintf(stderr, "make_fuzz_seeds: expected 4 payloads, found %zu\n", refs.size());
    return 1;
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    std::string seed;
    u32(&seed, fuzz_layout::payloadSeedWord(refs[i]));
    u32(&seed, refs[i].rawCrc32);
    seed += slurp(dir + "/" + payloadName(refs[i].file)).substr(refs[i].offset, refs[i].compressedBytes);
    ok = ok && emit(out + "/fuzz_payload/" + names[i] + ".bin", seed);
  }
  {
    // The float32 gradients again, stored byte-shuffled (format 1.8) by a writer of its own.
    const std::string shuffledDir = dir + "-shuffled";
    WriterOptions options;
    options.shuffle = WriterOptions::Shuffle::kAlways;
    std::unique_ptr<TraceWriter> shuffledWriter;
    error = TraceWriter::create(shuffledDir, manifest, options, &shuffledWriter).message();
    std::vector<uint8_t> gradient;
    Problem readProblem;
    if (!shuffledWriter || !reader->readPayload(refs[0], &gradient, nullptr) ||
        !shuffledWriter->appendPayload(refs[0], gradient.data(), gradient.size()) || !shuffledWriter->close().isOk()) {
      fprintf(stderr, "make_fuzz_seeds: the shuffled payload: %s\n", error.c_str());
      return 1;
    }
    std::unique_ptr<TraceReader> shuffledReader;
    error = TraceReader::open(shuffledDir, Limits{}, &shuffledReader).message();
    const auto ref =
        shuffledReader ? shuffledReader->payload(refs[0].commId, refs[0].op, refs[0].peer, refs[0].seq) : std::nullopt;
    if (!ref || ref->shuffle != 4) {
      fprintf(stderr, "make_fuzz_seeds: the shuffled payload was not stored shuffled\n");
      return 1;
    }
    std::string seed;
    u32(&seed, fuzz_layout::payloadSeedWord(*ref));
    u32(&seed, ref->rawCrc32);
    seed += slurp(shuffledDir + "/" + payloadName(ref->file)).substr(ref->offset, ref->compressedBytes);
    ok = ok && emit(out + "/fuzz_payload/float32-gradients-shuffled.bin", seed);
    // The same gradients in a frame with zstd's content checksum (writers before 1.9; readers still verify it).
    std::string frame(ZSTD_compressBound(gradient.size()), '\0');
    ZSTD_CCtx* cctx = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    const size_t n = ZSTD_compress2(cctx, frame.data(), frame.size(), gradient.data(), gradient.size());
    ZSTD_freeCCtx(cctx);
    if (ZSTD_isError(n)) {
      fprintf(stderr, "make_fuzz_seeds: zstd: %s\n", ZSTD_getErrorName(n));
      return 1;
    }
    seed.clear();
    u32(&seed, fuzz_layout::payloadSeedWord(refs[0]));
    u32(&seed, refs[0].rawCrc32);
    seed += frame.substr(0, n);
    ok = ok && emit(out + "/fuzz_payload/float32-gradients-zstd-checksum.bin", seed);
    // The same gradients as two frames, their content in order (format 1.10 writes one frame per MiB of payload).
    seed.clear();
    u32(&seed, fuzz_layout::payloadSeedWord(refs[0]));
    u32(&seed, refs[0].rawCrc32);
    for (const size_t half : {size_t{0}, gradient.size() / 2}) {
      const size_t bytes = half == 0 ? gradient.size() / 2 : gradient.size() - half;
      const std::string part = zstdFrameOf(gradient.data() + half, bytes);
      if (part.empty()) return 1;
      seed += part;
    }
    ok = ok && emit(out + "/fuzz_payload/float32-gradients-two-frames.bin", seed);
  }

  // A manifest of a newer minor version with keys this reader does not know.
  Manifest m = reader->manifest();
  m.version_minor = 7;
  msgpack::zone zone;
  msgpack::object obj(m, zone);
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> pk(buffer);
  pk.pack_map(obj.via.map.size + 2);
  for (uint32_t i = 0; i < obj.via.map.size; ++i) pk.pack(obj.via.map.ptr[i].key).pack(obj.via.map.ptr[i].val);
  pk.pack(std::string("future_key")).pack(std::vector<int>{1, 2, 3});
  pk.pack(std::string("future_map")).pack(std::map<std::string, double>{{"x", 1.5}});
  ok = ok && emit(out + "/fuzz_manifest/minor7-unknown-keys.msgpack", std::string(buffer.data(), buffer.size()));

  std::string cleanup = std::string("rm -rf ") + tmpl;
  if (system(cleanup.c_str()) != 0) fprintf(stderr, "make_fuzz_seeds: could not remove %s\n", tmpl);
  return ok ? 0 : 1;
}

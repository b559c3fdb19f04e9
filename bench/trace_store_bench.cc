// SPDX-License-Identifier: Apache-2.0
// trace_store_bench: what the trace store (payload/, docs/trace-format.md) costs, side by side in one run.
//
//   meta/...     metadata (Call) records: msgpack packing alone (baseline), TraceWriter::append as the caller sees
//                it (no flush), and append + flush per batch (records on disk through write(2)).
//   payload/...  TraceWriter::appendPayload + flush: raw MB/s per compression thread count and zstd level, float32
//                and bf16 gradient-like data, 64 KiB and 4 MiB payloads; compression ratio as a counter.
//   zstd/...     baselines without the writer/reader around zstd: compression with a fresh context per payload
//                (what the writer does) and with one reused context; decompression with one reused context.
//   read/...     TraceReader::scan of a metadata trace (records/s); readPayload and decodePayload (in memory) MB/s.
//
// Every writer run (each repetition, and each run Google Benchmark makes to pick an iteration count) writes into
// a fresh directory under $TMPDIR (default /tmp), removed after the run. Data is fixed-seed: N(0, 1e-3) float32
// from std::mt19937_64(seed 20261129) and libstdc++'s std::normal_distribution; bf16 = the upper 16 bits of those
// floats. Run through bench/run_trace_store_bench.sh, which records commit, device, command and date.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "ranklens/trace.h"

// ------------------------------------------------------------------------------------------------------------
// Heap allocations made by the calling thread (the writer's own threads are not counted): the benchmarks read the
// counter around their loop to report allocations per append. malloc/calloc/realloc are interposed (glibc's
// __libc_* entry points do the work) so that msgpack's sbuffer, which uses malloc, is counted as well as operator
// new. Cost: one thread-local increment per allocation, in every benchmark alike.
namespace {
thread_local uint64_t tAllocations = 0;
}
extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* p, size_t size);
void __libc_free(void* p);
void* malloc(size_t size) noexcept {
  ++tAllocations;
  return __libc_malloc(size);
}
void* calloc(size_t count, size_t size) noexcept {
  ++tAllocations;
  return __libc_calloc(count, size);
}
void* realloc(void* p, size_t size) noexcept {
  ++tAllocations;
  return __libc_realloc(p, size);
}
void free(void* p) noexcept { __libc_free(p); }
}

namespace {

namespace fs = std::filesystem;
using namespace ranklens;
using trace::RecordType;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kSeed = 20261129;
constexpr size_t kPoolBytes = 8u << 20;   // distinct data per dtype; payloads take successive slices of it
constexpr size_t kBatchBytes = 8u << 20;  // raw bytes per payload-benchmark iteration (then one flush)
constexpr uint64_t kScanRecords = 1u << 18;
constexpr int kDatatypeFloat32 = 7, kDatatypeBfloat16 = 9;  // ncclDataType_t

// ---------------------------------------------------------------------------------------------- scratch space

std::string gRoot;  // the per-process scratch directory under $TMPDIR
std::atomic<uint64_t> gRunCounter{0};

std::string freshDirectory(const char* what) {
  return gRoot + "/" + what + "-" + std::to_string(gRunCounter.fetch_add(1));
}

// Context switches of the whole process (all threads), voluntary + involuntary.
double processContextSwitches() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_nvcsw + usage.ru_nivcsw);
}

// CPU time other processes took while a benchmark's loop ran, as a share of the machine (counter others_cpu_pct):
// the dev VM is shared, and a number measured next to a compiler is not the number of an idle machine.
// System busy time from /proc/stat (clock ticks) minus this process's CPU time (getrusage).
class OtherLoad {
 public:
  OtherLoad() : busy_(systemBusySeconds()), self_(selfSeconds()), start_(Clock::now()) {}
  void report(benchmark::State& state) const {
    const double wall = std::chrono::duration<double>(Clock::now() - start_).count();
    const double others = (systemBusySeconds() - busy_) - (selfSeconds() - self_);
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    state.counters["others_cpu_pct"] = wall > 0 && cpus > 0 ? std::max(0.0, 100 * others / (wall * cpus)) : 0.0;
  }

 private:
  static double systemBusySeconds() {
    const uint64_t allocations = tAllocations;  // fopen's buffer is not the benchmark's
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (FILE* f = fopen("/proc/stat", "r")) {
      if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &system, &idle, &iowait, &irq,
                 &softirq, &steal) != 8)
        user = nice = system = irq = softirq = steal = 0;
      fclose(f);
    }
    tAllocations = allocations;
    return static_cast<double>(user + nice + system + irq + softirq + steal) /
           static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  static double selfSeconds() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
           static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
  }
  double busy_, self_;
  Clock::time_point start_;
};

trace::Manifest benchManifest() {
  trace::Manifest m;
  m.rank = 0;
  m.world_size = 1;
  m.local_rank = 0;
  m.host = "bench";
  m.mode = "record";
  m.writer = "trace_store_bench";
  return m;
}

// ------------------------------------------------------------------------------------------------------- data

events::Call makeCall(uint64_t i) {
  events::Call c;
  c.commId = i % 4;
  c.seq = i / 4;
  c.op = 0;  // AllReduce
  c.datatype = kDatatypeBfloat16;
  c.count = (1u << 20) + (i % 7) * 4096;
  c.rootOrPeer = -1;
  c.redop = 0;
  c.stream = 0x7f3a5c001200ull;
  c.groupId = 0;
  c.nranks = 64;
  c.rank = 3;
  c.bytes = c.count * 2;
  c.timeNs = 123456789012345ll + static_cast<int64_t>(i) * 1500;  // a CLOCK_MONOTONIC-sized value
  return c;
}

struct Pools {
  std::vector<uint8_t> f32, bf16;
};

const Pools& pools() {
  static const Pools p = [] {
    Pools out;
    std::mt19937_64 rng(kSeed);
    std::normal_distribution<float> normal(0.0f, 1e-3f);
    std::vector<float> values(kPoolBytes / 2);  // bf16: all of them; f32: the first half
    for (float& v : values) v = normal(rng);
    out.f32.resize(kPoolBytes);
    memcpy(out.f32.data(), values.data(), kPoolBytes);
    out.bf16.resize(kPoolBytes);
    for (size_t i = 0; i < values.size(); ++i) {
      uint32_t bits;
      memcpy(&bits, &values[i], 4);
      const uint16_t upper = static_cast<uint16_t>(bits >> 16);
      memcpy(out.bf16.data() + 2 * i, &upper, 2);
    }
    return out;
  }();
  return p;
}

enum Dtype { kF32 = 0, kBf16 = 1 };
const char* dtypeName(int d) { return d == kF32 ? "f32" : "bf16"; }
const std::vector<uint8_t>& pool(int d) { return d == kF32 ? pools().f32 : pools().bf16; }
int ncclDatatype(int d) { return d == kF32 ? kDatatypeFloat32 : kDatatypeBfloat16; }
std::string sizeName(size_t bytes) {
  return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

trace::PayloadRef makeRef(uint64_t seq, int dtype, size_t bytes) {
  trace::PayloadRef ref;
  ref.commId = 0;
  ref.seq = seq;
  ref.op = 0;
  ref.datatype = ncclDatatype(dtype);
  ref.count = bytes / (dtype == kF32 ? 4 : 2);
  ref.peer = -1;
  return ref;
}

// Closes the writer (flush, index, manifest), reports how long that took, and removes the directory.
void finishWriter(benchmark::State& state, std::unique_ptr<trace::TraceWriter>& writer, const std::string& dir) {
  const auto start = Clock::now();
  const bool ok = writer->close().isOk();
  state.counters["close_ms"] = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (!ok) state.SkipWithError(("close failed: " + writer->lastError()).c_str());
  writer.reset();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// ------------------------------------------------------------------------------------------- meta: writer side

// Baseline: what append does on the caller thread before it takes the lock (pack [type, record], copy to a string).
void BM_MetaPackOnly(benchmark::State& state) {
  uint64_t i = 0;
  const uint64_t allocsBefore = tAllocations;
  OtherLoad load;
  for (auto _ : state) {
    events::Call call = makeCall(i++);
    msgpack::sbuffer body;
    msgpack::packer<msgpack::sbuffer> packer(body);
    packer.pack_array(2);
    packer.pack(static_cast<int>(RecordType::kCall));
    packer.pack(call);
    std::string copy(body.data(), body.size());
    benchmark::DoNotOptimize(copy.data());
  }
  load.report(state);
  state.counters["records_per_s"] = benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
  state.counters["allocs_per_record"] =
      benchmark::Counter(static_cast<double>(tAllocations - allocsBefore), benchmark::Counter::kAvgIterations);
}

// Caller-side cost of TraceWriter::append (the record-mode hot path): time in append only, no flush inside the loop.
void BM_MetaAppend(benchmark::State& state) {
  const std::string dir = freshDirectory("append");
  std::string error;
  std::unique_ptr<trace::TraceWriter> writer;
  error = trace::TraceWriter::create(dir, benchManifest(), trace::WriterOptions{}, &writer).message();
  if (!writer) {
    state.SkipWithError(error.c_str());
    return;
  }
  uint64_t i = 0;
  const uint64_t allocsBefore = tAllocations;
  const double switchesBefore = processContextSwitches();
  OtherLoad load;
  for (auto _ : state) {
    bool ok = writer->append(RecordType::kCall, makeCall(i++));
    benchmark::DoNotOptimize(ok);
  }
  load.report(state);
  const uint64_t allocs = tAllocations - allocsBefore;
  state.counters["ctx_switches_per_record"] =
      benchmark::Counter(processContextSwitches() - switchesBefore, benchmark::Counter::kAvgIterations);
  (void)writer->flush();
  const trace::WriterStats stats = writer->stats();
  state.counters["records_per_s"] = benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
  state.counters["allocs_per_append"] =
      benchmark::Counter(static_cast<double>(allocs), benchmark::Counter::kAvgIterations);
  state.counters["dropped"] = static_cast<double>(stats.recordsDropped);
  finishWriter(state, writer, dir);
}

// Records on disk: `batch` appends, then flush() (returns once write(2) of all of them is done).
void BM_MetaAppendFlush(benchmark::State& state) {
  const int64_t batch = state.range(0);
  const std::string dir = freshDirectory("append-flush");
  std::string error;
  std::unique_ptr<trace::TraceWriter> writer;
  error = trace::TraceWriter::create(dir, benchManifest(), trace::WriterOptions{}, &writer).message();
  if (!writer) {
    state.SkipWithError(error.c_str());
    return;
  }
  uint64_t i = 0;
  const double switchesBefore = processContextSwitches();
  OtherLoad load;
  for (auto _ : state) {
    for (int64_t j = 0; j < batch; ++j) writer->append(RecordType::kCall, makeCall(i++));
    if (!writer->flush().isOk()) {
      state.SkipWithError(("flush failed: " + writer->lastError()).c_str());
      break;
    }
  }
  load.report(state);
  const double switches = processContextSwitches() - switchesBefore;
  const trace::WriterStats stats = writer->stats();
  state.counters["records_per_s"] = benchmark::Counter(static_cast<double>(i), benchmark::Counter::kIsRate);
  state.counters["ctx_switches_per_record"] = i ? switches / static_cast<double>(i) : 0.0;
  state.counters["dropped"] = static_cast<double>(stats.recordsDropped);
  finishWriter(state, writer, dir);
}

// ------------------------------------------------------------------------------------------ payload: writer side

// One iteration = kBatchBytes of payloads of `bytes` each, then flush.
void BM_PayloadWrite(benchmark::State& state, int threads, int level, int dtype, size_t bytes) {
  const size_t perBatch = kBatchBytes / bytes;
  const std::vector<uint8_t>& data = pool(dtype);
  const std::string dir = freshDirectory("payload");
  trace::WriterOptions options;
  options.compressionThreads = threads;
  options.zstdLevel = level;
  std::string error;
  std::unique_ptr<trace::TraceWriter> writer;
  error = trace::TraceWriter::create(dir, benchManifest(), options, &writer).message();
  if (!writer) {
    state.SkipWithError(error.c_str());
    return;
  }
  uint64_t seq = 0, allocs = 0;
  double callerSeconds = 0;
  OtherLoad load;
  for (auto _ : state) {
    for (size_t k = 0; k < perBatch; ++k) {
      const size_t offset = (seq * bytes) % data.size();
      const trace::PayloadRef ref = makeRef(seq, dtype, bytes);
      const uint64_t allocsBefore = tAllocations;
      const auto start = Clock::now();
      writer->appendPayload(ref, data.data() + offset, bytes);
      callerSeconds += std::chrono::duration<double>(Clock::now() - start).count();
      allocs += tAllocations - allocsBefore;
      ++seq;
    }
    if (!writer->flush().isOk()) {
      state.SkipWithError(("flush failed: " + writer->lastError()).c_str());
      break;
    }
  }
  load.report(state);
  const trace::WriterStats stats = writer->stats();
  state.SetBytesProcessed(static_cast<int64_t>(seq * bytes));
  state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(seq * bytes) / 1e6, benchmark::Counter::kIsRate);
  state.counters["ratio"] =
      stats.payloadCompressedBytes ? static_cast<double>(stats.payloadRawBytes) / stats.payloadCompressedBytes : 0.0;
  state.counters["caller_us_per_payload"] = seq ? callerSeconds * 1e6 / static_cast<double>(seq) : 0.0;
  state.counters["caller_allocs_per_payload"] = seq ? static_cast<double>(allocs) / static_cast<double>(seq) : 0.0;
  state.counters["dropped"] = static_cast<double>(stats.payloadsDropped);
  finishWriter(state, writer, dir);
}

// Baseline: CRC-32 + zstd compression on this thread, no queue, no files. ctx 0: what the writer's compression
// worker does per payload (create/parametrise/free a ZSTD_CCtx, zero-filled compressBound output vector);
// ctx 1: one context and one output buffer reused for every payload.
void BM_ZstdCompress(benchmark::State& state, int level, int dtype, size_t bytes, bool reuse) {
  const size_t perBatch = kBatchBytes / bytes;
  const std::vector<uint8_t>& data = pool(dtype);
  auto setup = [level](ZSTD_CCtx* cctx) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
  };
  ZSTD_CCtx* shared = ZSTD_createCCtx();
  setup(shared);
  std::vector<uint8_t> sharedOut(ZSTD_compressBound(bytes));
  uint64_t seq = 0, compressed = 0;
  OtherLoad load;
  for (auto _ : state) {
    for (size_t k = 0; k < perBatch; ++k, ++seq) {
      const uint8_t* src = data.data() + (seq * bytes) % data.size();
      benchmark::DoNotOptimize(trace::crc32Bytes(src, bytes));
      size_t n;
      if (reuse) {
        n = ZSTD_compress2(shared, sharedOut.data(), sharedOut.size(), src, bytes);
      } else {
        ZSTD_CCtx* cctx = ZSTD_createCCtx();
        setup(cctx);
        std::vector<uint8_t> out(ZSTD_compressBound(bytes));
        n = ZSTD_compress2(cctx, out.data(), out.size(), src, bytes);
        ZSTD_freeCCtx(cctx);
        benchmark::DoNotOptimize(out.data());
      }
      if (ZSTD_isError(n)) {
        state.SkipWithError(ZSTD_getErrorName(n));
        break;
      }
      compressed += n;
    }
  }
  load.report(state);
  ZSTD_freeCCtx(shared);
  state.SetBytesProcessed(static_cast<int64_t>(seq * bytes));
  state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(seq * bytes) / 1e6, benchmark::Counter::kIsRate);
  state.counters["ratio"] = compressed ? static_cast<double>(seq * bytes) / compressed : 0.0;
}

// CRC-32 alone (the writer computes it over every raw payload, the reader over every decoded one, on top of zstd's
// own content checksum): the trace format's (ISA-L), and zlib's crc32() beside it, which computed it until session
// 20 (same values).
void BM_Crc32(benchmark::State& state, int dtype, bool zlib) {
  const std::vector<uint8_t>& data = pool(dtype);
  uint64_t done = 0;
  OtherLoad load;
  for (auto _ : state) {
    if (zlib)
      benchmark::DoNotOptimize(crc32(0L, data.data(), static_cast<uInt>(data.size())));
    else
      benchmark::DoNotOptimize(trace::crc32Bytes(data.data(), data.size()));
    done += data.size();
  }
  load.report(state);
  state.SetBytesProcessed(static_cast<int64_t>(done));
  state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(done) / 1e6, benchmark::Counter::kIsRate);
}

// -------------------------------------------------------------------------------------------------- read side

struct ReadFixture {
  std::string dir;
  std::unique_ptr<trace::TraceReader> reader;
  std::vector<trace::PayloadRef> refs;
  std::vector<uint8_t> payloadFile;  // pay-000000.rlp, for the in-memory decoders
  uint64_t rawBytes = 0, compressedBytes = 0;
  std::string error;
};

// The metadata trace: kScanRecords Call records written through the writer with default options.
ReadFixture& scanFixture() {
  static ReadFixture f = [] {
    ReadFixture out;
    out.dir = gRoot + "/fixture-meta";
    std::unique_ptr<trace::TraceWriter> writer;
    out.error = trace::TraceWriter::create(out.dir, benchManifest(), trace::WriterOptions{}, &writer).message();
    if (!writer) return out;
    for (uint64_t i = 0; i < kScanRecords; ++i) {
      if (!writer->append(RecordType::kCall, makeCall(i))) {
        out.error = "record dropped while building the scan fixture";
        return out;
      }
      if (i % 4096 == 4095) writer->flush().isOk();  // keep the queue bounded
    }
    if (!writer->close().isOk()) {
      out.error = writer->lastError();
      return out;
    }
    out.error = trace::TraceReader::open(out.dir, trace::Limits{}, &out.reader).message();
    return out;
  }();
  return f;
}

// One payload trace per (level, dtype, size): kBatchBytes of payloads, one compression thread (so one payload file,
// which the in-memory decoders read whole).
ReadFixture& payloadFixture(int level, int dtype, size_t bytes) {
  static std::map<std::tuple<int, int, size_t>, ReadFixture> fixtures;
  auto key = std::make_tuple(level, dtype, bytes);
  auto it = fixtures.find(key);
  if (it != fixtures.end()) return it->second;
  ReadFixture& out = fixtures[key];
  out.dir = gRoot + "/fixture-payload-L" + std::to_string(level) + "-" + dtypeName(dtype) + "-" + sizeName(bytes);
  trace::WriterOptions options;
  options.zstdLevel = level;
  options.compressionThreads = 1;
  std::unique_ptr<trace::TraceWriter> writer;
  out.error = trace::TraceWriter::create(out.dir, benchManifest(), options, &writer).message();
  if (!writer) return out;
  const std::vector<uint8_t>& data = pool(dtype);
  for (uint64_t seq = 0; seq < kBatchBytes / bytes; ++seq)
    writer->appendPayload(makeRef(seq, dtype, bytes), data.data() + (seq * bytes) % data.size(), bytes);
  if (!writer->close().isOk()) {
    out.error = writer->lastError();
    return out;
  }
  out.error = trace::TraceReader::open(out.dir, trace::Limits{}, &out.reader).message();
  if (!out.reader) return out;
  out.refs = out.reader->payloads();
  if (out.refs.size() != kBatchBytes / bytes) {
    out.error = "fixture has " + std::to_string(out.refs.size()) + " payloads";
    out.reader.reset();
    return out;
  }
  for (const auto& ref : out.refs) {
    out.rawBytes += ref.rawBytes;
    out.compressedBytes += ref.compressedBytes;
  }
  std::ifstream in(out.dir + "/" + trace::payloadName(0), std::ios::binary);
  out.payloadFile.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out;
}

// decode false: count records only (the reader's own cost); true: also convert each Call to events::Call.
void BM_ReadScan(benchmark::State& state, bool decode) {
  ReadFixture& f = scanFixture();
  if (!f.reader) {
    state.SkipWithError(("fixture: " + f.error).c_str());
    return;
  }
  uint64_t records = 0, sum = 0;
  const trace::RecordVisitor visit = [&](RecordType type, const msgpack::object& body, const trace::Location&) {
    ++records;
    if (decode && type == RecordType::kCall) sum += body.as<events::Call>().bytes;
    return true;
  };
  const uint64_t allocsBefore = tAllocations;
  OtherLoad load;
  for (auto _ : state) {
    if (!f.reader->scan(visit)) {
      state.SkipWithError("scan reported problems");
      break;
    }
  }
  load.report(state);
  const uint64_t allocs = tAllocations - allocsBefore;
  benchmark::DoNotOptimize(sum);
  state.counters["allocs_per_record"] = records ? static_cast<double>(allocs) / static_cast<double>(records) : 0.0;
  state.counters["records_per_s"] = benchmark::Counter(static_cast<double>(records), benchmark::Counter::kIsRate);
  state.counters["records_per_scan"] =
      benchmark::Counter(static_cast<double>(records), benchmark::Counter::kAvgIterations);
}

// mode 0: TraceReader::readPayload (open + pread + decodePayload, fresh output vector per payload);
// 1: trace::decodePayload on the blob already in memory (fresh vector); 2: baseline, ZSTD_decompressDCtx with one
// reused context and one reused output buffer, no CRC; 3: baseline, mode 2 plus zlib's CRC-32 of the output (the
// checksum decodePayload computed before it used ISA-L's).
void BM_ReadPayload(benchmark::State& state, int level, int dtype, size_t bytes, int mode) {
  ReadFixture& f = payloadFixture(level, dtype, bytes);
  if (!f.reader) {
    state.SkipWithError(("fixture: " + f.error).c_str());
    return;
  }
  ZSTD_DCtx* dctx = ZSTD_createDCtx();
  std::vector<uint8_t> reused(bytes);
  uint64_t raw = 0, payloads = 0;
  const uint64_t allocsBefore = tAllocations;
  OtherLoad load;
  for (auto _ : state) {
    for (const auto& ref : f.refs) {
      bool ok;
      std::string reason;
      if (mode == 0) {
        std::vector<uint8_t> out;
        trace::Problem problem;
        ok = f.reader->readPayload(ref, &out, &problem);
        reason = problem.reason;
        benchmark::DoNotOptimize(out.data());
      } else if (mode == 1) {
        std::vector<uint8_t> out;
        ok = (reason = trace::decodePayload(f.payloadFile.data() + ref.offset, ref.compressedBytes, ref,
                                            trace::Limits{}, &out)
                           .message())
                 .empty();
        benchmark::DoNotOptimize(out.data());
      } else {
        const size_t n = ZSTD_decompressDCtx(dctx, reused.data(), reused.size(), f.payloadFile.data() + ref.offset,
                                             ref.compressedBytes);
        ok = !ZSTD_isError(n) && n == ref.rawBytes;
        if (!ok) reason = ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short output";
        if (ok && mode == 3) ok = crc32(0L, reused.data(), static_cast<uInt>(n)) == ref.rawCrc32;
        benchmark::DoNotOptimize(reused.data());
      }
      if (!ok) {
        state.SkipWithError(reason.c_str());
        break;
      }
      raw += ref.rawBytes;
      ++payloads;
    }
  }
  load.report(state);
  const uint64_t allocs = tAllocations - allocsBefore;
  ZSTD_freeDCtx(dctx);
  state.counters["allocs_per_payload"] = payloads ? static_cast<double>(allocs) / static_cast<double>(payloads) : 0.0;
  state.SetBytesProcessed(static_cast<int64_t>(raw));
  state.counters["MB_per_s"] = benchmark::Counter(static_cast<double>(raw) / 1e6, benchmark::Counter::kIsRate);
  state.counters["ratio"] = static_cast<double>(f.rawBytes) / static_cast<double>(f.compressedBytes);
}

// ----------------------------------------------------------------------------------------------- registration

std::string benchName(const std::string& prefix, int dtype, size_t bytes, int level) {
  return prefix + "/" + dtypeName(dtype) + "/" + sizeName(bytes) + "/level:" + std::to_string(level);
}

void registerAll() {
  const size_t kSizes[] = {64u << 10, 4u << 20};
  benchmark::RegisterBenchmark("meta/pack_only", BM_MetaPackOnly)->UseRealTime()->Iterations(1 << 19);
  benchmark::RegisterBenchmark("meta/append", BM_MetaAppend)->UseRealTime()->Iterations(1 << 19);
  // Fixed record counts (2^18 per run): close() rebuilds the index from the segments, so bigger runs cost more.
  for (int64_t batch : {16, 256, 4096})
    benchmark::RegisterBenchmark("meta/append_flush", BM_MetaAppendFlush)
        ->ArgName("batch")
        ->Arg(batch)
        ->UseRealTime()
        ->Iterations((1 << 18) / batch);
  for (int threads : {1, 2})
    for (int level : {-1, 1, 3})
      for (int dtype : {kF32, kBf16})
        for (size_t bytes : kSizes)
          benchmark::RegisterBenchmark(
              (benchName("payload/write", dtype, bytes, level) + "/threads:" + std::to_string(threads)).c_str(),
              BM_PayloadWrite, threads, level, dtype, bytes)
              ->UseRealTime()
              ->MinTime(0.25);
  for (int level : {-1, 1, 3})
    for (int dtype : {kF32, kBf16})
      for (size_t bytes : kSizes)
        for (bool reuse : {false, true})
          benchmark::RegisterBenchmark(
              (benchName("zstd/compress", dtype, bytes, level) + (reuse ? "/ctx:reused" : "/ctx:fresh")).c_str(),
              BM_ZstdCompress, level, dtype, bytes, reuse)
              ->UseRealTime()
              ->MinTime(0.2);
  for (int dtype : {kF32, kBf16})
    for (bool zlib : {false, true})
      benchmark::RegisterBenchmark((std::string(zlib ? "crc32_zlib/" : "crc32/") + dtypeName(dtype) + "/8MiB").c_str(),
                                   BM_Crc32, dtype, zlib)
          ->UseRealTime()
          ->MinTime(0.1);
  benchmark::RegisterBenchmark("read/scan/count", BM_ReadScan, false)->UseRealTime()->MinTime(0.2);
  benchmark::RegisterBenchmark("read/scan/decode_call", BM_ReadScan, true)->UseRealTime()->MinTime(0.2);
  const char* kModes[] = {"read/payload", "read/decode_in_memory", "zstd/decompress", "zstd/decompress_zlib_crc32"};
  for (int level : {-1, 1, 3})  // -1: payload_zstd_level's default
    for (int dtype : {kF32, kBf16})
      for (size_t bytes : kSizes)
        for (int mode : {0, 1, 2, 3})
          benchmark::RegisterBenchmark(benchName(kModes[mode], dtype, bytes, level).c_str(), BM_ReadPayload, level,
                                       dtype, bytes, mode)
              ->UseRealTime()
              ->MinTime(0.2);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ranklens-trace-bench-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (mkdtemp(buffer.data()) == nullptr) {
    fprintf(stderr, "trace_store_bench: cannot create %s: %s\n", pattern.c_str(), strerror(errno));
    return 1;
  }
  gRoot = buffer.data();
  benchmark::AddCustomContext("scratch_dir", gRoot);
  benchmark::AddCustomContext("zstd_version", ZSTD_versionString());
  benchmark::AddCustomContext("data", "float32 N(0, 1e-3), mt19937_64 seed " + std::to_string(kSeed) +
                                          "; bf16 = upper 16 bits of those floats");
  registerAll();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  std::error_code ec;
  fs::remove_all(gRoot, ec);
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// The RankLens trace store: one directory per rank holding a manifest, append-only segment files of checksummed
// msgpack records, payload files of zstd frames, and an index that can always be rebuilt from the segments.
// The format is specified in docs/trace-format.md; this header is its C++ face.
//
// Writer: callers hand records to a bounded in-memory queue and never wait for I/O (unless the back-pressure policy
// says so); one thread writes, worker threads compress payloads. Everything accepted before a completed flush() is
// in the files and survives SIGKILL of the process.
// Reader: strict and bounded. Every length and offset is checked against the file and the configured limits; a
// corrupt or truncated file yields a Problem naming the file, offset and reason, never a crash; what precedes the
// damage stays readable.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/status.h"

namespace ranklens {
namespace trace {

constexpr int kFormatMajor = 1;
constexpr int kFormatMinor = 13;  // 1.1: manifest counters; 1.2: Call.hostNs, GroupEnd.hostNs; 1.3: CommBinding;
                                  // 1.4: Timing.clock; 1.5: Timing.clock kClockEstimated in replay traces;
                                  // 1.6: Timing.gapNs; 1.7: manifest cpu_model, cpus; 1.8: PayloadRef.shuffle;
                                  // 1.9: payload blobs without zstd's content checksum; 1.10: a payload blob may be
                                  // several zstd frames (one per MiB), their content in order; 1.11: manifest
                                  // shared_gpu; 1.12: (spec clarifications); 1.13: manifest imported,
                                  // FlightRecorderEntry records
constexpr const char* kFormatName = "ranklens-trace";
constexpr uint32_t kSegmentMagic = 0x47534c52;  // "RLSG" little-endian
constexpr uint32_t kPayloadMagic = 0x59504c52;  // "RLPY" little-endian
constexpr size_t kFileHeaderBytes = 16;         // magic u32, major u16, minor u16, file index u32, reserved u32
constexpr size_t kFrameHeaderBytes = 8;         // body length u32, CRC-32 (zlib) of the body u32
constexpr uint32_t kMaxFileIndex = 999999;      // file names carry 6 decimal digits

// Record types; the values are on disk and never reused. 1..5 are the virtual communication events of events.h.
enum class RecordType : int {
  kCommInit = 1,
  kCommEnd = 2,
  kCall = 3,
  kGroupEnd = 4,
  kStage = 5,
  kGroupBegin = 6,
  kTiming = 7,
  kPayloadRef = 8,
  kEdit = 9,
  kCommBinding = 10,
  kFlightRecorderEntry = 11,
};
const char* recordTypeName(RecordType type);

struct GroupBegin {
  uint64_t groupId = 0;
  int64_t timeNs = 0;
  MSGPACK_DEFINE_ARRAY(groupId, timeNs)
};

// GPU duration of one call (or of a group on one stream: seq is then the group's first call).
// Timing.clock: CUDA events around the call (the interval from the stream reaching it, NCCL's launch included when
// the stream was idle), or the GPU timestamps of NCCL's kernel channels (kernel time only); in a replay's own trace
// the clock of the recorded duration it held, or the estimator's duration (no recorded one: timing: estimated,
// on_mismatch: estimate).
constexpr int kClockEvents = 0;
constexpr int kClockKernel = 1;
constexpr int kClockEstimated = 2;

struct Timing {
  uint64_t commId = 0, seq = 0;
  int op = 0;
  uint64_t stream = 0, groupId = 0;
  int64_t startNs = 0;     // CLOCK_MONOTONIC of the submitting host thread
  int64_t durationNs = 0;  // how long the call held its stream (GPU time; see docs/trace-format.md)
  bool captured = false;   // recorded inside a CUDA graph capture
  int peer = -1;           // Send/Recv: the peer (their sequences are per peer)
  int64_t eventNs = -1;    // 1.1: the CUDA-event interval around the call; -1 unknown (kernel clock)
  int clock = 0;           // 1.4: where durationNs comes from: kClockEvents, kClockKernel, kClockEstimated (1.5)
  // 1.6: GPU time from the end of the communicator's previous collective (seq - 1, outside groups) to this call's
  // start (events: on its stream; kernel clock: of NCCL's kernel); -1 unknown. The rank's own pace between its
  // collectives (peer_pacing).
  int64_t gapNs = -1;
  MSGPACK_DEFINE_ARRAY(commId, seq, op, stream, groupId, startNs, durationNs, captured, peer, eventNs, clock, gapNs)
};

// The Timing record of a call, before its duration is known: the call's identity (communicator, sequence, op,
// stream, group, peer) and its submission time.
inline Timing timingOf(const events::Call& call) {
  Timing t;
  t.commId = call.commId;
  t.seq = call.seq;
  t.op = call.op;
  t.stream = call.stream;
  t.groupId = call.groupId;
  t.startNs = call.timeNs;
  t.peer = events::isP2p(static_cast<events::Op>(call.op)) ? call.rootOrPeer : -1;
  return t;
}

// Whether a call's Timing record can carry a gapNs: a collective outside groups, not captured into a CUDA graph.
inline bool chainsGap(const Timing& t) { return t.groupId == 0 && t.peer < 0 && !t.captured; }

// Where a call's received bytes are stored. A later reference to the same call (commId, kind, peer, seq; see
// docs/trace-format.md) supersedes an earlier one: that is how edits work, the original blob stays where it was.
struct PayloadRef {
  uint64_t commId = 0, seq = 0;
  int op = 0, datatype = 0;
  uint64_t count = 0;     // elements in the blob
  uint64_t rawBytes = 0;  // decompressed size
  uint32_t file = 0;      // payload file index: pay-<file>.rlp
  uint64_t offset = 0;    // of the zstd frame in that file
  uint64_t compressedBytes = 0;
  uint32_t rawCrc32 = 0;  // zlib CRC-32 of the decompressed bytes
  int zstdLevel = 0;
  int peer = -1;    // for P2P receives
  int shuffle = 0;  // 0, or the element width whose byte planes the blob stores (shuffleBlocks)
  MSGPACK_DEFINE_ARRAY(commId, seq, op, datatype, count, rawBytes, file, offset, compressedBytes, rawCrc32, zstdLevel,
                       peer, shuffle)
};

// Byte shuffling (format 1.8): a payload is cut into blocks of kShuffleBlockBytes (the last one shorter), and each
// block is stored as planes: byte 0 of each of its elements, then byte 1, ..., then the block's last bytes that make
// no whole element, as they are. Numbers compress faster and smaller so (the exponent bytes of floating-point values
// sit together, noisy low mantissa bytes apart): real fp32 gradients at zstd level -1, 2.5-3.5x faster and 1.45-1.5x
// smaller (bench/results/record/README.md). rawCrc32 is always of the bytes as the program had them.
constexpr size_t kShuffleBlockBytes = 256u << 10;
inline bool validShuffle(int width) { return width == 0 || width == 2 || width == 4 || width == 8; }
// In place, raw -> stored and back; `width` 2, 4 or 8 (anything else leaves the bytes alone).
void shuffleBlocks(uint8_t* data, size_t bytes, int width);
void unshuffleBlocks(uint8_t* data, size_t bytes, int width);
// shuffleBlocks from `src` into `dst` (not overlapping), returning the CRC-32 of `src`, in one pass: the writer's copy
// of a payload is also its byte-plane pass and its checksum (each block checksummed in cache). Width 0 or invalid: a
// copy and the CRC-32. `crc`: the CRC-32 of the bytes before `src` (a payload checksummed in pieces).
uint32_t shuffleCopyAndChecksum(uint8_t* dst, const uint8_t* src, size_t bytes, int width, uint32_t crc = 0);
// zstd's match finder for payloads stored as planes at the fast levels (below 1; payload_zstd_level is -1 by
// default): a 64-entry hash table and matches of at least 7 bytes. What planes repeat is long runs (zero planes, zero
// rows), which zstd's repeat-offset check finds without the table; the short matches a full table finds in an
// exponent plane are what cost most of the time. On bf16-valued fp32 as planes (one thread, level -1;
// bench/payload_codec_choices compares them): compression 4.3x faster, decompression 2.9x, the blob 18-21% larger.
// Readers need nothing: a zstd frame says nothing of how its matches were found.
constexpr int kPlanesHashLog = 6, kPlanesMinMatch = 7;
inline bool planesMatchFinder(int level) { return level < 1; }

// Provenance of an edit made by a tool (rlpayload inject).
struct Edit {
  uint64_t commId = 0, seq = 0;
  std::string tool, action, detail, user;
  int64_t timeNs = 0;      // CLOCK_REALTIME
  int op = -1, peer = -1;  // identify the edited call (P2P sequences are per peer)
  MSGPACK_DEFINE_ARRAY(commId, seq, tool, action, detail, user, timeNs, op, peer)
};

// Replay traces: the recorded communicator a replayed one stands for, once final (at its first call).
struct CommBinding {
  uint64_t commId = 0;          // the replayed communicator
  uint64_t recordedCommId = 0;  // its counterpart in the recording (a recorded commId, so uint64 like it)
  std::string rule;             // "creation": bound when created, kept; "first call": rebound by its first call
  int64_t timeNs = 0;
  MSGPACK_DEFINE_ARRAY(commId, recordedCommId, rule, timeNs)
};

// 1.13: one entry of a PyTorch Flight Recorder dump that `ranklens import flight-recorder` turned into this trace,
// written after the Call it became (op -1: an entry that is no NCCL call, e.g. "nccl:coalesced"). It keeps what the
// dump says in the dump's own terms (state, sequence numbers, shapes, the Python stack) and names, in `unknown`, the
// fields of its Call that the dump does not give and the importer filled with a stand-in.
struct FlightRecorderEntry {
  uint64_t commId = 0, seq = 0;
  int op = -1, peer = -1;
  int64_t recordId = -1, collectiveSeqId = 0, p2pSeqId = 0, opId = 0;
  std::string profilingName, pgName, pgDesc;
  std::string state;          // scheduled | started | completed
  int64_t timeCreatedNs = 0;  // CLOCK_REALTIME (the dump's time_created_ns)
  int64_t durationNs = -1;    // the dump's duration_ms (TORCH_NCCL_ENABLE_TIMING=1), -1 none
  int64_t timeoutMs = 0;
  bool isP2p = false;
  std::string inputSizes, outputSizes, inputDtypes, outputDtypes;  // as Python prints them: "[[1024]]", "Float"
  std::string frames;   // "#0 all_reduce from .../distributed_c10d.py:2696\n#1 ..." (innermost first)
  std::string unknown;  // comma-separated Call fields not from the dump: count, datatype, redop, root, ...
  MSGPACK_DEFINE_ARRAY(commId, seq, op, peer, recordId, collectiveSeqId, p2pSeqId, opId, profilingName, pgName, pgDesc,
                       state, timeCreatedNs, durationNs, timeoutMs, isP2p, inputSizes, outputSizes, inputDtypes,
                       outputDtypes, frames, unknown)
};

struct Manifest {
  std::string format = kFormatName;
  int version_major = kFormatMajor, version_minor = 0;  // a missing key reads as 0; writers write kFormatMinor
  int rank = -1, world_size = -1, local_rank = -1;
  std::string host;
  int64_t pid = 0;
  std::string gpu_name, gpu_uuid;
  int nccl_version = 0;
  std::string mode, writer;
  int64_t start_time_ns = 0, end_time_ns = 0;  // CLOCK_REALTIME
  std::map<std::string, std::string> env;      // the launch variables present (docs/trace-format.md lists them)
  bool closed = false;                         // false after a crash: counters below may be stale
  uint64_t records_written = 0, records_dropped = 0;
  uint64_t payloads_written = 0, payloads_dropped = 0;
  uint64_t payload_raw_bytes = 0, payload_compressed_bytes = 0;
  uint32_t segments = 0, payload_files = 0;
  std::map<std::string, uint64_t> counters;  // 1.1: the writing library's own counters (docs/trace-format.md)
  // 1.7: the host's processor ("model name" in /proc/cpuinfo, "" unknown) and the CPUs this process may run on (0
  // unknown): a host-bound step runs at its machine's speed, so a replay elsewhere is compared knowing it.
  std::string cpu_model;
  int cpus = 0;
  // 1.11: the job's ranks shared GPUs (`ranklens record --share-gpu`): its values and calls are a real run's, its
  // durations are not those of a rank with a GPU of its own.
  bool shared_gpu = false;
  // 1.13: where a trace that no recording wrote came from, e.g. {"from": "flight-recorder", "file": ..., "version":
  // "2.10", "missing": "payloads, streams, ..."}; empty for recordings.
  std::map<std::string, std::string> imported;
  MSGPACK_DEFINE_MAP(format, version_major, version_minor, rank, world_size, local_rank, host, pid, gpu_name, gpu_uuid,
                     nccl_version, mode, writer, start_time_ns, end_time_ns, env, closed, records_written,
                     records_dropped, payloads_written, payloads_dropped, payload_raw_bytes, payload_compressed_bytes,
                     segments, payload_files, counters, cpu_model, cpus, shared_gpu, imported)
};

// Manifest::counters that a reader other than the writing recorder looks up (`ranklens record`'s summary, replay's
// refusal of a partly recorded trace). docs/trace-format.md lists every counter.
namespace counter {
inline constexpr const char kPayloadsSkippedStagingFull[] = "payloads_skipped_staging_full";
inline constexpr const char kPayloadsSkippedTooLarge[] = "payloads_skipped_too_large";
inline constexpr const char kPayloadsSkippedCaptured[] = "payloads_skipped_captured";
inline constexpr const char kPayloadCopyFailures[] = "payload_copy_failures";
inline constexpr const char kStagingWaits[] = "staging_waits";
inline constexpr const char kStagingWaitNs[] = "staging_wait_ns";
inline constexpr const char kTimingErrors[] = "timing_errors";
inline constexpr const char kKernelClockUnmatched[] = "kernel_clock_unmatched";
inline constexpr const char kKernelClockIncomplete[] = "kernel_clock_incomplete";
inline constexpr const char kCallsUnrecorded[] = "calls_unrecorded";
// The job's GPU memory as the recorder sampled it (replay sizes payload_device_bytes: auto from them).
inline constexpr const char kDeviceMemoryTotal[] = "device_memory_total_bytes";
inline constexpr const char kDeviceMemoryLeastFree[] = "device_memory_least_free_bytes";
// The compression threads' work (recent writers, compressionLoad): how many, how long they had payloads,
// and each stage's wall and thread CPU time, in the order copy, compress, write.
inline constexpr const char kPayloadThreads[] = "payload_threads";
inline constexpr const char kPayloadActiveNs[] = "payload_active_ns";
struct StageCounters {
  const char* wallNs;
  const char* cpuNs;
};
inline constexpr StageCounters kPayloadStages[] = {{"payload_copy_ns", "payload_copy_cpu_ns"},
                                                   {"payload_compress_ns", "payload_compress_cpu_ns"},
                                                   {"payload_write_ns", "payload_write_cpu_ns"}};
}  // namespace counter

// A counter of the manifest, or nullopt where the writing library did not set it (older writers, other modes).
std::optional<uint64_t> counterValue(const Manifest& manifest, const char* name);

// What to change where staging lost payloads: the recorder's WARN at the end and `ranklens record`'s summary say it.
namespace advice {
inline constexpr const char kStagingFull[] =
    "raise RANKLENS_STAGING_BYTES, set RANKLENS_STAGING_FULL=wait to keep every one (the job then waits for room), or "
    "store fewer steps whole (RANKLENS_PAYLOAD_STEPS)";
inline constexpr const char kStagingTooSmall[] = "raise RANKLENS_STAGING_BYTES above the largest message to keep them";
}  // namespace advice

// The payloads a recording meant to store and did not, by reason (its counters above and payloads_dropped), e.g.
// {"for a full staging", 41}; reasons with none left out. A value replay gives those calls the fill semantics.
std::vector<std::pair<const char*, uint64_t>> payloadsNotStored(const Manifest& manifest);

// What a recording's compression threads did, from its payload_* counters (writers that count them; known false
// otherwise): the time each stage took in all, and how busy the threads were while payloads were in their hands. Once
// staging is full they bound a full-payload recording.
struct CompressionLoad {
  bool known = false;
  uint64_t threads = 0;
  double copySeconds = 0, compressSeconds = 0, writeSeconds = 0;  // wall, summed over the threads
  double cpuSeconds = 0;                                          // the three stages' thread CPU time
  double activeSeconds = 0;    // while the threads had payloads queued or in work (gaps with none left out)
  double busyShare = 0;        // the stages' wall time over threads x activeSeconds (0..1)
  double cpuSecondsPerGB = 0;  // of payload (payload_raw_bytes); 0 below kBytesForARate
  // Payload bytes below which CPU per GB is left out: a few KiB of control values would read as 100 s per GB.
  static constexpr uint64_t kBytesForARate = 64u << 20;
};
CompressionLoad compressionLoad(const Manifest& manifest);

// The process settings a launcher gives each rank (torchrun: OMP_NUM_THREADS=1) that change its speed: kept in the
// manifest, and restored by `ranklens replay --trace` where the caller sets none (a rank started alone would run with
// every core as OpenMP threads).
constexpr const char* kProcessSettingVariables[] = {"OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_DEVICE_MAX_CONNECTIONS",
                                                    "PYTORCH_CUDA_ALLOC_CONF", "CUBLAS_WORKSPACE_CONFIG"};
// The launch variables worth keeping (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_*, TORCH_*, NCCL_*, framework layout...)
// and kProcessSettingVariables.
std::map<std::string, std::string> captureEnvironment();
// This process's host: name, processor model and the CPUs it may run on (Manifest host, cpu_model, cpus).
void describeHost(Manifest* manifest);
// This host's physical memory in bytes (0 when unknown).
uint64_t hostMemoryBytes();
// This host's memory: what new allocations can still take (MemAvailable in /proc/meminfo) and all of it. False when
// unknown. The host devices report it as their "device" memory (they keep everything in host memory).
bool hostMemoryInfo(uint64_t* availableBytes, uint64_t* totalBytes);
// "" when both manifests name the same processor, CPU count and GPU (or a side does not say); else what differs,
// e.g. "CPUs 16 against 32".
std::string machineDifference(const Manifest& recorded, const Manifest& replayed);
// Why a replay's step times say nothing of how faithfully it reproduced the recorded ones: the replay ran on the host
// device or at structure fidelity (nothing held), the recorded ranks shared a GPU, or the machines differ in GPU model
// or host (a host-bound step runs at its machine's speed). Empty when they are comparable. `brief` fits a table
// cell, `detail` a sentence.
struct Incomparable {
  std::string brief, detail;
};
std::vector<Incomparable> stepTimeIncomparable(const Manifest& recorded, const Manifest& replayed);
uint32_t crc32Bytes(const void* data, size_t size);  // CRC-32 as zlib computes it (ISA-L), any size
std::string segmentName(uint32_t index);             // seg-000000.rls
std::string payloadName(uint32_t index);             // pay-000000.rlp

// A record's frame body: the msgpack array [type, record] (docs/trace-format.md, "Segment files").
template <typename Record>
void packRecordBody(msgpack::sbuffer* out, RecordType type, const Record& record) {
  msgpack::packer<msgpack::sbuffer> packer(*out);
  packer.pack_array(2);
  packer.pack(static_cast<int>(type));
  packer.pack(record);
}

// ------------------------------------------------------------------------------------------------------ writer

enum class BackPressure { kDrop, kWait };

struct WriterOptions {
  size_t queueBytes = 64u << 20;  // accepted but not yet written (payloads count their raw size)
  size_t recordReserveBytes = 0;  // part of queueBytes payloads may not use: records still fit when payloads stall
  BackPressure policy = BackPressure::kDrop;
  int compressionThreads = 2;
  int zstdLevel = 3;
  // Payloads of 2-, 4- and 8-byte elements as byte planes (shuffleBlocks): never, always, or (kAuto) when a sample
  // spread over the payload (at least 64 KiB of it) compresses in less CPU time as planes than as it is: bf16-valued
  // fp32 gradients do (3-4x faster, 1.3x smaller), dense noise does not (zstd stores it almost raw and fast as it is;
  // as planes 10x slower for about 10%).
  enum class Shuffle { kOff, kAuto, kAlways };
  Shuffle shuffle = Shuffle::kOff;
  uint64_t segmentBytes = 64ull << 20;     // roll over to a new segment file beyond this
  uint64_t payloadFileBytes = 1ull << 30;  // and to a new payload file beyond this
  uint32_t maxRecordBytes = 1u << 20;      // larger records are refused (counted as dropped)
};

// Compression threads for a recording (payload_threads: 0): half of this rank's share of the `cpus` it may run on,
// 2..8; 2 when only control values up to 1 MiB are stored (`payloads: small`): they take little CPU, and each thread
// that takes a payload opens a payload file of its own. GPT-2 small DDP recorded with every payload on a 16-core H200
// host (one rank) ran at 1.06-1.26x the job's step time with 8 threads and 1.03x with 12 (steps 10-29).
int autoCompressionThreads(int cpus, int localRanks, bool controlValuesOnly = false);

struct WriterStats {
  uint64_t recordsAccepted = 0, recordsWritten = 0, recordsDropped = 0;
  uint64_t payloadsAccepted = 0, payloadsWritten = 0, payloadsDropped = 0;
  uint64_t payloadRawBytes = 0, payloadCompressedBytes = 0;
  uint64_t payloadBuffersReused = 0;  // payload copies made into a kept buffer (1 MiB and larger)
};

class TraceWriter {
 public:
  // Creates `rankDir` (and parents); fails if it already holds a trace.
  static Status create(const std::string& rankDir, const Manifest& manifest, const WriterOptions& options,
                       std::unique_ptr<TraceWriter>* writer);
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Queue a record; false when dropped (queue full under kDrop, record too large, writer closed).
  template <typename Record>
  bool append(RecordType type, const Record& record) {
    // One packing buffer per thread: no allocation beyond the record's own bytes on the caller's hot path.
    static thread_local msgpack::sbuffer body(256);
    body.clear();
    packRecordBody(&body, type, record);
    return enqueueRecord(std::string(body.data(), body.size()));
  }
  // Queue a payload: `data` is copied; compression and the PayloadRef record follow on other threads.
  // `ref` supplies commId/seq/op/datatype/count/peer; the storage fields are filled in by the writer.
  bool appendPayload(const PayloadRef& ref, const void* data, size_t bytes);
  // Same, with its own back-pressure policy (record mode: records never wait, its payload thread may).
  bool appendPayload(const PayloadRef& ref, const void* data, size_t bytes, BackPressure policy);
  // The same without copying on the caller's thread: `data` stays readable until `release` is called, once, by a
  // compression worker when it has copied the bytes out (ahead of any compression), or here at once when the payload
  // is refused (false). Record mode hands its staging memory over so: the copy out of it is spread over the workers
  // and is also their byte-plane pass.
  bool appendPayloadBorrowed(const PayloadRef& ref, const void* data, size_t bytes, BackPressure policy,
                             std::function<void()> release);
  // Waits until everything accepted before the call is written to the files (write(2) done): a SIGKILL after
  // flush() returns loses none of it. Fails with the first write that failed (lastError() keeps its message).
  Status flush();
  // flush(), then the index and the final manifest. Idempotent; the destructor calls it.
  Status close();
  WriterStats stats() const;
  // Sets a named counter of the manifest (the final manifest, written by close(), carries it).
  void setCounter(const std::string& name, uint64_t value);
  // Edits the manifest that close() writes (e.g. fields learnt after the first record).
  void updateManifest(const std::function<void(Manifest*)>& edit);
  // The first write that failed ("" while none has): the trace on disk is incomplete from there.
  std::string lastError() const;
  const std::string& directory() const;

 private:
  struct Impl;
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  bool enqueueRecord(std::string&& body);
  std::unique_ptr<Impl> impl_;
};

// ------------------------------------------------------------------------------------------------------ reader

struct Limits {
  uint32_t maxRecordBytes = 16u << 20;     // a frame claiming more is corrupt
  uint64_t maxPayloadBytes = 16ull << 30;  // a payload claiming more (declared or produced) is refused
  uint32_t maxFiles = 1u << 20;            // segment/payload files considered
};

struct Problem {
  std::string file;     // path
  uint64_t offset = 0;  // byte offset of the damaged frame/blob
  std::string reason;
  bool truncated = false;        // the file ends inside a frame (typical of a crash), as opposed to corrupt bytes
  bool skipped = false;          // a malformed record, skipped: the records after it are still read
  std::string describe() const;  // "<file>: offset <n>: <reason>"
};

// The largest index.msgpack that segments of `segmentBytes` bytes in all can need (an entry per record, and no
// entry encodes to more than 8 times its frame's size): a larger one is not the writer's, so readers rebuild the
// index instead of reading it whole (a sparse or hostile file of gigabytes).
uint64_t indexByteLimit(uint64_t segmentBytes);

// The first problem after which records are lost (damage, not a skipped malformed record); nullptr when none.
const Problem* firstLoss(const std::vector<Problem>& problems);

struct Location {
  uint32_t segment = 0;
  uint64_t offset = 0;  // of the frame header
};

// Parse a whole segment image. Calls `visit(type, body, location)` for every intact record in order (return false
// from visit to stop). Returns false with `problem` set at the first damaged frame; records before it were visited.
using RecordVisitor = std::function<bool(RecordType, const msgpack::object&, const Location&)>;
bool parseSegment(const uint8_t* data, size_t size, uint32_t segmentIndex, const std::string& name,
                  const Limits& limits, const RecordVisitor& visit, Problem* problem);
// Whether a record of a known type is well formed (docs/trace-format.md, "Record types"): every listed field of the
// right type and width, every str valid UTF-8 and no bin. The failure names the field. Ok for unknown types.
Status recordWellFormed(RecordType type, const msgpack::object& record);
// Decode one payload blob (a zstd frame) with every bound checked against `ref` and `limits`.
Status decodePayload(const uint8_t* data, size_t size, const PayloadRef& ref, const Limits& limits,
                     std::vector<uint8_t>* out);
// The same into memory the caller owns, `outBytes` long (it must be ref.rawBytes): no allocation, no extra copy.
Status decodePayloadInto(const uint8_t* data, size_t size, const PayloadRef& ref, const Limits& limits, uint8_t* out,
                         size_t outBytes);
// The same, reading the blob piece by piece through `read` (offset within the blob, destination, length: false when it
// cannot), `chunkBytes` at a time: each piece is decompressed straight into `out` and its output checksummed while
// both are still in the processor's cache. For blobs far larger than the cache this moves each byte through memory
// twice instead of five times (read into a buffer, out of it, out written, out checksummed). Accepts exactly what
// decodePayloadInto accepts (the reasons may be worded otherwise).
using BlobSource = std::function<bool(uint64_t offset, uint8_t* into, size_t bytes)>;
Status decodePayloadStreaming(const BlobSource& read, size_t size, const PayloadRef& ref, const Limits& limits,
                              uint8_t* out, size_t outBytes, size_t chunkBytes);
// Parse a manifest image (msgpack map); accepts any 1.x minor version.
Status parseManifest(const uint8_t* data, size_t size, Manifest* out);

// Rewrites index.msgpack atomically from the segments (after an edit, or to repair). When the scan finds damage it
// removes the index instead, so that every reader scans and reports the damage.
Status rebuildIndex(const std::string& rankDir, const Limits& limits);

class TraceReader {
 public:
  // Opens a rank directory: manifest, segment list, index (loaded if consistent with the segments, else rebuilt
  // by scanning). Fails only if the directory or its manifest is unusable. Damage found while listing or
  // rebuilding becomes problems(); scan() reads everything and reports all of it (verification scans).
  static Status open(const std::string& rankDir, const Limits& limits, std::unique_ptr<TraceReader>* reader);
  ~TraceReader();

  const Manifest& manifest() const;
  const std::string& directory() const;
  // Damage found so far (truncations, corruption), in file order.
  const std::vector<Problem>& problems() const;
  bool indexRebuilt() const;
  // The version of the rank directory (docs/trace-format.md): the highest minor version of its manifest and of every
  // segment and payload file header of major version 1 (an edit by a later tool adds files of its own version and
  // leaves the manifest alone). Above kFormatMinor, this reader skips fields and records it does not know.
  int directoryVersionMinor() const;

  // Streams every intact record of every segment in order.
  bool scan(const RecordVisitor& visit);
  // Random access through the index. A call is identified by (commId, op, peer, seq): collectives share one
  // sequence per communicator (pass any collective op and peer -1), Send and Recv have one per peer.
  // The last PayloadRef for a call wins.
  std::optional<events::Call> call(uint64_t commId, int op, int peer, uint64_t seq);
  std::optional<PayloadRef> payload(uint64_t commId, int op, int peer, uint64_t seq) const;
  std::vector<PayloadRef> payloads() const;  // the effective reference of each call, in (comm, kind, peer, seq) order
  bool readPayload(const PayloadRef& ref, std::vector<uint8_t>* out, Problem* problem);
  // Into `out`, `outBytes` long (ref.rawBytes): value replay decodes straight into its pinned staging memory. A blob
  // over kStreamingBlobBytes is read and decoded piece by piece (decodePayloadStreaming).
  bool readPayload(const PayloadRef& ref, uint8_t* out, size_t outBytes, Problem* problem);
  static constexpr size_t kStreamingBlobBytes = 1u << 20, kStreamingPieceBytes = 256u << 10;
  uint32_t segmentCount() const;

 private:
  struct Impl;
  friend Status rebuildIndex(const std::string& rankDir, const Limits& limits);
  // Opens ref's payload file with its header and the blob's bounds checked: the descriptor, or -1 with `problem` set.
  int openBlob(const PayloadRef& ref, std::string* path, Problem* problem);
  // Reads ref's blob (file, header and bounds checked) and hands it to `decode`.
  using BlobDecoder = std::function<Status(const uint8_t* blob, size_t size)>;
  bool readBlob(const PayloadRef& ref, Problem* problem, const BlobDecoder& decode);
  explicit TraceReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Edits a payload in place without losing anything: appends the new bytes as a new blob (in a new payload file,
// so existing files are only ever appended to), then a PayloadRef that supersedes `original` and an Edit record
// (provenance) to the last segment, then rewrites the index atomically. A crash midway leaves either the old or the
// new value readable. `bytes` must be a whole number of elements of original.datatype; the new reference's count
// and rawBytes follow it.
Status appendEditedPayload(const std::string& rankDir, const PayloadRef& original, const void* data, size_t bytes,
                           const Edit& edit, int zstdLevel);

// For tests only: called after each durable step of appendEditedPayload ("payload": the blob written, "reference":
// the reference appended), so that a test can end the process there as a kill would and check what verify says of
// the trace it leaves. Null (the default): nothing is called.
using EditInterruptHook = void (*)(const char* step);
void setEditInterruptHookForTesting(EditInterruptHook hook);

// Written into a rank directory by an in-place edit before it changes anything, removed when the edit is whole: its
// presence means an edit was interrupted ("segment <name> <size before>", "payload <new file>", "call <call>" lines).
constexpr const char* kEditJournal = "edit-journal";

// An interrupted in-place edit, read from its journal. Not damage: the trace holds either the old value or the new
// one, whole; but its counters disagree with its files until the edit is rolled back (or rolled back and redone).
struct InterruptedEdit {
  std::string journal;  // the journal's path
  std::string call, segment, payload;
  uint64_t segmentBytes = 0;  // the last segment's size before the edit
  // "<journal>: interrupted edit of <call> (...), not damage: ... To roll it back, truncate ... ; to finish it, ..."
  std::string describe() const;
};
// True, with *edit filled, when `rankDir` holds an edit journal.
bool findInterruptedEdit(const std::string& rankDir, InterruptedEdit* edit);

// Whether `dir` is a rank directory holding a trace: its manifest.msgpack exists (also after a crashed writer).
// TraceWriter::create never writes into one.
bool holdsTrace(const std::string& dir);
// The rank directories of a trace (a rank directory itself, or a directory of rank<R>/ directories).
std::vector<std::string> rankDirectories(const std::string& traceDir);
// The rank<R> entries of a trace root that rankDirectories leaves out or cannot tell apart, each with why: not a
// directory, unreadable, a symlink loop, no manifest.msgpack; and two entries naming one rank (rank0/ and rank00/),
// which no reader may choose between. Empty for a rank directory itself or a trace without such entries.
struct RankDirectoryTrouble {
  int rank = -1;
  std::string path;
  std::string reason;      // "<path>: ..." with what the user can do
  bool duplicate = false;  // another entry names the same rank
};
std::vector<RankDirectoryTrouble> rankDirectoryTrouble(const std::string& traceDir);
// The one rank directory a trace argument names: `path` itself when it holds a manifest, else its rank<rank> child
// (rank >= 0), else its only rank directory (rank < 0). Otherwise a failure "<path>: ..." with the ranks recorded;
// callers add the fix in their own terms.
Status resolveRankDirectory(const std::string& path, int rank, std::string* rankDir);

}  // namespace trace
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// The config module owns every knob a user sets and every environment variable RankLens reads from the job's
// launcher: built-in defaults < YAML file named by RANKLENS_CONFIG < RANKLENS_* environment variables, grouped by
// what they govern (common, record, replay). It calls nothing of RankLens's but ranklens/status.h and
// ranklens/shown_value.h (the rest of the tree calls it), and yaml-cpp, whose exceptions stop here: every failure
// comes back as a Status whose message names its source (file:line:col for YAML, the variable name for the
// environment) and the fix.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ranklens/status.h"

namespace ranklens {
namespace config {

enum class Mode { kReplay, kRecord };
enum class Fidelity { kStructure, kTiming, kValue };
// What a collective writes into its receive buffer when no recorded payload is available.
enum class Fill { kClone, kKeep, kZero, kPoison };
// Which implementation carries stream-side effects: the GPU, or host memory (tests, machines without a GPU).
enum class DeviceKind { kAuto, kCuda, kHost };
// Record mode: which received buffers are captured.
enum class Payloads { kNone, kSmall, kAll };
// Record mode: what happens to a payload when pinned staging memory is full.
enum class StagingFull { kSkip, kWait };
// Record mode: payload bytes stored as byte planes (trace::PayloadRef.shuffle) or as they are.
enum class PayloadShuffle { kAuto, kOn, kOff };
// Record mode: where a call's duration comes from (trace::Timing.clock).
enum class TimingClock { kEvents, kKernel };
// Record: calls captured into a CUDA graph are timed at a launch of the graph (event nodes in it), or not at all.
enum class CapturedTiming { kEvents, kOff };
enum class CopyPriority { kHigh, kStream };
// Replay: what happens to a call that does not match the recording.
enum class OnMismatch { kError, kWarn, kEstimate };
// Replay: what happens to a call whose recorded payload, which the fidelity restores, cannot be read.
enum class OnPayloadError { kError, kWarn };
// Replay of a trace imported from PyTorch Flight Recorder dumps, at the call the dump left started or scheduled (the
// hang): fail it with a report (stop), report and block the calling thread for a debugger (wait), or report and go on.
enum class AtHang { kStop, kWait, kContinue };
// Replay: how a stream is held for a call's duration.
enum class Completion { kKernel, kHostCallback };
// Replay: where a call's duration comes from.
enum class TimingSource { kRecorded, kEstimated };
// Replay: which duration an estimate stands for (timing::EstimateTarget).
enum class EstimateTarget { kObserved, kTransfer };
// Replay: whether a call keeps the calling thread as long as the recorded call did.
enum class HostTime { kReplay, kOwn, kIgnore };
// Replay: where a hold's duration is counted from: its stream's arrival at the call, or the hold's own start.
enum class HoldFrom { kArrival, kStart };
enum class PeerPacing { kOff, kRecorded };

// An inclusive range of non-negative integers; `hi` < 0 means unbounded.
struct Range {
  long long lo = 0, hi = -1;
  bool contains(long long v) const { return v >= lo && (hi < 0 || v <= hi); }
  bool all() const { return lo == 0 && hi < 0; }
};

// One entry of the split table: the communicator that a ncclCommSplit produces for the ranks listed.
struct GroupSpec {
  std::vector<int> members;  // world ranks (rank in the root communicator), in child-rank order
  std::optional<int> color;  // when set, only a split with this color matches
  std::string name;          // optional label used in logs and reports
  std::string origin;        // where it was defined, e.g. "ranklens.yaml:12:5"
};

// One dimension of the device mesh (`mesh: dp=8192,tp=2`), outermost first: world rank = row-major index of the
// coordinates, the last dimension contiguous (torch's DeviceMesh order). size -1: what the world size leaves.
struct MeshDim {
  std::string name;
  long long size = 0;
};

// One `mesh_colors` entry (`tp=0-8191`): a split whose color is in `colors` groups the ranks along these dimensions.
struct MeshColors {
  std::vector<std::string> dims;  // mesh dimension names, e.g. {"pp", "dp"} for "pp+dp=..."
  Range colors;
  std::string text;  // as written, for messages
};

// Each setting's initialiser below is its one default: describe() shows it as the default, dump-config and
// docs/config.md print that, and a test reads every shown default back through the loader.
struct Settings {
  // Common.
  Mode mode = Mode::kReplay;
  DeviceKind device = DeviceKind::kAuto;
  std::string trace_dir;  // where per-rank event logs go; empty: events are not written
  // Record mode.
  std::string real_nccl;  // path of the real libnccl.so.2; empty: discover it
  Payloads payloads = Payloads::kSmall;
  unsigned long long payload_max_bytes = 65536;  // 'small': messages up to this many received bytes
  std::vector<std::string> payload_ops;          // op names (AllReduce, Recv, ...); empty: all
  std::vector<std::string> payload_comms;        // communicator ids (creation order) or commName values; empty: all
  Range payload_steps;                           // step numbers (ranklensMarkStage); all by default
  Range payload_seqs;                            // per-communicator sequence numbers; all by default
  // Pinned host memory for payloads in flight; kAutoStagingBytes: from the payload policy and the host
  // (nccl_fake/src/record/recorder.cc).
  static constexpr unsigned long long kAutoStagingBytes = ~0ull;
  unsigned long long staging_bytes = kAutoStagingBytes;
  int payload_zstd_level = -1;  // zstd level of stored payloads (negative: fast levels)
  int payload_threads = 0;      // payload compression threads; 0: trace::autoCompressionThreads
  PayloadShuffle payload_shuffle = PayloadShuffle::kOn;  // byte planes for 2/4/8-byte elements
  unsigned long long payload_queue_bytes = 1ull << 30;   // payloads out of staging awaiting compression, writing
  StagingFull staging_full = StagingFull::kSkip;
  TimingClock timing_clock = TimingClock::kEvents;
  CapturedTiming captured_timing = CapturedTiming::kEvents;
  int timing_poll_us = 2000;
  unsigned long long payload_copy_kernel_bytes = 65536;       // payloads up to this size copied by a kernel
  unsigned long long payload_copy_kernel_bytes_one_rank = 0;  // the same for calls on 1-rank communicators
  CopyPriority payload_copy_priority = CopyPriority::kHigh;
  // Replay.
  Fidelity fidelity = Fidelity::kStructure;
  Fill fill = Fill::kClone;
  int nccl_version = 22809;  // what ncclGetVersion reports in replay
  int ranks_per_node = 8;    // virtual topology: ranks sharing a node (LSA team, locality)
  std::vector<GroupSpec> groups;
  std::vector<MeshDim> mesh;            // empty: no mesh (splits need a recording or the groups table)
  std::vector<MeshColors> mesh_colors;  // which split colors are which mesh dimensions (ranklens/mesh.h)
  std::string replay_trace;             // a recorded rank directory, or a trace root holding rank<RANK>
  OnMismatch on_mismatch = OnMismatch::kError;
  OnPayloadError on_payload_error = OnPayloadError::kError;
  AtHang at_hang = AtHang::kStop;
  Completion completion = Completion::kKernel;
  HostTime host_time = HostTime::kReplay;
  TimingSource timing = TimingSource::kRecorded;
  std::string history;  // duration history (ranklens history build) for estimates
  EstimateTarget estimate_target = EstimateTarget::kTransfer;
  int hold_blocks = 1;               // thread blocks (SMs) each hold kernel occupies
  int hold_threads = 32;             // threads per hold block
  long long hold_shared_bytes = -1;  // dynamic shared memory per hold block; kHoldSharedAuto, kHoldSharedSm
  HoldFrom hold_from = HoldFrom::kArrival;
  PeerPacing peer_pacing = PeerPacing::kOff;  // collectives end when the recorded peers would have arrived
  int resync_window = 64;                     // recorded calls searched ahead for the replayed call after a mismatch
  unsigned long long prefetch_bytes = 0;  // pinned host memory for decoded payloads ahead of use; 0: auto (replay.cc)
  int prefetch_threads = 0;               // payload decoding threads; 0: a quarter of the cores, 2..8
  // Device memory payloads are staged in ahead of use; kAutoDeviceBytes: sized from the recording (replay.cc).
  static constexpr unsigned long long kAutoDeviceBytes = ~0ull;
  unsigned long long payload_device_bytes = kAutoDeviceBytes;
  std::string break_at;                       // "<comm>:<seq>": raise SIGTRAP when that replayed call is made
  long long break_comm = -1, break_seq = -1;  // break_at parsed; -1 when unset
  bool break_hang = false;                    // break_at: hang (an imported Flight Recorder trace's unfinished call)
  // key -> where its value came from: "default", "<file>:<line>:<col>" or "env RANKLENS_<KEY>".
  std::map<std::string, std::string> set_by;
};

// hold_shared_bytes's two words: auto (an SM's whole shared memory when hold_blocks > 1, none for one block) and
// sm (an SM's whole shared memory).
constexpr long long kHoldSharedAuto = -1, kHoldSharedSm = -2;

using GetEnv = std::function<const char*(const char*)>;

// Reads RANKLENS_CONFIG (if set) and every RANKLENS_* override through `getenv` into `*settings`; on failure
// `*settings` holds the defaults, the Status says what is wrong where. `warnings` (may be null) receives non-fatal
// notices, such as a misspelt RANKLENS_* variable; `envNames` lists the variable names checked for those (GetEnv
// cannot enumerate), null meaning the process `environ`. Codes: kInvalidArgument for a bad value, key or file
// content, kSystemError for a file that cannot be read, kInternalError otherwise.
Status loadFromEnvironment(const GetEnv& getenv, Settings* settings, std::vector<std::string>* warnings = nullptr,
                           const std::vector<std::string>* envNames = nullptr);
// Same, but with the YAML text given directly; `origin` names it in messages (a path or "<string>").
Status loadFromYaml(const std::string& yamlText, const std::string& origin, const GetEnv& getenv, Settings* settings,
                    std::vector<std::string>* warnings = nullptr, const std::vector<std::string>* envNames = nullptr);

// Variables that the job's launcher sets, not the user for RankLens: read through here so that one place names,
// parses and documents them (docs/config.md, "Variables read from the job"). Consumers read them when they need
// them, not at load: a program may set RANK itself after its first NCCL call (often ncclGetVersion at import) and
// before its first communicator, which names the rank's trace directory.
struct Context {
  std::string rank;        // RANK as set (names the trace's rank directory); empty: unset
  int rank_number = -1;    // RANK as a number >= 0; -1: unset or not a number
  int world_size = -1;     // WORLD_SIZE; -1: unset or not a number >= 0
  int local_rank = -1;     // LOCAL_RANK; -1: unset or not a number >= 0
  int local_ranks = 1;     // ranks on this host: LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE or MPI_LOCALNRANKS
  int comm_blocking = -1;  // NCCL_COMM_BLOCKING: 0 or 1 overrides ncclConfig_t.blocking, as NCCL does; -1: neither
  int progress = -1;       // RANKLENS_PROGRESS for the tools: 1 forces progress lines, 0 turns them off; -1: unset
  // RANKLENS_SHARE_GPU_LOCAL_RANK: the launcher's LOCAL_RANK of a rank placed on a shared GPU (ranklens/share_gpu.h),
  // whose LOCAL_RANK was mapped onto the GPUs there are; -1: unset or not a number >= 0.
  int shared_gpu_local_rank = -1;
};
Context readContext(const GetEnv& getenv);
// The same from the process environment.
Context readContext();

// Which part of RankLens a setting governs: both modes, record mode, or replay.
enum class Section { kCommon, kRecord, kReplay };

// One row per key, for `dump-config` and docs/config.md's tables (`ranklens dump-config --markdown`), in table
// order, grouped by section: key, environment variable, value, set_by, default (the Settings initialiser shown as
// the value is), accepted values, help.
struct KeyInfo {
  Section section = Section::kCommon;
  std::string key, env, value, set_by, default_value, values, help;
};
std::vector<KeyInfo> describe(const Settings& settings);

const char* toString(Section);
const char* toString(Mode);
const char* toString(Fidelity);
const char* toString(Fill);
const char* toString(DeviceKind);
const char* toString(Payloads);
const char* toString(StagingFull);
const char* toString(PayloadShuffle);
const char* toString(TimingClock);
const char* toString(CapturedTiming);
const char* toString(CopyPriority);
const char* toString(HoldFrom);
const char* toString(PeerPacing);
const char* toString(OnMismatch);
const char* toString(OnPayloadError);
const char* toString(AtHang);
const char* toString(Completion);
const char* toString(HostTime);
const char* toString(TimingSource);
const char* toString(EstimateTarget);

}  // namespace config
}  // namespace ranklens

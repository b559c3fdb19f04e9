// SPDX-License-Identifier: Apache-2.0
// Replay of a recorded trace: communicator and call matching with resynchronisation, recorded durations as stream
// holds, recorded payloads restored into receive buffers, and the counters that say how faithful the replay was.
#include "nccl_fake/replay.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "nccl_fake/debug.h"
#include "nccl_fake/runtime.h"
#include "ranklens/estimator.h"
#include "ranklens/host_time.h"
#include "ranklens/payload_prefetcher.h"
#include "ranklens/peer_waits.h"
#include "ranklens/recording.h"

// at_hang: wait. A debugger clears it to let the replayed rank go on from the hang
// (gdb -p PID -ex 'set var ranklens_hang_wait = 0' -ex continue).
extern "C" {
__attribute__((used)) volatile int ranklens_hang_wait = 0;
}

namespace nccl_fake {
namespace replay {

using ranklens::config::Fidelity;
using ranklens::config::OnMismatch;
using ranklens::events::Op;
using ranklens::trace::CallKey;
using ranklens::trace::RecordedCall;
using ranklens::trace::SeqKind;

namespace {

struct Counters {
  uint64_t calls = 0, matched = 0, mismatches = 0, resyncs = 0, recordedSkipped = 0, extra = 0, estimated = 0;
  uint64_t estimatesExtrapolated = 0;
  uint64_t estimatesFromBenchmarks = 0;  // from nccl-tests samples of the history (no recorded call was near)
  uint64_t untimed = 0;  // matched, but the recording has no duration for it (captured in a graph, lost)
  uint64_t payloadsRestored = 0, payloadBytesRestored = 0, payloadFailures = 0, filledWithoutPayload = 0;
  uint64_t payloadsSkippedCaptured = 0;  // a recorded payload not restored: the call is captured into a CUDA graph
  uint64_t holds = 0, heldNs = 0, hostHeldNs = 0;
  uint64_t hostCappedNs = 0;  // host_time: own: recorded host time above the cap, not replayed
  uint64_t pacedHolds = 0;    // peer_pacing: holds that knew their peers' pace
  uint64_t commsMatched = 0, commsUnmatched = 0, commsRebound = 0;
};

struct Session {
  std::mutex mu;
  // Null when there is no recording (timing: estimated with a history and no replay_trace): every call is held
  // for its estimate, and nothing is matched.
  std::unique_ptr<ranklens::trace::Recording> recording;
  std::unique_ptr<ranklens::trace::PayloadPrefetcher> prefetcher;
  // Durations for calls without a recorded one: from `history`, or, without it, from the replayed recording.
  ranklens::timing::History history;
  std::unique_ptr<ranklens::timing::Estimator> estimator;
  bool estimateAll = false;  // timing: estimated
  int localWorldSize = -1;   // the recorded job's, for the estimator's locality (read once)
  bool historySpansNodes = false;  // some history sample's communicator spanned nodes
  bool warnedLocality = false;     // the WARN that no sample did, for a communicator that does, was given
  ranklens::device::StreamDevice::Calibration calibration;
  Fidelity fidelity = Fidelity::kStructure;
  OnMismatch policy = OnMismatch::kError;
  ranklens::config::OnPayloadError onPayloadError = ranklens::config::OnPayloadError::kError;
  ranklens::config::AtHang atHang = ranklens::config::AtHang::kStop;
  bool breakAtHang = false;  // break_at: hang
  bool hangReported = false;  // an imported trace's hang: reported once (at_hang: continue goes on after it)
  bool hostTime = true;
  // host_time: own. The most host time replayed for a call of each operation (groups: kGroupHostKey); absent: no cap.
  std::map<int, int64_t> hostCaps;
  int window = 64;
  // peer_pacing: recorded. Per recorded call (RecordedCall::order), how its peers paced it (read-only once loaded;
  // each communicator's chain is on the communicator).
  bool pacing = false;
  std::vector<ranklens::timing::PeerPace> paces;
  // timing fidelity restores the recorded payloads up to this size (the control values: sizes, flags, objects) so
  // that the rank takes the recorded path; value fidelity restores every recorded payload.
  uint64_t controlPayloadBytes = 0;
  uint64_t prefetchArenaBytes = 0;       // the pinned memory the prefetcher was given (prefetch_bytes, auto resolved)
  uint64_t largestStepPayloadBytes = 0;  // Recording::largestStepPayloadBytes
  struct Binding {
    int64_t recordedId = -1;
    bool called = false;  // it has issued a call: the binding is final (rebindOnFirstCall)
  };
  std::map<uint64_t, Binding> bindingOf;  // replayed comm id -> its recorded communicator
  // Whether a replayed communicator is bound to recorded communicator `recordedId` (a few dozen at most).
  bool taken(uint64_t recordedId) const {
    for (const auto& [replayed, b] : bindingOf)
      if (b.recordedId == static_cast<int64_t>(recordedId)) return true;
    return false;
  }
  std::map<std::tuple<uint64_t, int, int>, int64_t> offsets;  // (replayed comm, kind, peer) -> recorded seq - replayed
  Counters counters;
  bool reportedFirst = false;
  // For the estimator's same-place rule: calls outside groups, and groups on a stream (by their first call's op and
  // their calls' bytes on it), counted from the program's "step" markers.
  ranklens::timing::StepOccurrences stepOccurrences;
  uint64_t warned = 0;
};

std::once_flag loadOnce;
Session* session = nullptr;  // set once, never freed (calls may come from threads still running at exit)
std::string loadError;

std::string describeComm(const ranklens::events::CommInit& c) {
  std::string text = "comm " + std::to_string(c.commId) + " (" + c.how + ", rank " + std::to_string(c.rank) + " of " +
                     std::to_string(c.nranks);
  if (c.parentId >= 0) text += ", parent " + std::to_string(c.parentId) + ", color " + std::to_string(c.color);
  if (!c.name.empty()) text += ", name " + c.name;
  return text + ")";
}

std::string describeCall(const char* side, uint64_t comm, uint64_t seq, int op, int datatype, uint64_t count,
                         int rootOrPeer, int redop) {
  char text[256];
  snprintf(text, sizeof text, "%s: comm %lu seq %lu %s %s count %lu root/peer %d redop %d", side,
           static_cast<unsigned long>(comm), static_cast<unsigned long>(seq),
           ranklens::events::opName(static_cast<Op>(op)), ranklens::events::datatypeName(datatype),
           static_cast<unsigned long>(count), rootOrPeer, redop);
  return text;
}

// The application frames that made the call (outside this library), for mismatch reports.
std::string callSite() {
  void* frames[24];
  const int n = backtrace(frames, 24);
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&callSite), &self);
  std::string text;
  int shown = 0;
  for (int i = 1; i < n && shown < 6; ++i) {
    Dl_info info{};
    if (!dladdr(frames[i], &info) || info.dli_fbase == self.dli_fbase) continue;
    char line[512];
    snprintf(line, sizeof line, "\n    #%d %s (%s+0x%lx)", shown, info.dli_sname ? info.dli_sname : "??",
             info.dli_fname ? info.dli_fname : "??",
             static_cast<unsigned long>(static_cast<const char*>(frames[i]) -
                                        static_cast<const char*>(info.dli_fbase)));
    text += line;
    ++shown;
  }
  return text.empty() ? " (no frames)" : text;
}

// A setting as the configuration prints it (e.g. hold_shared_bytes: auto, sm or bytes).
std::string settingText(const ranklens::config::Settings& settings, const std::string& key) {
  for (const auto& row : ranklens::config::describe(settings))
    if (row.key == key) return row.value;
  return "?";
}

// host_time: own (timing::ownHostCapNs): the most host time replayed per operation of the recording, and for groups.
constexpr int kGroupHostKey = -1;
std::map<int, int64_t> ownHostCaps(const ranklens::trace::Recording& recording) {
  std::map<int, std::vector<int64_t>> samples;
  std::set<uint64_t> groups;
  for (const auto& c : recording.calls()) {
    if (c.call.groupId == 0) {
      if (c.call.hostNs > 0) samples[c.call.op].push_back(c.call.hostNs);
    } else if (groups.insert(c.call.groupId).second) {
      const int64_t ns = recording.groupHostNs(c.call.groupId);
      if (ns > 0) samples[kGroupHostKey].push_back(ns);
    }
  }
  std::map<int, int64_t> caps;
  for (auto& [key, v] : samples) {
    const int64_t cap = ranklens::timing::ownHostCapNs(std::move(v));
    if (cap >= 0) caps[key] = cap;
  }
  return caps;
}

// peer_pacing: recorded. Every rank of the replayed rank's trace root is read once; false (and why) when a rank is
// missing or no call can be paced.
bool loadPaces(Session* s, std::string* why) {
  const auto& m = s->recording->manifest();
  const std::string& dir = s->recording->directory();
  const size_t slash = dir.find_last_of('/');
  const std::string root = slash == std::string::npos ? "." : dir.substr(0, slash);
  if (m.world_size < 2 || m.rank < 0 || m.rank >= m.world_size) {
    *why = "the recording " + dir + " names no job of several ranks (world size " + std::to_string(m.world_size) + ")";
    return false;
  }
  std::vector<std::unique_ptr<ranklens::trace::Recording>> peers;
  std::vector<const ranklens::trace::Recording*> ranks;
  for (int r = 0; r < m.world_size; ++r) {
    if (r == m.rank) {
      ranks.push_back(s->recording.get());
      continue;
    }
    std::string error;
    peers.push_back(ranklens::trace::Recording::open(root, r, &error));
    if (!peers.back()) {
      error = error.substr(0, error.find("; replay a recorded rank"));  // Recording::open's advice is for RANK
      *why = "it needs every rank's recording in " + root + ", and rank " + std::to_string(r) + "'s cannot be read (" +
             error + "); record every rank into one trace root, or set peer_pacing: off";
      return false;
    }
    ranks.push_back(peers.back().get());
  }
  s->paces = ranklens::timing::peerPace(ranks, static_cast<size_t>(m.rank));
  const auto known = std::count_if(s->paces.begin(), s->paces.end(), [](const auto& p) { return p.known; });
  if (known == 0) {
    *why = "no collective of " + root + " has every rank's gap (Timing.gapNs: recorded by RankLens with trace "
           "format 1.6 or later)";
    return false;
  }
  INFO(kSubInit | kSubRanklens, "replay: peer_pacing: %ld of %zu recorded calls paced by %d ranks' recordings in %s",
       static_cast<long>(known), s->paces.size(), m.world_size, root.c_str());
  return true;
}

// The host time to replay for a recorded call or group (`key`: its op, or kGroupHostKey), counting what is left out.
int64_t hostTimeToReplay(Session* s, int key, int64_t recordedNs) {
  auto it = s->hostCaps.find(key);
  if (it == s->hostCaps.end() || recordedNs <= it->second) return recordedNs;
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.hostCappedNs += static_cast<uint64_t>(recordedNs - it->second);
  return it->second;
}

// The estimator over s->history, for the configured target (transfer needs a history with transfer times).
void makeEstimator(Session* s, const ranklens::config::Settings& st) {
  ranklens::timing::Estimator::Options estimates;
  estimates.target = st.estimate_target == ranklens::config::EstimateTarget::kTransfer
                         ? ranklens::timing::EstimateTarget::kTransfer
                         : ranklens::timing::EstimateTarget::kObserved;
  if (estimates.target == ranklens::timing::EstimateTarget::kTransfer &&
      !ranklens::timing::hasTransferTimes(s->history)) {
    // A lone rank's own recording (no history) or a history of format 1 has no transfer times: what it has is
    // better than the fixed model.
    if (!st.history.empty())
      WARN("replay: history %s has no transfer times (built from one rank of each job, or by a RankLens before "
           "format 2); estimates use observed durations (estimate_target observed). Rebuild it with `ranklens "
           "history build` from every rank's trace of each job",
           st.history.c_str());
    estimates.target = ranklens::timing::EstimateTarget::kObserved;
  }
  s->estimator = std::make_unique<ranklens::timing::Estimator>(s->history, estimates);
  s->historySpansNodes = std::any_of(s->history.samples.begin(), s->history.samples.end(),
                                     [](const ranklens::timing::HistorySample& h) { return h.crossesNodes; });
}

// The recording of `replay_trace` into the session, checked against this process (world size, a benchmark-only
// recording), its damage and machine reported. False with loadError set when it cannot be replayed.
bool openRecording(Session* s, const ranklens::config::Settings& st) {
  std::string error;
  const ranklens::config::Context job = ranklens::config::readContext();
  s->recording = ranklens::trace::Recording::open(st.replay_trace, job.rank_number, &error);
  if (!s->recording) {
    loadError = "replay_trace: " + error;
    return false;
  }
  const auto& m = s->recording->manifest();
  const int worldSize = job.world_size;
  if (m.world_size > 0 && worldSize > 0 && m.world_size != worldSize) {
    loadError = "replay_trace " + s->recording->directory() + " was recorded with WORLD_SIZE " +
                std::to_string(m.world_size) + " but this process has WORLD_SIZE " + std::to_string(worldSize) +
                "; replay with --world-size " + std::to_string(m.world_size) + " or pick the matching trace";
    return false;
  }
  namespace counter = ranklens::trace::counter;
  if (const uint64_t unrecorded = ranklens::trace::counterValue(m, counter::kCallsUnrecorded).value_or(0);
      unrecorded > 0) {
    loadError = "replay_trace " + s->recording->directory() + " was recorded with record_alternate_steps (a " +
                "benchmark setting): " + std::to_string(unrecorded) + " of its calls were forwarded without being " +
                "recorded, so it cannot be replayed; record again without RANKLENS_RECORD_ALTERNATE_STEPS";
    return false;
  }
  if (m.mode != "record")
    WARN("replay_trace %s was written in %s mode, not record mode: it has no recorded durations or payloads",
         s->recording->directory().c_str(), m.mode.c_str());
  for (const auto& p : s->recording->problems())
    WARN("replay_trace: %s (records before it are replayed)", p.describe().c_str());
  if (s->fidelity != Fidelity::kStructure) {
    ranklens::trace::Manifest here;
    ranklens::trace::describeHost(&here);
    std::string uuid;
    Runtime::get().device().describe(&here.gpu_name, &uuid);
    const std::string machines = ranklens::trace::machineDifference(m, here);
    if (!machines.empty())
      WARN("replay: recorded on another kind of machine (%s): a host-bound step runs at this machine's speed, so "
           "its step times may differ from the recording's for that alone (docs/fidelity.md section 4)",
           machines.c_str());
  }
  return true;
}

// payload_device_bytes: the setting, or for auto what the recorded job left of its GPU's memory (its manifest's
// device_memory_* counters) and this GPU has (ranklens::trace::autoDeviceStageBytes), logged with its basis. Never
// more than `arenaBytes`, the pinned memory the payloads come from.
uint64_t deviceStageBytes(const ranklens::trace::Recording& recording, uint64_t largestStepBytes,
                          const ranklens::config::Settings& st, ranklens::device::StreamDevice& device,
                          uint64_t arenaBytes) {
  if (st.payload_device_bytes != ranklens::config::Settings::kAutoDeviceBytes)
    return std::min<uint64_t>(st.payload_device_bytes, arenaBytes);
  ranklens::trace::DeviceStageSizing in;
  in.largestStepBytes = largestStepBytes;
  in.arenaBytes = arenaBytes;
  ranklens::trace::setRecordedDeviceMemory(recording.manifest(), &in);
  if (device.memoryInfo(&in.freeBytes, &in.totalBytes) != 0) in.freeBytes = in.totalBytes = 0;
  std::string basis;
  const uint64_t bytes = ranklens::trace::autoDeviceStageBytes(in, &basis);
  INFO(kSubRanklens, "replay: payload_device_bytes auto: %.0f MiB of device memory (%s)", bytes / 1048576.0,
       basis.c_str());
  return bytes;
}

Session* load() {
  std::call_once(loadOnce, [] {
    Runtime& rt = Runtime::get();
    const auto& st = rt.settings();
    if (st.mode != ranklens::config::Mode::kReplay) return;
    // Without a recording only estimated timing has anything to replay (Runtime refuses other fidelities there).
    const bool recorded = !st.replay_trace.empty();
    if (!recorded && st.fidelity == Fidelity::kStructure) return;
    auto s = std::make_unique<Session>();
    s->fidelity = st.fidelity;
    s->policy = recorded ? st.on_mismatch : OnMismatch::kEstimate;  // no recording: every call is one it lacks
    s->onPayloadError = st.on_payload_error;
    s->window = st.resync_window;
    s->atHang = st.at_hang;
    s->breakAtHang = st.break_hang;
    s->hostTime = st.host_time != ranklens::config::HostTime::kIgnore;
    s->estimateAll = st.timing == ranklens::config::TimingSource::kEstimated;
    if (recorded && !openRecording(s.get(), st)) return;
    if (recorded && s->fidelity == Fidelity::kValue) {
      // A value replay of a recording that lacks payloads runs, but its values are not the recorded run's: say so
      // before the job spends its time.
      const std::string gaps = ranklens::trace::describePayloadGaps(*s->recording);
      if (!gaps.empty()) WARN("replay: %s", gaps.c_str());
    }
    std::string historyError;
    if (!st.history.empty()) {
      if (!ranklens::timing::loadHistory(st.history, &s->history, &historyError)) {
        loadError = "history: " + historyError;
        return;
      }
    } else if (s->estimateAll) {
      loadError = "timing: estimated needs a duration history: set RANKLENS_HISTORY to a file built with `ranklens "
                  "history build <recorded traces> -o FILE`";
      return;
    } else if (s->recording->manifest().mode == "record" &&
               !ranklens::timing::addRecordedRun(*s->recording, &s->history, &historyError)) {
      WARN("replay: estimates use a fixed model: %s", historyError.c_str());
    }
    makeEstimator(s.get(), st);
    // Locality: the recorded job's ranks per node, or without a recording the virtual topology's.
    s->localWorldSize = recorded ? ranklens::timing::localWorldSize(s->recording->manifest()) : st.ranks_per_node;
    if (recorded && st.host_time == ranklens::config::HostTime::kOwn) s->hostCaps = ownHostCaps(*s->recording);
    if (recorded && st.peer_pacing == ranklens::config::PeerPacing::kRecorded && s->fidelity != Fidelity::kStructure) {
      std::string why;
      if (st.completion != ranklens::config::Completion::kKernel)
        WARN("replay: peer_pacing: recorded needs completion: kernel; holds are not paced");
      else if (!(s->pacing = loadPaces(s.get(), &why)))
        WARN("replay: peer_pacing: recorded: %s; holds are not paced", why.c_str());
    }
    auto& device = rt.device();
    if (s->fidelity != Fidelity::kStructure) s->calibration = device.calibrate();
    s->controlPayloadBytes = st.payload_max_bytes;
    if (recorded && s->fidelity != Fidelity::kStructure && !s->recording->payloadOrder().empty()) {
      ranklens::trace::PayloadPrefetcher::Options options;
      s->largestStepPayloadBytes = s->recording->largestStepPayloadBytes();
      options.arenaBytes = st.prefetch_bytes;
      if (st.prefetch_bytes == 0) {
        options.arenaBytes = ranklens::trace::autoArenaBytes(s->largestStepPayloadBytes, ranklens::trace::hostMemoryBytes());
        if (s->fidelity == Fidelity::kValue)
          INFO(kSubRanklens, "replay: prefetch_bytes auto: %.0f MiB of pinned memory (the recording's largest step "
               "holds %.0f MiB of payloads)", options.arenaBytes / 1048576.0, s->largestStepPayloadBytes / 1048576.0);
      }
      if (s->fidelity == Fidelity::kTiming) {
        options.maxPayloadBytes = s->controlPayloadBytes;
        options.arenaBytes =
            std::min<uint64_t>(options.arenaBytes, std::max<uint64_t>(16ull << 20, 4 * s->controlPayloadBytes));
      }
      s->prefetchArenaBytes = options.arenaBytes;
      options.threads = st.prefetch_threads > 0 ? st.prefetch_threads : workerThreads();
      // Payloads move on into device memory (on the device current now, the replayed rank's), a timing replay's
      // control values into no more than its pinned arena.
      ranklens::trace::PayloadPrefetcher::DeviceStage stage;
      int ordinal = 0;
      const uint64_t deviceBytes = deviceStageBytes(*s->recording, s->largestStepPayloadBytes, st, device, options.arenaBytes);
      if (deviceBytes > 0 && device.currentDevice(&ordinal) == 0) {
        stage.arenaBytes = deviceBytes;
        stage.alloc = [&device](size_t bytes) -> void* {
          void* p = nullptr;
          return device.alloc(&p, bytes) == 0 ? p : nullptr;
        };
        stage.free = [&device](void* p) { device.free(p); };
        stage.upload = [&device, ordinal](void* dst, const void* src, size_t bytes, uint64_t* token) {
          return device.upload(dst, src, bytes, ordinal, token) == 0;
        };
        stage.passed = [&device](uint64_t token) { return device.passed(token); };
      }
      s->prefetcher = std::make_unique<ranklens::trace::PayloadPrefetcher>(
          *s->recording, options,
          [&device](size_t bytes) -> void* {
            void* p = nullptr;
            return device.allocHost(&p, bytes) == 0 ? p : nullptr;
          },
          [&device](void* p) { device.freeHost(p); }, std::move(stage));
      if (!s->prefetcher->arenaReady())
        WARN("replay: cannot allocate %llu bytes of pinned memory (prefetch_bytes); payloads are decoded when needed",
             static_cast<unsigned long long>(options.arenaBytes));
      else if (deviceBytes > 0 && !s->prefetcher->deviceReady())
        WARN("replay: cannot allocate %llu bytes of device memory (payload_device_bytes); payloads are copied from "
             "pinned host memory",
             static_cast<unsigned long long>(deviceBytes));
    }
    const std::string what =
        recorded ? s->recording->directory()
                 : "no recording: every call held for its estimate from history " + st.history + " (" +
                       std::to_string(s->history.samples.size()) + " samples), " + std::to_string(st.ranks_per_node) +
                       " ranks per node";
    const ranklens::trace::Manifest none;
    const ranklens::trace::Manifest& m = recorded ? s->recording->manifest() : none;
    INFO(kSubInit | kSubRanklens,
         "replaying %s (rank %d of %d, %zu calls, %zu timed, %zu payloads, %zu communicators) at %s fidelity, "
         "on_mismatch %s; holds %d x %d threads, shared %s, from %s; hold fixed cost %ld ns, "
         "copy %ld ns + %.4f ns/byte",
         what.c_str(), m.rank, m.world_size, recorded ? s->recording->callCount() : 0,
         recorded ? s->recording->timedCount() : 0, recorded ? s->recording->payloadOrder().size() : 0,
         recorded ? s->recording->comms().size() : 0,
         ranklens::config::toString(s->fidelity), ranklens::config::toString(s->policy), st.hold_blocks,
         st.hold_threads, settingText(st, "hold_shared_bytes").c_str(), ranklens::config::toString(st.hold_from),
         static_cast<long>(s->calibration.holdFixedNs),
         static_cast<long>(s->calibration.copyFixedNs), s->calibration.copyNsPerByte);
    session = s.release();
    rt.setBeforeClose([] { finish(); });
  });
  return session;
}

// Whether a comma-separated list (FlightRecorderEntry::unknown) names `field`.
bool names(const std::string& list, const char* field) {
  const size_t n = std::strlen(field);
  for (size_t at = list.find(field); at != std::string::npos; at = list.find(field, at + 1)) {
    if ((at == 0 || list[at - 1] == ',') && (at + n == list.size() || list[at + n] == ',')) return true;
  }
  return false;
}

// `unknown`: the fields a trace imported from a Flight Recorder dump does not know (it holds a stand-in for them),
// which are then not compared.
bool sameSignature(const ranklens::events::Call& r, const CallInfo& info, const std::string* unknown = nullptr) {
  auto known = [&](const char* field) { return unknown == nullptr || !names(*unknown, field); };
  const bool rooted = ranklens::events::isRooted(info.op) || ranklens::events::isP2p(info.op);
  const bool reduction = ranklens::events::isReduction(info.op);
  if (r.op != static_cast<int>(info.op)) return false;
  if (known("datatype") && r.datatype != static_cast<int>(info.datatype)) return false;
  if (known("count") && r.count != info.count) return false;
  if (rooted && known("root") && known("peer") && r.rootOrPeer != info.root) return false;
  if (reduction && known("redop")) {
    // User (PreMulSum) operators are handles that differ between runs: only "a user operator" is compared.
    const bool userRecorded = r.redop >= ncclNumOps, userReplayed = info.redop >= ncclNumOps;
    if (userRecorded != userReplayed || (!userReplayed && r.redop != static_cast<int>(info.redop))) return false;
  }
  return true;
}

const std::string* unknownOf(const RecordedCall* rc) {
  return rc != nullptr && rc->flightRecorder ? &rc->flightRecorder->unknown : nullptr;
}

// Whether calls may be held for an estimate (timing: estimated, or on_mismatch: estimate): only then are they
// counted for the same-place rule (a map update per call, under the session's lock).
bool estimatesCalls(const Session& s) { return s.estimateAll || s.policy == OnMismatch::kEstimate; }

// Counts what an estimate that is held came from (under the session's lock).
void countEstimate(Counters& c, const ranklens::timing::Estimate& e) {
  if (e.extrapolated) c.estimatesExtrapolated++;
  if (e.benchmark) c.estimatesFromBenchmarks++;
}

// A duration for a call the recording does not time (or for every call under timing: estimated).
// Grouped calls are estimated one by one; holdGroup holds each stream for the longest of them.
int64_t estimateNs(Session* s, const CallInfo& info, uint64_t bytes) {
  const int nranks = info.comm->nRanks;
  const bool crosses = ranklens::timing::crossesNodes(s->localWorldSize, nranks);
  if (crosses && !s->historySpansNodes && !s->warnedLocality) {
    s->warnedLocality = true;
    WARN("replay: communicator %lu (%d ranks) spans nodes (more than %d ranks per node), but no call in the duration "
         "history did: its estimates assume the history's one-node bandwidth and are too short. Add a recording of "
         "a multi-node job (ranklens history build --append) or the cluster's nccl-tests output across nodes "
         "(ranklens history import-nccl-tests --append) to the history",
         static_cast<unsigned long>(info.comm->id), nranks, s->localWorldSize);
  }
  const ranklens::timing::Estimate e =
      s->estimator->estimate(static_cast<int>(info.op), nranks, crosses, bytes, info.comm->name, false,
                             info.stepOccurrence, info.stepPhase);
  countEstimate(s->counters, e);
  return e.durationNs;
}

// The calibrated time of the copy restorePayload enqueued for the call (from pinned or from device memory), 0 if none.
int64_t restoreCostNs(const Session& s, const CallInfo& info) {
  if (info.restoredBytes == 0) return 0;
  const auto& c = s.calibration;
  const double bytes = static_cast<double>(info.restoredBytes);
  return info.restoredFromDevice ? c.deviceCopyFixedNs + static_cast<int64_t>(c.deviceCopyNsPerByte * bytes)
                                 : c.copyFixedNs + static_cast<int64_t>(c.copyNsPerByte * bytes);
}

// The time to hold the stream for a duration. The hold's calibrated fixed cost is subtracted from an event-timed
// duration, which contains NCCL's launch; a kernel-clock duration leaves that launch out, and the hold's own launch
// stands for it. From an arrival mark the restore's copy runs within the duration; without one (host callbacks,
// hold_from: start) its calibrated cost (`restoreNs`) is subtracted.
int64_t holdFor(const Session& s, int64_t durationNs, int64_t restoreNs, bool marked, bool kernelTime) {
  if (durationNs <= 0) return 0;
  int64_t cost = kernelTime ? 0 : s.calibration.holdFixedNs;
  if (!marked) cost += restoreNs;
  return std::max<int64_t>(0, durationNs - cost);
}

}  // namespace

bool active() {
  static const bool on = load() != nullptr;
  return on;
}

ncclResult_t onCommCreated(ncclComm* comm) {
  Session* s = load();
  if (s == nullptr) {
    if (!loadError.empty()) {
      WARN("%s", loadError.c_str());
      return ncclInvalidUsage;
    }
    return ncclSuccess;
  }
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->pacing && Runtime::get().device().paceChain(&comm->paceChain) != 0)  // at creation: may synchronise
    WARN("replay: peer_pacing: communicator %lu is not paced: %s", static_cast<unsigned long>(comm->id),
         ranklens::device::lastError().c_str());
  if (!s->recording) return ncclSuccess;  // estimates only: nothing to match
  const auto& comms = s->recording->comms();
  const bool split = comm->how == "split" || comm->how == "shrink";
  int64_t recordedParent = -1;
  if (comm->parentId >= 0) {
    auto it = s->bindingOf.find(static_cast<uint64_t>(comm->parentId));
    recordedParent = it == s->bindingOf.end() ? -2 : it->second.recordedId;  // -2: the parent itself is unmatched
  }
  // Same lineage first; then, as a framework may create a communicator differently alone than in the real job (torch
  // splits a new group from the default one only when that one exists, e.g. DeepSpeed's eager init), any free
  // recorded communicator of the same size and rank. The first call may still rebind it (rebindOnFirstCall).
  for (const bool sameLineage : {true, false}) {
    for (const auto& r : comms) {
      if (s->taken(r.commId) || r.nranks != comm->nRanks || r.rank != comm->rank) continue;
      if (sameLineage) {
        if ((r.how == "split" || r.how == "shrink") != split || r.parentId != recordedParent) continue;
        if (split && comm->how == "split" && r.color != comm->color) continue;
      }
      s->bindingOf[comm->id].recordedId = static_cast<int64_t>(r.commId);
      s->counters.commsMatched++;
      INFO(kSubInit | kSubRanklens, "replay: comm %lu (%s, rank %d of %d) matches recorded %s%s",
           static_cast<unsigned long>(comm->id), comm->how.c_str(), comm->rank, comm->nRanks, describeComm(r).c_str(),
           sameLineage ? "" : " (by size and rank: created another way in the recording)");
      return ncclSuccess;
    }
  }
  s->counters.commsUnmatched++;
  std::string recorded;
  for (size_t i = 0; i < comms.size() && i < 8; ++i)
    if (!s->taken(comms[i].commId)) recorded += "\n    " + describeComm(comms[i]);
  WARN("replay: communicator %lu (%s, rank %d of %d%s) has no counterpart in the recording %s; unmatched recorded "
       "communicators:%s%s",
       static_cast<unsigned long>(comm->id), comm->how.c_str(), comm->rank, comm->nRanks,
       comm->parentId >= 0 ? (", parent " + std::to_string(comm->parentId)).c_str() : "",
       s->recording->directory().c_str(), recorded.empty() ? " none" : recorded.c_str(),
       s->policy == OnMismatch::kError
           ? "\n  Replay the rank this trace was recorded for (RANK, ranklens replay --rank), or set "
             "RANKLENS_ON_MISMATCH=warn|estimate to replay this communicator's calls without the recording"
           : "");
  return s->policy == OnMismatch::kError ? ncclInvalidUsage : ncclSuccess;
}

bool recordedSplitChild(const ncclComm* parent, int color, int key, int* nranks, int* rank,
                        std::vector<int>* worldRanks) {
  Session* s = load();
  if (s == nullptr || !s->recording) return false;
  std::lock_guard<std::mutex> lock(s->mu);
  auto it = s->bindingOf.find(parent->id);
  if (it == s->bindingOf.end()) return false;
  const auto& comms = s->recording->comms();
  for (const auto& r : comms) {
    if (s->taken(r.commId) || r.how != "split" || r.parentId != it->second.recordedId || r.color != color ||
        r.key != key)
      continue;
    *nranks = r.nranks;
    *rank = r.rank;
    *worldRanks = r.worldRanks;
    if (worldRanks->size() != static_cast<size_t>(r.nranks)) {
      // Recorded children carry no member list (the recorder sees only its own rank): map the ranks of the
      // parent's members it cannot name to -1, keeping this rank's own world rank in place.
      worldRanks->assign(r.nranks, -1);
      (*worldRanks)[r.rank] = parent->worldRanks[parent->rank];
    }
    return true;
  }
  return false;
}

namespace {

// A communicator's binding is tentative until its first call. The program repeats the recorded call order, so the
// recorded call at the same position in it, when it opens a communicator of the same size and rank with this very
// call, names the communicator; failing that, one that starts with this call is taken if the bound one does not.
// The two bindings are exchanged. (DeepSpeed alone: torch creates the new group's communicator by init, not by
// split, and before the default group's; both begin with the same calls, so only their order tells them apart.)
void rebindOnFirstCall(Session* s, Session::Binding* binding, const CallInfo& info,
                       const ranklens::events::Call& event, uint64_t position) {
  binding->called = true;
  const SeqKind kind = ranklens::trace::seqKindOf(static_cast<int>(info.op));
  const int peer = kind == SeqKind::kCollective ? -1 : info.root;
  auto startsWith = [&](int64_t recordedId) {
    const RecordedCall* first = s->recording->find(CallKey{static_cast<uint64_t>(recordedId), kind, peer, event.seq});
    return first != nullptr && sameSignature(first->call, info, unknownOf(first));
  };
  const auto& recordedCalls = s->recording->calls();
  int64_t byOrder = -1;  // the recorded communicator the call at this position opened, if it is this call
  if (position < recordedCalls.size()) {
    const RecordedCall& same = recordedCalls[position];
    if (ranklens::trace::callKeyOf(same.call) == CallKey{same.call.commId, kind, peer, event.seq} &&
        sameSignature(same.call, info, unknownOf(&same)))
      byOrder = static_cast<int64_t>(same.call.commId);
  }
  if (byOrder == binding->recordedId || (byOrder < 0 && startsWith(binding->recordedId))) return;
  for (const auto& r : s->recording->comms()) {
    const int64_t candidate = static_cast<int64_t>(r.commId);
    if (r.nranks != info.comm->nRanks || r.rank != info.comm->rank || !startsWith(candidate)) continue;
    if (byOrder >= 0 && candidate != byOrder) continue;
    Session::Binding* holder = nullptr;  // the replayed communicator bound to it, if any
    for (auto& [replayed, b] : s->bindingOf)
      if (b.recordedId == candidate) holder = &b;
    if (holder != nullptr && holder->called) continue;
    if (holder != nullptr) holder->recordedId = binding->recordedId;  // the two bindings are exchanged
    INFO(kSubInit | kSubRanklens, "replay: comm %lu rebound to recorded %s at its first call (was recorded comm %ld)",
         static_cast<unsigned long>(info.comm->id), describeComm(r).c_str(), static_cast<long>(binding->recordedId));
    binding->recordedId = candidate;
    s->counters.commsRebound++;
    return;
  }
}

}  // namespace

void noteStage(const char* name, int64_t timeNs) {
  Session* s = session;
  if (s == nullptr || std::strcmp(name, "step") != 0) return;
  std::lock_guard<std::mutex> lock(s->mu);
  s->stepOccurrences.startStep(timeNs);
}

// The recorded call that `info` replays, or nullptr: its communicator rebound at its first call, the call matched by
// sequence and signature, resynchronised when the program skipped recorded calls. A call the recording lacks is
// counted and reported; under on_mismatch: error it fails (ncclInvalidUsage, the lock released).
ncclResult_t matchRecorded(Session* s, CallInfo* info, const ranklens::events::Call& event,
                           std::unique_lock<std::mutex>* lock, const RecordedCall** out) {
  Counters& c = s->counters;
  const RecordedCall* match = nullptr;
  auto bound = s->bindingOf.find(info->comm->id);
  Session::Binding* binding = bound == s->bindingOf.end() ? nullptr : &bound->second;
  if (binding != nullptr && !binding->called) {
    const int64_t atCreation = binding->recordedId;
    rebindOnFirstCall(s, binding, *info, event, c.calls - 1);
    // Final now: the replay trace says which recorded communicator this one stands for (ranklens compare uses it);
    // recordedCommId is a recorded commId (uint64), so a binding to none writes no record.
    if (binding->recordedId >= 0)
      Runtime::get().emit(ranklens::trace::RecordType::kCommBinding,
                          ranklens::trace::CommBinding{info->comm->id, static_cast<uint64_t>(binding->recordedId),
                                                       binding->recordedId == atCreation ? "creation" : "first call",
                                                       monotonicNs()});
  }
  const SeqKind kind = ranklens::trace::seqKindOf(static_cast<int>(info->op));
  const int peer = kind == SeqKind::kCollective ? -1 : info->root;
  const RecordedCall* expected = nullptr;
  int64_t* offset = nullptr;
  if (binding != nullptr) {
    offset = &s->offsets[{info->comm->id, static_cast<int>(kind), peer}];
    const int64_t at = static_cast<int64_t>(event.seq) + *offset;
    CallKey key{static_cast<uint64_t>(binding->recordedId), kind, peer,
                static_cast<uint64_t>(std::max<int64_t>(at, 0))};
    expected = at >= 0 ? s->recording->find(key) : nullptr;
    if (expected && sameSignature(expected->call, *info, unknownOf(expected))) {
      match = expected;
    } else {
      // Resynchronise: the program may have skipped recorded calls; else this call is one the recording lacks.
      for (int k = 1; k <= s->window && at >= 0; ++k) {
        key.seq = static_cast<uint64_t>(at + k);
        const RecordedCall* ahead = s->recording->find(key);
        if (ahead == nullptr) break;
        if (sameSignature(ahead->call, *info, unknownOf(ahead))) {
          match = ahead;
          *offset += k;
          c.resyncs++;
          c.recordedSkipped += static_cast<uint64_t>(k);
          break;
        }
      }
    }
  }
  if (match == expected && match != nullptr) {
    c.matched++;
  } else {
    if (match != nullptr) c.matched++;
    c.mismatches++;
    if (match == nullptr) {
      c.extra++;
      if (offset) *offset -= 1;  // the next replayed call is compared with the same recorded one
    }
    const bool first = !s->reportedFirst;
    s->reportedFirst = true;
    std::string replayed = describeCall("replayed", info->comm->id, event.seq, static_cast<int>(info->op),
                                        info->datatype, info->count, event.rootOrPeer, event.redop);
    std::string recorded = binding == nullptr
                               ? std::string("recorded: (communicator not matched)")
                               : expected ? describeCall("recorded", expected->call.commId, expected->call.seq,
                                                         expected->call.op, expected->call.datatype,
                                                         expected->call.count, expected->call.rootOrPeer,
                                                         expected->call.redop)
                                          : std::string("recorded: (no call at this sequence: the recording ends)");
    if (s->policy == OnMismatch::kError) {
      lock->unlock();
      WARN("replay: %s call differs from the recording %s\n  %s\n  %s%s\n  call site:%s\n  Set "
           "RANKLENS_ON_MISMATCH=warn (replay it without recording) or estimate (estimated duration) to continue",
           first ? "first" : "a", s->recording->directory().c_str(), replayed.c_str(), recorded.c_str(),
           match ? "\n  (found later in the recording: the program skipped recorded calls)" : "",
           callSite().c_str());
      return ncclInvalidUsage;
    }
    if (first || ++s->warned % 1000 == 0) {
      lock->unlock();
      WARN("replay: %s call differs from the recording%s (%lu so far)\n  %s\n  %s\n  call site:%s",
           first ? "first" : "a", match ? " (resynchronised: the program skipped recorded calls)" : "",
           static_cast<unsigned long>(c.mismatches), replayed.c_str(), recorded.c_str(), callSite().c_str());
      lock->lock();
    }
  }
  *out = match;
  return ncclSuccess;
}

namespace {

// The first `maxLines` lines of `text` (without those that start with a space, if asked), each indented by four.
std::string indentLines(const std::string& text, int maxLines, bool skipIndented) {
  std::string out;
  size_t start = 0;
  for (int shown = 0; start < text.size() && shown < maxLines;) {
    const size_t end = std::min(text.find('\n', start), text.size());
    if (end > start && !(skipIndented && text[start] == ' ')) {
      out += "    " + text.substr(start, end - start) + "\n";
      ++shown;
    }
    start = end + 1;
  }
  return out;
}

// A trace imported from Flight Recorder dumps: the replayed program reached the call the dump left started or
// scheduled, where the job hung. Says where in the user's terms; false (the call fails) unless at_hang: continue
// or a debugger let a waiting rank go on.
bool reportHang(Session* s, const ranklens::trace::RecordedCall& rc, std::unique_lock<std::mutex>* lock) {
  const ranklens::trace::FlightRecorderEntry& e = *rc.flightRecorder;
  const ranklens::config::AtHang at = s->atHang;
  if (s->hangReported && at == ranklens::config::AtHang::kContinue) return true;
  s->hangReported = true;
  std::string where = "process group " + e.pgName + (e.pgDesc.empty() || e.pgDesc == "undefined" ? "" : " (" +
                      e.pgDesc + ")") + ", " + e.profilingName + " " + e.inputSizes + " " + e.inputDtypes + ", " +
                      (e.isP2p ? "point-to-point sequence number " + std::to_string(e.p2pSeqId)
                               : "collective sequence number " + std::to_string(e.collectiveSeqId));
  const auto& imported = s->recording->manifest().imported;
  auto diag = imported.find("diagnosis");
  // The diagnosis's own lines (one per process group); its stacks (indented) are left out, the dump's stack follows.
  std::string ranks = diag == imported.end() ? "" : indentLines(diag->second, 64, /*skipIndented=*/true);
  ranks = ranks.empty() ? "  (only this rank's dump was imported: import every rank's to see which reached it)\n"
                        : "  according to the dumps:\n" + ranks;
  const std::string stack =
      e.frames.empty() ? "    (the dump has no stack: a JSON dump)\n" : indentLines(e.frames, 16, false);
  const char* then = at == ranklens::config::AtHang::kStop
                         ? "The call fails (ncclInvalidUsage) here. RANKLENS_AT_HANG=wait blocks here for a debugger; "
                           "continue replays on."
                         : at == ranklens::config::AtHang::kWait ? "" : "Replaying on (at_hang: continue).";
  lock->unlock();
  char head[160];
  std::snprintf(head, sizeof head, "replay: rank %d reached the call its Flight Recorder dump left %s: where the job hung",
                s->recording->manifest().rank, e.state.c_str());
  const std::string report = std::string(head) + "\n  " + where + "\n" + ranks +
                             "  the dump's Python stack (innermost first):\n" + stack +
                             "  replayed call site:" + callSite() + "\n  " + then;
  // The one thing this replay is for: said whatever NCCL_DEBUG is (WARN also makes it ncclGetLastError's text,
  // which PyTorch puts in the error it raises).
  SAY("%s", report.c_str());
  if (s->breakAtHang) {
    std::fprintf(stderr, "ranklens: break_at: hang: raising SIGTRAP (under a debugger: continue to go on)\n");
    raise(SIGTRAP);
  }
  if (at == ranklens::config::AtHang::kWait) {
    ranklens_hang_wait = 1;
    const int pid = static_cast<int>(getpid());
    std::fprintf(stderr,
                 "ranklens: waiting at the hang for a debugger: pid %d. py-spy dump --pid %d shows the Python stack; "
                 "gdb -p %d -ex 'set var ranklens_hang_wait = 0' -ex continue lets the call fail and the program go "
                 "on\n", pid, pid, pid);
    while (ranklens_hang_wait != 0) usleep(100000);
  }
  lock->lock();
  return at == ranklens::config::AtHang::kContinue;
}

}  // namespace

ncclResult_t planCall(CallInfo* info, const ranklens::events::Call& event) {
  Session* s = load();
  info->seq = event.seq;
  if (s == nullptr) return ncclSuccess;
  // Asked once for the call: its mark, its payload and its pacing depend on it.
  if (s->fidelity != Fidelity::kStructure) info->captured = Runtime::get().device().capturing(info->stream);
  std::unique_lock<std::mutex> lock(s->mu);
  Counters& c = s->counters;
  c.calls++;
  const RecordedCall* match = nullptr;  // none without a recording: every call is then estimated
  if (s->recording) {
    const ncclResult_t matched = matchRecorded(s, info, event, &lock, &match);
    if (matched != ncclSuccess) return matched;
  }
  info->recorded = match;
  if (match != nullptr && match->flightRecorder && match->flightRecorder->state != "completed" &&
      !reportHang(s, *match, &lock)) {
    return ncclInvalidUsage;
  }
  if (s->fidelity == Fidelity::kStructure) return ncclSuccess;
  if (estimatesCalls(*s)) {
    info->stepPhase = s->stepOccurrences.phase(event.timeNs);  // a group's: its first call's on the stream
    if (event.groupId == 0) info->stepOccurrence = s->stepOccurrences.next(event.op, event.bytes, false);
  }
  if (match != nullptr && !s->estimateAll && (match->durationNs >= 0 || match->call.groupId != 0)) {
    info->durationNs = match->durationNs;  // a later call of a recorded group has none: the first holds the group
  } else if (match != nullptr || s->policy == OnMismatch::kEstimate) {
    // Also a recorded call without a duration (captured into a CUDA graph, or its timing lost): it took time all
    // the same, and under a capture the hold becomes part of the program's graph.
    if (match != nullptr && !s->estimateAll) c.untimed++;
    info->durationNs = estimateNs(s, *info, event.bytes);
    info->estimated = true;
    c.estimated++;
  }
  return ncclSuccess;
}

// The breakpoint target of docs/debugging.md: called with the call and the bytes about to be restored.
extern "C" __attribute__((noinline, used)) void ranklens_restore_payload(
    uint64_t comm, uint64_t seq, const char* op, void* recvbuff, const void* data, size_t bytes) {
  asm volatile("" : : "r"(comm), "r"(seq), "r"(op), "r"(recvbuff), "r"(data), "r"(bytes) : "memory");
}

namespace {
// The bytes the call receives (Send: sends), as its Call record counts them.
uint64_t bytesOf(const CallInfo& c) {
  return ranklens::events::receivedBytes(c.op, c.count, c.datatype, c.comm->nRanks, c.comm->rank, c.root);
}

}  // namespace

bool simulatedMicroseconds(const CallInfo& info, float* us) {
  Session* s = session;
  if (s == nullptr || !s->estimator) return false;
  const int nranks = info.comm->nRanks;
  const ranklens::timing::Estimate e =
      s->estimator->estimate(static_cast<int>(info.op), nranks,
                             ranklens::timing::crossesNodes(s->localWorldSize, nranks), bytesOf(info), info.comm->name);
  *us = static_cast<float>(static_cast<double>(e.durationNs) / 1000.0);
  return true;
}

namespace {
// Whether this fidelity restores the call's recorded payload (see Session::controlPayloadBytes).
bool restores(const Session& s, const RecordedCall* rc) {
  if (rc == nullptr || !rc->payload) return false;
  return s.fidelity == Fidelity::kValue ||
         (s.fidelity == Fidelity::kTiming && rc->payload->rawBytes <= s.controlPayloadBytes);
}
}  // namespace

bool restorePayload(const CallInfo& info, ncclResult_t* result) {
  *result = ncclSuccess;
  Session* s = session;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return false;
  const RecordedCall* rc = info.recorded;
  const uint64_t bytes = bytesOf(info);
  if (bytes == 0 || info.op == Op::kSend) return false;
  if (!restores(*s, rc) || !s->prefetcher) {
    if (s->fidelity == Fidelity::kValue) {  // at timing only control payloads are restored: the rest is expected
      std::lock_guard<std::mutex> lock(s->mu);
      s->counters.filledWithoutPayload++;
    }
    return false;
  }
  ranklens::trace::PayloadPrefetcher::Staged staged;
  std::string error;
  if (info.captured) {
    // A copy captured into a graph would put this one recording's bytes into the buffer at every launch of the
    // graph (and its fence would be an event of the capture): the recorded run did not capture this call.
    static std::once_flag warned;
    std::call_once(warned, [&] {
      WARN("replay: %s comm %lu seq %lu is captured into a CUDA graph, but the recording has its payload (the "
           "recorded run did not capture it): not restored, the receive buffer gets the fill semantics "
           "(replay_payloads_skipped_captured counts such calls)",
           info.opName, static_cast<unsigned long>(info.comm->id), static_cast<unsigned long>(info.seq));
    });
    if (s->prefetcher->acquire(rc, &staged, &error) || staged.data) s->prefetcher->release(rc, nullptr);
    std::lock_guard<std::mutex> lock(s->mu);
    s->counters.payloadsSkippedCaptured++;
    s->counters.filledWithoutPayload++;
    return false;
  }
  if (!s->prefetcher->acquire(rc, &staged, &error) || staged.bytes != bytes) {
    if (error.empty())
      error = "recorded " + std::to_string(staged.bytes) + " bytes, the call receives " + std::to_string(bytes);
    if (staged.data) s->prefetcher->release(rc, nullptr);
    // A recorded payload that cannot be read is a wrong answer, not a detail: the receive buffer would get the fill
    // and every value computed from it would be another run's. Said on stderr whatever NCCL_DEBUG is, because a
    // replay that reports success with a filled call is the failure this setting exists to prevent.
    const bool stop = s->onPayloadError == ranklens::config::OnPayloadError::kError;
    ::nccl_fake::sayAlways(stop ? "error" : "warning", __FILE__, __LINE__,
                           "replay: %s comm %lu seq %lu: the recorded payload cannot be restored: %s; %s", info.opName,
                           static_cast<unsigned long>(info.comm->id), static_cast<unsigned long>(info.seq),
                           error.c_str(),
                           stop ? "the call fails with ncclSystemError (check the trace with rlpayload verify; "
                                  "RANKLENS_ON_PAYLOAD_ERROR=warn fills the call and goes on)"
                                : "the receive buffer gets the fill semantics: this rank's values are not the "
                                  "recorded run's from this call on (on_payload_error: warn)");
    std::lock_guard<std::mutex> lock(s->mu);
    s->counters.payloadFailures++;
    if (stop) {
      *result = ncclSystemError;
      return true;
    }
    s->counters.filledWithoutPayload++;
    return false;
  }
  ranklens_restore_payload(info.comm->id, info.seq, info.opName, info.recvbuff, staged.data, staged.bytes);
  info.restoredBytes = staged.bytes;
  info.restoredFromDevice = staged.onDevice;
  auto& device = Runtime::get().device();
  uint64_t fence = 0;
  const int copyErr = device.copy(info.recvbuff, staged.data, staged.bytes, info.stream);
  const int fenceErr = copyErr == 0 ? device.fence(info.stream, &fence) : 0;
  if (copyErr != 0 || fenceErr != 0) {
    WARN("replay: %s comm %lu seq %lu: restoring the recorded payload failed: %s", info.opName,
         static_cast<unsigned long>(info.comm->id), static_cast<unsigned long>(info.seq),
         ranklens::device::lastError().c_str());
    // Without a fence the copy's completion is unknown: wait for the stream's work to settle by never reusing it.
    s->prefetcher->release(rc, copyErr == 0 ? std::function<bool()>([] { return false; }) : nullptr);
    *result = ncclUnhandledCudaError;
    return true;
  }
  s->prefetcher->release(rc, [&device, fence] { return device.passed(fence); });
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.payloadsRestored++;
  s->counters.payloadBytesRestored += staged.bytes;
  return true;
}

namespace {

// peer_pacing: the chain and pace of a collective outside a group (PaceRequest; chain 0: not paced). Lock-free: the
// chain was set at the communicator's creation and the paces at load.
ranklens::device::PaceRequest paceOf(const Session& s, const CallInfo& info, int64_t restoreNs, bool kernelTime) {
  ranklens::device::PaceRequest pace;
  if (!s.pacing || info.comm->paceChain == 0 || ranklens::events::isP2p(info.op)) return pace;
  // A hold captured into a CUDA graph runs at every launch with the index of its capture: the chain would hand a
  // later launch the end an earlier launch wrote. Captured holds keep their own duration.
  if (info.captured) return pace;
  pace.chain = info.comm->paceChain;
  pace.index = info.seq + 1;
  const RecordedCall* rc = info.recorded;
  if (rc == nullptr || info.estimated || rc->order >= s.paces.size() || !s.paces[rc->order].known) return pace;
  const auto& p = s.paces[rc->order];
  pace.known = true;
  pace.peerGapNs = p.peerGapNs;
  pace.lastNs = static_cast<uint64_t>(holdFor(s, p.lastNs, restoreNs, info.arrival != 0, kernelTime));
  return pace;
}

// `callBytes`: the call's (or the group's calls' on this stream) buffer bytes, for holds that move memory.
ncclResult_t holdStream(Session* s, const CallInfo& info, int64_t durationNs, int64_t restoreNs, uint64_t groupId,
                        uint64_t callBytes) {
  if (durationNs < 0) return ncclSuccess;
  const bool kernelTime = info.recorded != nullptr && !info.estimated && info.recorded->kernelClock;
  const int64_t ns = holdFor(*s, durationNs, restoreNs, info.arrival != 0, kernelTime);
  const ranklens::device::PaceRequest pace =
      groupId == 0 ? paceOf(*s, info, restoreNs, kernelTime) : ranklens::device::PaceRequest{};
  ranklens::trace::Timing t;
  t.commId = info.comm->id;
  t.seq = info.seq;
  t.op = static_cast<int>(info.op);
  t.stream = reinterpret_cast<uint64_t>(info.stream);
  t.groupId = groupId;
  t.startNs = monotonicNs();
  t.durationNs = durationNs;
  t.peer = ranklens::events::isP2p(info.op) ? info.root : -1;
  t.clock = info.estimated ? ranklens::trace::kClockEstimated
                           : kernelTime ? ranklens::trace::kClockKernel : ranklens::trace::kClockEvents;
  Runtime::get().emit(ranklens::trace::RecordType::kTiming, t);
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->counters.holds++;
    s->counters.heldNs += static_cast<uint64_t>(ns);
    s->counters.pacedHolds += pace.known;
  }
  if (ns == 0 && pace.chain == 0) return ncclSuccess;
  ranklens::device::HoldRequest hold;
  hold.nanoseconds = static_cast<uint64_t>(ns);
  hold.label = groupId ? "Group" : info.opName;
  hold.arrival = info.arrival;
  hold.callBytes = callBytes;
  hold.pace = pace;
  if (Runtime::get().device().hold(hold, info.stream) != 0) {
    WARN("replay: %s: holding the stream for %ld ns failed: %s", info.opName, static_cast<long>(ns),
         ranklens::device::lastError().c_str());
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

}  // namespace

namespace {
void waitUntil(Session* s, int64_t deadlineNs) {
  int64_t now = monotonicNs();
  if (now >= deadlineNs) return;
  const int64_t waited = deadlineNs - now;
  // Sleep the long part (the kernel wakes us ~50 us late at worst), spin the rest for precision.
  if (waited > 200'000) {
    const int64_t sleepNs = waited - 100'000;
    timespec t{static_cast<time_t>(sleepNs / 1'000'000'000), static_cast<long>(sleepNs % 1'000'000'000)};
    nanosleep(&t, nullptr);
  }
  while (monotonicNs() < deadlineNs) {
  }
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.hostHeldNs += static_cast<uint64_t>(waited);
}
}  // namespace

void holdHost(int64_t startNs, const CallInfo& info) {
  Session* s = session;
  if (s == nullptr || !s->hostTime || s->fidelity == Fidelity::kStructure || info.recorded == nullptr) return;
  if (info.recorded->call.hostNs > 0)
    waitUntil(s, startNs + hostTimeToReplay(s, info.recorded->call.op, info.recorded->call.hostNs));
}

void holdHostGroup(int64_t startNs, const std::vector<CallInfo>& calls) {
  Session* s = session;
  if (s == nullptr || !s->hostTime || s->fidelity == Fidelity::kStructure) return;
  for (const CallInfo& c : calls) {
    if (c.recorded == nullptr || c.recorded->call.groupId == 0) continue;
    const int64_t ns = s->recording->groupHostNs(c.recorded->call.groupId);
    if (ns > 0) waitUntil(s, startNs + hostTimeToReplay(s, kGroupHostKey, ns));
    return;
  }
}

namespace {
ncclResult_t arriveOn(const CallInfo& info, uint64_t* arrival) {
  if (Runtime::get().device().arrive(info.stream, info.captured, arrival) == 0) return ncclSuccess;
  WARN("replay: %s: marking the stream's arrival failed: %s", info.opName, ranklens::device::lastError().c_str());
  return ncclUnhandledCudaError;
}
}  // namespace

ncclResult_t markArrival(CallInfo* info) {
  Session* s = session;
  if (s == nullptr || s->fidelity == Fidelity::kStructure || info->durationNs < 0) return ncclSuccess;
  return arriveOn(*info, &info->arrival);
}

// A group's stream is held even when its first call has no duration of its own (holdGroup), so every stream is
// marked.
ncclResult_t markArrivals(std::vector<CallInfo>* calls) {
  Session* s = session;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  for (CallInfo& first : *calls) {
    if (first.arrival != 0) continue;
    uint64_t arrival = 0;
    NCCLCHECK(arriveOn(first, &arrival));
    if (arrival == 0) return ncclSuccess;  // no marks on this device
    for (CallInfo& c : *calls)
      if (c.stream == first.stream) c.arrival = arrival;
  }
  return ncclSuccess;
}

ncclResult_t settle(ncclResult_t ret) {
  if (Runtime::get().device().settle() == 0) return ret;
  WARN("replay: enqueueing the call's arrival mark failed: %s", ranklens::device::lastError().c_str());
  return ret == ncclSuccess ? ncclUnhandledCudaError : ret;
}

ncclResult_t holdCall(const CallInfo& info) {
  Session* s = session;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  return holdStream(s, info, info.durationNs, restoreCostNs(*s, info), 0, bytesOf(info));
}

ncclResult_t holdGroup(const std::vector<CallInfo>& calls) {
  Session* s = session;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  // The recording timed each stream of a group once, on the stream's first call. An unmatched (or estimated) first
  // call: the history's groups of the same first op and bytes on a stream when it has them, else the longest
  // estimate of the stream's calls (they run together).
  std::vector<cudaStream_t> done;
  for (const CallInfo& first : calls) {
    if (std::find(done.begin(), done.end(), first.stream) != done.end()) continue;
    done.push_back(first.stream);
    // Recorded without a duration (captured into a CUDA graph, or its timing lost): estimated like an unmatched group,
    // as planCall does for a call outside groups.
    const bool untimed = first.recorded && !first.estimated && first.recorded->durationNs < 0;
    int64_t duration = first.recorded && !first.estimated ? first.durationNs : -1;
    int64_t restoreNs = 0;
    uint64_t bytes = 0;
    for (const CallInfo& c : calls) {
      if (c.stream != first.stream) continue;
      restoreNs += restoreCostNs(*s, c);
      bytes += bytesOf(c);
      if (first.estimated && c.estimated) duration = std::max(duration, c.durationNs);
    }
    int occurrence = -1;
    if (estimatesCalls(*s)) {
      std::lock_guard<std::mutex> lock(s->mu);
      occurrence = s->stepOccurrences.next(static_cast<int>(first.op), bytes, true);
    }
    CallInfo held = first;
    if (first.estimated || untimed) {
      const int nranks = first.comm->nRanks;
      const ranklens::timing::Estimate group = s->estimator->estimate(
          static_cast<int>(first.op), nranks, ranklens::timing::crossesNodes(s->localWorldSize, nranks), bytes,
          first.comm->name, true, occurrence, first.stepPhase);
      if (untimed || (group.neighbours > 0 && !group.extrapolated)) {  // recorded groups
        duration = group.durationNs;
        std::lock_guard<std::mutex> lock(s->mu);
        countEstimate(s->counters, group);
      }
      held.estimated = true;
    }
    if (untimed) {
      std::lock_guard<std::mutex> lock(s->mu);
      s->counters.untimed++;
      s->counters.estimated++;
    }
    NCCLCHECK(holdStream(s, held, duration, restoreNs, first.recorded ? first.recorded->call.groupId : 1, bytes));
  }
  return ncclSuccess;
}

void finish() {
  Session* s = session;
  if (s == nullptr) return;
  Counters c;
  ranklens::trace::PrefetchStats p;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    c = s->counters;
  }
  if (s->prefetcher) p = s->prefetcher->stats();
  if (auto* writer = Runtime::get().writer()) {
    const std::pair<const char*, uint64_t> values[] = {
        {"replay_calls", c.calls},
        {"replay_calls_matched", c.matched},
        {"replay_mismatches", c.mismatches},
        {"replay_resyncs", c.resyncs},
        {"replay_recorded_calls_skipped", c.recordedSkipped},
        {"replay_extra_calls", c.extra},
        {"replay_estimated", c.estimated},
        {"replay_estimates_extrapolated", c.estimatesExtrapolated},
        {"replay_estimates_from_benchmarks", c.estimatesFromBenchmarks},
        {"replay_untimed", c.untimed},
        {"replay_host_capped_ns", c.hostCappedNs},
        {"replay_holds_paced", c.pacedHolds},
        {"replay_holds", c.holds},
        {"replay_held_ns", c.heldNs},
        {"replay_host_held_ns", c.hostHeldNs},
        {"replay_payloads_restored", c.payloadsRestored},
        {"replay_payload_bytes_restored", c.payloadBytesRestored},
        {"replay_payload_failures", c.payloadFailures},
        {"replay_filled_without_payload", c.filledWithoutPayload},
        {"replay_payloads_skipped_captured", c.payloadsSkippedCaptured},
        {"replay_comms_matched", c.commsMatched},
        {"replay_comms_unmatched", c.commsUnmatched},
        {"replay_comms_rebound", c.commsRebound},
        {"replay_prefetch_waits", p.waits},
        {"replay_prefetch_evicted", p.evicted},
        {"replay_prefetch_oversized", p.oversized},
        {"replay_payloads_uploaded", p.uploaded},
        {"replay_payload_bytes_uploaded", p.bytesUploaded},
        {"replay_payloads_from_device", p.fromDevice},
        {"replay_payload_upload_failures", p.uploadFailures},
        {"replay_recorded_calls", s->recording ? s->recording->callCount() : 0},
        {"replay_hold_fixed_ns", static_cast<uint64_t>(s->calibration.holdFixedNs)},
    };
    for (const auto& [name, value] : values) writer->setCounter(name, value);
  }
  if (!s->recording) {
    INFO(kSubRanklens, "replay summary (no recording): %lu calls, each held for its estimate (%lu extrapolated "
         "beyond the history, %lu from nccl-tests samples), %lu holds",
         static_cast<unsigned long>(c.calls), static_cast<unsigned long>(c.estimatesExtrapolated),
         static_cast<unsigned long>(c.estimatesFromBenchmarks), static_cast<unsigned long>(c.holds));
    return;
  }
  // At value fidelity a call filled for want of its payload makes the rank's values another run's.
  const bool faithful = c.mismatches == 0 && c.commsUnmatched == 0 && c.payloadFailures == 0 &&
                        (s->fidelity != Fidelity::kValue || c.filledWithoutPayload == 0);
  char line[512];
  snprintf(line, sizeof line,
           "replay summary: %lu calls, %lu matched, %lu mismatched (%lu resynchronised, %lu recorded calls skipped, "
           "%lu extra, %lu estimated), %lu payloads restored (%lu bytes), %lu filled without payload, %lu holds",
           static_cast<unsigned long>(c.calls), static_cast<unsigned long>(c.matched),
           static_cast<unsigned long>(c.mismatches), static_cast<unsigned long>(c.resyncs),
           static_cast<unsigned long>(c.recordedSkipped), static_cast<unsigned long>(c.extra),
           static_cast<unsigned long>(c.estimated), static_cast<unsigned long>(c.payloadsRestored),
           static_cast<unsigned long>(c.payloadBytesRestored), static_cast<unsigned long>(c.filledWithoutPayload),
           static_cast<unsigned long>(c.holds));
  if (faithful) INFO(kSubRanklens, "%s", line);
  else WARN("%s", line);
  // Decoding that could not run far enough ahead holds the program up (in a value replay, every payload is decoded).
  if (s->fidelity == Fidelity::kValue && p.waits > 0 && s->prefetchArenaBytes < 4 * s->largestStepPayloadBytes)
    WARN("replay: the program waited %lu times for payloads to be decoded: prefetch_bytes gave %.0f MiB of pinned "
         "memory, less than 4x the recording's largest step of payloads (%.0f MiB), so the replayed steps may run "
         "slower than recorded; raise prefetch_bytes (docs/config.md)",
         static_cast<unsigned long>(p.waits), s->prefetchArenaBytes / 1048576.0, s->largestStepPayloadBytes / 1048576.0);
}

}  // namespace replay
}  // namespace nccl_fake

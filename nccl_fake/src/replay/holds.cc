// SPDX-License-Identifier: Apache-2.0
// Holds and pacing: a call's duration as a hold on its stream from its arrival mark, a group's per stream, paced by
// the peers' recorded pace; and the recorded host time as a wait of the calling thread.
#include "holds.h"

#include <time.h>

#include <set>
#include <string>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "ranklens/host_time.h"
#include "session.h"

namespace nccl_fake {
namespace replay {

using ranklens::Status;
using ranklens::config::Fidelity;
using ranklens::trace::RecordedCall;

namespace {

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

// peer_pacing: recorded. Every rank of the replayed rank's trace root is read once; fails (saying why) when a rank
// is missing or no call can be paced.
Status loadPaces(const ranklens::trace::Recording& recording, std::vector<ranklens::timing::PeerPace>* paces) {
  const auto& m = recording.manifest();
  const std::string& dir = recording.directory();
  const size_t slash = dir.find_last_of('/');
  const std::string root = slash == std::string::npos ? "." : dir.substr(0, slash);
  if (m.world_size < 2 || m.rank < 0 || m.rank >= m.world_size)
    return Status::invalidUsage("the recording " + dir + " names no job of several ranks (world size " +
                                std::to_string(m.world_size) + ")");
  std::vector<std::unique_ptr<ranklens::trace::Recording>> peers;
  std::vector<const ranklens::trace::Recording*> ranks;
  for (int r = 0; r < m.world_size; ++r) {
    if (r == m.rank) {
      ranks.push_back(&recording);
      continue;
    }
    std::string error;
    peers.emplace_back();
    error = ranklens::trace::Recording::open(root, r, &peers.back()).message();
    if (!peers.back()) {
      error = error.substr(0, error.find("; replay a recorded rank"));  // Recording::open's advice is for RANK
      return Status::invalidUsage("it needs every rank's recording in " + root + ", and rank " + std::to_string(r) +
                                  "'s cannot be read (" + error +
                                  "); record every rank into one trace root, or set "
                                  "peer_pacing: off");
    }
    ranks.push_back(peers.back().get());
  }
  *paces = ranklens::timing::peerPace(ranks, static_cast<size_t>(m.rank));
  const auto known = std::count_if(paces->begin(), paces->end(), [](const auto& p) { return p.known; });
  if (known == 0)
    return Status::invalidUsage("no collective of " + root +
                                " has every rank's gap (Timing.gapNs: recorded by "
                                "RankLens with trace format 1.6 or later)");
  INFO(kSubInit | kSubRanklens, "replay: peer_pacing: %ld of %zu recorded calls paced by %d ranks' recordings in %s",
       static_cast<long>(known), paces->size(), m.world_size, root.c_str());
  return Status::ok();
}

// The host time to replay for a recorded call or group (`key`: its op, or kGroupHostKey), counting what is left out.
int64_t hostTimeToReplay(Session* s, int key, int64_t recordedNs) {
  auto it = s->holds.hostCaps.find(key);
  if (it == s->holds.hostCaps.end() || recordedNs <= it->second) return recordedNs;
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.hostCappedNs += static_cast<uint64_t>(recordedNs - it->second);
  return it->second;
}

// The calibrated time of the copy restorePayload enqueued for the call (from pinned or from device memory), 0 if none.
int64_t restoreCostNs(const Holds& h, const CallInfo& info) {
  if (info.restoredBytes == 0) return 0;
  const auto& c = h.calibration;
  const double bytes = static_cast<double>(info.restoredBytes);
  return info.restoredFromDevice ? c.deviceCopyFixedNs + static_cast<int64_t>(c.deviceCopyNsPerByte * bytes)
                                 : c.copyFixedNs + static_cast<int64_t>(c.copyNsPerByte * bytes);
}

// peer_pacing: the chain and pace of a collective outside a group (PaceRequest; chain 0: not paced). Lock-free: the
// chain was set at the communicator's creation and the paces at load.
ranklens::device::PaceRequest paceOf(const Holds& h, const CallInfo& info, int64_t restoreNs, bool kernelTime) {
  ranklens::device::PaceRequest pace;
  if (!h.pacing || info.comm->paceChain == 0 || ranklens::events::isP2p(info.op)) return pace;
  // A hold captured into a CUDA graph runs at every launch with the index of its capture: the chain would hand a
  // later launch the end an earlier launch wrote. Captured holds keep their own duration.
  if (info.captured) return pace;
  pace.chain = info.comm->paceChain;
  pace.index = info.seq + 1;
  const RecordedCall* rc = info.recorded;
  if (rc == nullptr || info.estimated || rc->order >= h.paces.size() || !h.paces[rc->order].known) return pace;
  const auto& p = h.paces[rc->order];
  pace.known = true;
  pace.peerGapNs = p.peerGapNs;
  pace.lastNs = static_cast<uint64_t>(holdFor(h, p.lastNs, restoreNs, info.arrival != 0, kernelTime));
  return pace;
}

// The Timing record of a hold in the replay trace: what was held, for how long and by which clock.
void emitTiming(const CallInfo& info, int64_t durationNs, uint64_t groupId, bool kernelTime) {
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
            : kernelTime   ? ranklens::trace::kClockKernel
                           : ranklens::trace::kClockEvents;
  Runtime::get().emit(ranklens::trace::RecordType::kTiming, t);
}

// `callBytes`: the call's (or the group's calls' on this stream) buffer bytes, for holds that move memory. On the
// per-call path: a Status is built (and turned into the WARN and NCCL's code) only when the hold fails.
ncclResult_t holdStream(Session* s, const CallInfo& info, int64_t durationNs, int64_t restoreNs, uint64_t groupId,
                        uint64_t callBytes) {
  if (durationNs < 0) return ncclSuccess;
  const bool kernelTime = info.recorded != nullptr && !info.estimated && info.recorded->kernelClock;
  const int64_t ns = holdFor(s->holds, durationNs, restoreNs, info.arrival != 0, kernelTime);
  const ranklens::device::PaceRequest pace =
      groupId == 0 ? paceOf(s->holds, info, restoreNs, kernelTime) : ranklens::device::PaceRequest{};
  emitTiming(info, durationNs, groupId, kernelTime);
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
  if (Runtime::get().device().hold(hold, info.stream) == 0) return ncclSuccess;
  return toNccl(Status::cudaError("replay: " + std::string(info.opName) + ": holding the stream for " +
                                  std::to_string(ns) + " ns failed: " + ranklens::device::lastError()));
}

// The duration to hold a group's stream for, from its first call there (`held`, marked estimated when the duration
// is estimated). The recording timed each stream of a group once, on the stream's first call. An unmatched (or
// estimated) first call: the history's groups of the same first op and bytes on a stream when it has them, else the
// longest estimate of the stream's calls (they run together). Recorded without a duration (captured into a CUDA
// graph, or its timing lost): estimated like an unmatched group, as planCall does for a call outside groups.
int64_t groupDuration(Session* s, const std::vector<CallInfo>& calls, CallInfo* held, uint64_t bytes) {
  const CallInfo& first = *held;
  const bool untimed = first.recorded && !first.estimated && first.recorded->durationNs < 0;
  int64_t duration = first.recorded && !first.estimated ? first.durationNs : -1;
  if (first.estimated)
    for (const CallInfo& c : calls)
      if (c.stream == first.stream && c.estimated) duration = std::max(duration, c.durationNs);
  int occurrence = -1;
  if (estimatesCalls(*s)) {
    std::lock_guard<std::mutex> lock(s->mu);
    occurrence = s->estimates.stepOccurrences.next(static_cast<int>(first.op), bytes, true);
  }
  if (!first.estimated && !untimed) return duration;
  const ranklens::timing::Estimate group = estimateGroup(*s, first, bytes, occurrence);
  std::lock_guard<std::mutex> lock(s->mu);
  if (untimed || (group.neighbours > 0 && !group.extrapolated)) {  // recorded groups
    duration = group.durationNs;
    countEstimate(s->counters, group);
  }
  if (untimed) {
    s->counters.untimed++;
    s->counters.estimated++;
  }
  held->estimated = true;
  return duration;
}

// Marks the stream's arrival; a Status (the WARN and NCCL's code) only when that fails, as for holdStream.
ncclResult_t arriveOn(const CallInfo& info, uint64_t* arrival) {
  if (Runtime::get().device().arrive(info.stream, info.captured, arrival) == 0) return ncclSuccess;
  return toNccl(Status::cudaError("replay: " + std::string(info.opName) +
                                  ": marking the stream's arrival failed: " + ranklens::device::lastError()));
}

// Waits until `deadlineNs` (monotonic): sleeps the long part (the kernel wakes us ~50 us late at worst), spins the
// rest for precision.
void waitUntil(Session* s, int64_t deadlineNs) {
  int64_t now = monotonicNs();
  if (now >= deadlineNs) return;
  const int64_t waited = deadlineNs - now;
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

void loadHolds(Session* s, const ranklens::config::Settings& st, bool recorded) {
  Holds& h = s->holds;
  h.hostTime = st.host_time != ranklens::config::HostTime::kIgnore;
  if (recorded && st.host_time == ranklens::config::HostTime::kOwn) h.hostCaps = ownHostCaps(*s->recording);
  if (recorded && st.peer_pacing == ranklens::config::PeerPacing::kRecorded && s->fidelity != Fidelity::kStructure) {
    if (st.completion != ranklens::config::Completion::kKernel) {
      WARN("replay: peer_pacing: recorded needs completion: kernel; holds are not paced");
    } else {
      const Status paced = loadPaces(*s->recording, &h.paces);
      h.pacing = paced.isOk();
      if (!h.pacing) WARN("replay: peer_pacing: recorded: %s; holds are not paced", paced.message().c_str());
    }
  }
  if (s->fidelity != Fidelity::kStructure) h.calibration = Runtime::get().device().calibrate();
}

void holdHost(int64_t startNs, const CallInfo& info) {
  Session* s = loaded;
  if (s == nullptr || !s->holds.hostTime || s->fidelity == Fidelity::kStructure || info.recorded == nullptr) return;
  if (info.recorded->call.hostNs > 0)
    waitUntil(s, startNs + hostTimeToReplay(s, info.recorded->call.op, info.recorded->call.hostNs));
}

void holdHostGroup(int64_t startNs, const std::vector<CallInfo>& calls) {
  Session* s = loaded;
  if (s == nullptr || !s->holds.hostTime || s->fidelity == Fidelity::kStructure) return;
  for (const CallInfo& c : calls) {
    if (c.recorded == nullptr || c.recorded->call.groupId == 0) continue;
    const int64_t ns = s->recording->groupHostNs(c.recorded->call.groupId);
    if (ns > 0) waitUntil(s, startNs + hostTimeToReplay(s, kGroupHostKey, ns));
    return;
  }
}

ncclResult_t markArrival(CallInfo* info) {
  Session* s = loaded;
  if (s == nullptr || s->fidelity == Fidelity::kStructure || info->durationNs < 0) return ncclSuccess;
  return arriveOn(*info, &info->arrival);
}

// A group's stream is held even when its first call has no duration of its own (holdGroup), so every stream is
// marked.
ncclResult_t markArrivals(std::vector<CallInfo>* calls) {
  Session* s = loaded;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  for (CallInfo& first : *calls) {
    if (first.arrival != 0) continue;
    uint64_t arrival = 0;
    const ncclResult_t arrived = arriveOn(first, &arrival);
    if (arrived != ncclSuccess) return arrived;
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
  Session* s = loaded;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  return holdStream(s, info, info.durationNs, restoreCostNs(s->holds, info), 0, bytesOf(info));
}

ncclResult_t holdGroup(const std::vector<CallInfo>& calls) {
  Session* s = loaded;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return ncclSuccess;
  std::vector<cudaStream_t> done;
  for (const CallInfo& first : calls) {
    if (std::find(done.begin(), done.end(), first.stream) != done.end()) continue;
    done.push_back(first.stream);
    int64_t restoreNs = 0;
    uint64_t bytes = 0;
    for (const CallInfo& c : calls) {
      if (c.stream != first.stream) continue;
      restoreNs += restoreCostNs(s->holds, c);
      bytes += bytesOf(c);
    }
    CallInfo held = first;
    const int64_t duration = groupDuration(s, calls, &held, bytes);
    const ncclResult_t ret =
        holdStream(s, held, duration, restoreNs, first.recorded ? first.recorded->call.groupId : 1, bytes);
    if (ret != ncclSuccess) return ret;
  }
  return ncclSuccess;
}

}  // namespace replay
}  // namespace nccl_fake

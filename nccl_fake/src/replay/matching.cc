// SPDX-License-Identifier: Apache-2.0
// Matching replayed calls to recorded ones, and planCall: the match, the hang it may reach, and the duration to
// hold (recorded, else estimated).
#include "matching.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "session.h"

namespace nccl_fake {
namespace replay {

using ranklens::Status;
using ranklens::config::Fidelity;
using ranklens::config::OnMismatch;
using ranklens::events::Op;
using ranklens::trace::CallKey;
using ranklens::trace::RecordedCall;
using ranklens::trace::SeqKind;

namespace {

// Whether a comma-separated list (FlightRecorderEntry::unknown) names `field`.
bool names(const std::string& list, const char* field) {
  const size_t n = std::strlen(field);
  for (size_t at = list.find(field); at != std::string::npos; at = list.find(field, at + 1)) {
    if ((at == 0 || list[at - 1] == ',') && (at + n == list.size() || list[at + n] == ',')) return true;
  }
  return false;
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

// The recorded call matching `info` on its bound communicator: the one at its sequence (plus the communicator's
// offset), else one up to resync_window ahead, which moves the offset (the program skipped recorded calls).
// `expected`: the one at its sequence, matching or not.
const RecordedCall* findRecorded(Session* s, const Bindings::Binding& binding, const CallInfo& info,
                                 const ranklens::events::Call& event, int64_t* offset, const RecordedCall** expected) {
  const SeqKind kind = ranklens::trace::seqKindOf(static_cast<int>(info.op));
  const int peer = kind == SeqKind::kCollective ? -1 : info.root;
  const int64_t at = static_cast<int64_t>(event.seq) + *offset;
  CallKey key{static_cast<uint64_t>(binding.recordedId), kind, peer, static_cast<uint64_t>(std::max<int64_t>(at, 0))};
  *expected = at >= 0 ? s->recording->find(key) : nullptr;
  if (*expected && sameSignature((*expected)->call, info, unknownOf(*expected))) return *expected;
  for (int k = 1; k <= s->matching.window && at >= 0; ++k) {
    key.seq = static_cast<uint64_t>(at + k);
    const RecordedCall* ahead = s->recording->find(key);
    if (ahead == nullptr) break;
    if (sameSignature(ahead->call, info, unknownOf(ahead))) {
      *offset += k;
      s->counters.resyncs++;
      s->counters.recordedSkipped += static_cast<uint64_t>(k);
      return ahead;
    }
  }
  return nullptr;
}

// A call that differs from the recording at its place (`match`: found later, or none): counted, and reported
// (the first, then every 1000th). Fails under on_mismatch: error, with the report as the message.
Status reportMismatch(Session* s, const CallInfo& info, const ranklens::events::Call& event, bool bound,
                      const RecordedCall* expected, const RecordedCall* match, std::unique_lock<std::mutex>* lock) {
  Counters& c = s->counters;
  c.mismatches++;
  const bool first = !s->matching.reportedFirst;
  s->matching.reportedFirst = true;
  const std::string replayed = describeCall("replayed", info.comm->id, event.seq, static_cast<int>(info.op),
                                            info.datatype, info.count, event.rootOrPeer, event.redop);
  // Damage cuts the recording short: a call missing past it may well be in the part no reader can trust.
  const ranklens::trace::Problem* loss = ranklens::trace::firstLoss(s->recording->problems());
  const std::string recorded =
      !bound ? std::string("recorded: (communicator not matched)")
      : expected
          ? describeCall("recorded", expected->call.commId, expected->call.seq, expected->call.op,
                         expected->call.datatype, expected->call.count, expected->call.rootOrPeer, expected->call.redop)
      : loss == nullptr ? std::string("recorded: (no call at this sequence: the recording ends)")
                        : "recorded: (no call at this sequence: the recording is read only up to its damage, " +
                              loss->describe() + "; rlpayload verify says more)";
  if (s->policy == OnMismatch::kError) {
    lock->unlock();
    return Status::invalidUsage(
        std::string("replay: ") + (first ? "first" : "a") + " call differs from the recording " +
        s->recording->directory() + "\n  " + replayed + "\n  " + recorded +
        (match ? "\n  (found later in the recording: the program skipped recorded calls)" : "") +
        "\n  call site:" + callSite() +
        "\n  Set RANKLENS_ON_MISMATCH=warn (replay it without recording) or estimate (estimated duration) to "
        "continue");
  }
  if (first || ++s->matching.warned % 1000 == 0) {
    lock->unlock();
    WARN("replay: %s call differs from the recording%s (%lu so far)\n  %s\n  %s\n  call site:%s", first ? "first" : "a",
         match ? " (resynchronised: the program skipped recorded calls)" : "", static_cast<unsigned long>(c.mismatches),
         replayed.c_str(), recorded.c_str(), callSite().c_str());
    lock->lock();
  }
  return Status::ok();
}

// The recorded call that `info` replays into *out, or nullptr: its communicator's binding made final at its first
// call, the call matched by sequence and signature, resynchronised when the program skipped recorded calls. A call
// the recording lacks is counted and reported; under on_mismatch: error it fails (the lock released).
Status matchRecorded(Session* s, CallInfo* info, const ranklens::events::Call& event,
                     std::unique_lock<std::mutex>* lock, const RecordedCall** out) {
  Counters& c = s->counters;
  Bindings::Binding* binding = s->bindings.find(info->comm->id);
  if (binding != nullptr && !binding->called) finishBinding(s, binding, *info, event, c.calls - 1);
  const RecordedCall* match = nullptr;
  const RecordedCall* expected = nullptr;
  int64_t* offset = nullptr;
  if (binding != nullptr) {
    const SeqKind kind = ranklens::trace::seqKindOf(static_cast<int>(info->op));
    const int peer = kind == SeqKind::kCollective ? -1 : info->root;
    offset = &s->matching.offsets[{info->comm->id, static_cast<int>(kind), peer}];
    match = findRecorded(s, *binding, *info, event, offset, &expected);
  }
  *out = match;
  if (match != nullptr) c.matched++;
  if (match == expected && match != nullptr) return Status::ok();
  if (match == nullptr) {
    c.extra++;
    if (offset) *offset -= 1;  // the next replayed call is compared with the same recorded one
  }
  return reportMismatch(s, *info, event, binding != nullptr, expected, match, lock);
}

// The duration to hold the call for, into `info`: the recorded one, else (a call the recording lacks under
// on_mismatch: estimate, a recorded call without a duration, or every call under timing: estimated) an estimate.
// Under the session's lock.
void planDuration(Session* s, CallInfo* info, const ranklens::events::Call& event, const RecordedCall* match) {
  if (estimatesCalls(*s)) {
    info->stepPhase = s->estimates.stepOccurrences.phase(event.timeNs);  // a group's: its first call's on the stream
    if (event.groupId == 0) info->stepOccurrence = s->estimates.stepOccurrences.next(event.op, event.bytes, false);
  }
  const bool all = s->estimates.all;
  if (match != nullptr && !all && (match->durationNs >= 0 || match->call.groupId != 0)) {
    info->durationNs = match->durationNs;  // a later call of a recorded group has none: the first holds the group
  } else if (match != nullptr || s->policy == OnMismatch::kEstimate) {
    // Also a recorded call without a duration (captured into a CUDA graph, or its timing lost): it took time all
    // the same, and under a capture the hold becomes part of the program's graph.
    if (match != nullptr && !all) s->counters.untimed++;
    info->durationNs = estimateNs(s, *info, event.bytes);
    info->estimated = true;
    s->counters.estimated++;
  }
}

}  // namespace

bool sameSignature(const ranklens::events::Call& r, const CallInfo& info, const std::string* unknown) {
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
    snprintf(
        line, sizeof line, "\n    #%d %s (%s+0x%lx)", shown, info.dli_sname ? info.dli_sname : "??",
        info.dli_fname ? info.dli_fname : "??",
        static_cast<unsigned long>(static_cast<const char*>(frames[i]) - static_cast<const char*>(info.dli_fbase)));
    text += line;
    ++shown;
  }
  return text.empty() ? " (no frames)" : text;
}

ncclResult_t planCall(CallInfo* info, const ranklens::events::Call& event) {
  Session* s = load();
  info->seq = event.seq;
  if (s == nullptr) return ncclSuccess;
  // Asked once for the call: its mark, its payload and its pacing depend on it.
  if (s->fidelity != Fidelity::kStructure) info->captured = Runtime::get().device().capturing(info->stream);
  std::unique_lock<std::mutex> lock(s->mu);
  s->counters.calls++;
  const RecordedCall* match = nullptr;  // none without a recording: every call is then estimated
  if (s->recording) {
    const Status matched = matchRecorded(s, info, event, &lock, &match);
    if (!matched.isOk()) return toNccl(matched);  // the lock was released
  }
  info->recorded = match;
  if (match != nullptr && match->flightRecorder && match->flightRecorder->state != "completed" &&
      !goesOnPastHang(s, *match, &lock))
    return ncclInvalidUsage;  // the hang's report was said
  if (s->fidelity == Fidelity::kStructure) return ncclSuccess;
  planDuration(s, info, event, match);
  return ncclSuccess;
}

}  // namespace replay
}  // namespace nccl_fake

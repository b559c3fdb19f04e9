// SPDX-License-Identifier: Apache-2.0
// Communicator bindings: a replayed communicator to a recorded one at creation, its split children from the
// recording, and the binding made final (and possibly exchanged) at its first call.
#include "bindings.h"

#include <string>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "session.h"

namespace nccl_fake {
namespace replay {

using ranklens::Status;
using ranklens::config::OnMismatch;
using ranklens::trace::CallKey;
using ranklens::trace::RecordedCall;
using ranklens::trace::SeqKind;

namespace {

std::string describeComm(const ranklens::events::CommInit& c) {
  std::string text = "comm " + std::to_string(c.commId) + " (" + c.how + ", rank " + std::to_string(c.rank) + " of " +
                     std::to_string(c.nranks);
  if (c.parentId >= 0) text += ", parent " + std::to_string(c.parentId) + ", color " + std::to_string(c.color);
  if (!c.name.empty()) text += ", name " + c.name;
  return text + ")";
}

// Binds `comm` to a free recorded communicator (under the session's lock). Same lineage first; then, as a framework
// may create a communicator differently alone than in the real job (torch splits a new group from the default one
// only when that one exists, e.g. DeepSpeed's eager init), any free recorded communicator of the same size and rank.
// The first call may still rebind it (finishBinding). Fails, saying what is free, when none is.
Status bindAtCreation(Session* s, const ncclComm* comm) {
  const auto& comms = s->recording->comms();
  const bool split = comm->how == "split" || comm->how == "shrink";
  int64_t recordedParent = -1;
  if (comm->parentId >= 0) {
    const Bindings::Binding* parent = s->bindings.find(static_cast<uint64_t>(comm->parentId));
    recordedParent = parent == nullptr ? -2 : parent->recordedId;  // -2: the parent itself is unmatched
  }
  for (const bool sameLineage : {true, false}) {
    for (const auto& r : comms) {
      if (s->bindings.taken(r.commId) || r.nranks != comm->nRanks || r.rank != comm->rank) continue;
      if (sameLineage) {
        if ((r.how == "split" || r.how == "shrink") != split || r.parentId != recordedParent) continue;
        if (split && comm->how == "split" && r.color != comm->color) continue;
      }
      s->bindings.of[comm->id].recordedId = static_cast<int64_t>(r.commId);
      s->counters.commsMatched++;
      INFO(kSubInit | kSubRanklens, "replay: comm %lu (%s, rank %d of %d) matches recorded %s%s",
           static_cast<unsigned long>(comm->id), comm->how.c_str(), comm->rank, comm->nRanks, describeComm(r).c_str(),
           sameLineage ? "" : " (by size and rank: created another way in the recording)");
      return Status::ok();
    }
  }
  std::string recorded;
  for (size_t i = 0; i < comms.size() && i < 8; ++i)
    if (!s->bindings.taken(comms[i].commId)) recorded += "\n    " + describeComm(comms[i]);
  return Status::invalidUsage(
      "replay: communicator " + std::to_string(comm->id) + " (" + comm->how + ", rank " + std::to_string(comm->rank) +
      " of " + std::to_string(comm->nRanks) +
      (comm->parentId >= 0 ? ", parent " + std::to_string(comm->parentId) : "") +
      ") has no counterpart in the recording " + s->recording->directory() +
      "; unmatched recorded communicators:" + (recorded.empty() ? " none" : recorded) +
      (s->policy == OnMismatch::kError
           ? "\n  Replay the rank this trace was recorded for (RANK, ranklens replay --rank), or set "
             "RANKLENS_ON_MISMATCH=warn|estimate to replay this communicator's calls without the recording"
           : ""));
}

// A communicator's binding is tentative until its first call. The program repeats the recorded call order, so the
// recorded call at the same position in it, when it opens a communicator of the same size and rank with this very
// call, names the communicator; failing that, one that starts with this call is taken if the bound one does not.
// The two bindings are exchanged. (DeepSpeed alone: torch creates the new group's communicator by init, not by
// split, and before the default group's; both begin with the same calls, so only their order tells them apart.)
void rebindOnFirstCall(Session* s, Bindings::Binding* binding, const CallInfo& info,
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
    Bindings::Binding* holder = nullptr;  // the replayed communicator bound to it, if any
    for (auto& [replayed, b] : s->bindings.of)
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

void finishBinding(Session* s, Bindings::Binding* binding, const CallInfo& info, const ranklens::events::Call& event,
                   uint64_t position) {
  const int64_t atCreation = binding->recordedId;
  rebindOnFirstCall(s, binding, info, event, position);
  // Final now: the replay trace says which recorded communicator this one stands for (ranklens compare uses it);
  // recordedCommId is a recorded commId (uint64), so a binding to none writes no record.
  if (binding->recordedId >= 0)
    Runtime::get().emit(
        ranklens::trace::RecordType::kCommBinding,
        ranklens::trace::CommBinding{info.comm->id, static_cast<uint64_t>(binding->recordedId),
                                     binding->recordedId == atCreation ? "creation" : "first call", monotonicNs()});
}

ncclResult_t onCommCreated(ncclComm* comm) {
  Session* s = load();
  if (s == nullptr) return loadFailure().isOk() ? ncclSuccess : toNccl(loadFailure());
  std::lock_guard<std::mutex> lock(s->mu);
  if (s->holds.pacing && Runtime::get().device().paceChain(&comm->paceChain) != 0)  // at creation: may synchronise
    WARN("replay: peer_pacing: communicator %lu is not paced: %s", static_cast<unsigned long>(comm->id),
         ranklens::device::lastError().c_str());
  if (!s->recording) return ncclSuccess;  // estimates only: nothing to match
  const Status bound = bindAtCreation(s, comm);
  if (bound.isOk()) return ncclSuccess;
  s->counters.commsUnmatched++;
  // Reported under every on_mismatch; only error fails the creation.
  const ncclResult_t ret = toNccl(bound);
  return s->policy == OnMismatch::kError ? ret : ncclSuccess;
}

bool recordedSplitChild(const ncclComm* parent, int color, int key, int* nranks, int* rank,
                        std::vector<int>* worldRanks) {
  Session* s = load();
  if (s == nullptr || !s->recording) return false;
  std::lock_guard<std::mutex> lock(s->mu);
  const Bindings::Binding* bound = s->bindings.find(parent->id);
  if (bound == nullptr) return false;
  for (const auto& r : s->recording->comms()) {
    if (s->bindings.taken(r.commId) || r.how != "split" || r.parentId != bound->recordedId || r.color != color ||
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

}  // namespace replay
}  // namespace nccl_fake

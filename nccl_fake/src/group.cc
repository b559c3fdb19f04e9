// SPDX-License-Identifier: Apache-2.0
// The thread's group state (both modes) and replay's ncclGroupStart/End/SimulateEnd. Thread-local, like NCCL:
// calls inside a group are checked and sequenced when made; their effects run at the outermost ncclGroupEnd, or not
// at all when any call in the group failed (the last error is returned) or when the group is only simulated.
#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "nccl_fake/enqueue.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"

namespace nccl_fake {
namespace {

constexpr unsigned int kSimInfoMagic = 0x74685283;

GroupState& group() { return groupState(); }

void emitGroupEnd(const GroupState& g, ncclResult_t result) { Runtime::get().endGroup(g.id, g.calls, result); }

void resetGroup(GroupState& g) {
  g.pending.clear();
  g.error = ncclSuccess;
  g.id = 0;
  g.calls = 0;
}

ncclResult_t groupEndInternal(ncclSimInfo_t* simInfo) {
  GroupState& g = group();
  if (g.depth == 0) {
    WARN("ncclGroupEnd: not in a group call.");
    return ncclInvalidUsage;
  }
  if (--g.depth > 0) return ncclSuccess;
  const int64_t startNs = monotonicNs();

  ncclResult_t ret = g.error;
  if (ret == ncclSuccess && simInfo != nullptr) {
    ncclSimInfo_t local = NCCL_SIM_INFO_INITIALIZER;
    const size_t size = readVersionedStruct(simInfo, &local);
    if (local.magic != kSimInfoMagic) {
      WARN("ncclSimInfo_t argument not initialized via NCCL_SIM_INFO_INITIALIZER");
      ret = ncclInvalidArgument;
    } else {
      // NCCL reports the estimate of the last collective in the group; P2P-only and empty groups leave it as is.
      bool any = false;
      for (const auto& call : g.pending)
        if (!ranklens::events::isP2p(call.op)) {
          local.estimatedTime = estimateMicroseconds(call);
          any = true;
        }
      if (any) memcpy(simInfo, &local, size);
      emitGroupEnd(g, ncclSuccess);
      resetGroup(g);
      return ncclSuccess;  // simulated: nothing is launched
    }
  }
  if (ret == ncclSuccess) ret = pairSelfP2p(&g.pending);
  if (ret == ncclSuccess) ret = replay::markArrivals(&g.pending);
  if (ret == ncclSuccess) {
    for (const auto& call : g.pending) {
      ret = applyEffects(call);
      if (ret != ncclSuccess) break;
    }
    if (ret == ncclSuccess) ret = replay::holdGroup(g.pending);
  }
  ret = replay::settle(ret);
  if (ret == ncclSuccess) replay::holdHostGroup(startNs, g.pending);
  emitGroupEnd(g, ret);  // every GroupBegin gets its GroupEnd, empty or failed groups too
  resetGroup(g);
  return ret;
}

}  // namespace

ncclResult_t pairSelfP2p(std::vector<CallInfo>* calls) {
  const bool anySelf = std::any_of(calls->begin(), calls->end(), [](const CallInfo& c) {
    return ranklens::events::isP2p(c.op) && c.root == c.comm->rank;
  });
  if (!anySelf) return ncclSuccess;  // the common case costs one pass, no allocation
  std::map<ncclComm*, std::deque<const CallInfo*>> sends;
  for (const auto& call : *calls)
    if (call.op == ranklens::events::Op::kSend && call.root == call.comm->rank) sends[call.comm].push_back(&call);
  for (auto& call : *calls) {
    if (call.op != ranklens::events::Op::kRecv || call.root != call.comm->rank) continue;
    auto& queue = sends[call.comm];
    if (queue.empty()) {
      WARN("Trying to recv to self without a matching send");
      return ncclInvalidUsage;
    }
    const CallInfo& send = *queue.front();
    const size_t sendBytes = send.count * datatypeSize(send.datatype);
    const size_t recvBytes = call.count * datatypeSize(call.datatype);
    if (sendBytes != recvBytes) {
      WARN("Recv from self of %zu bytes does not match the paired Send to self of %zu bytes (rank %d)", recvBytes,
           sendBytes, call.comm->rank);
      return ncclInvalidUsage;
    }
    call.selfSendbuff = send.sendbuff;
    queue.pop_front();
  }
  for (const auto& [comm, queue] : sends)
    if (!queue.empty()) {
      WARN("Trying to send to self without a matching recv");
      return ncclInvalidUsage;
    }
  return ncclSuccess;
}

GroupState& groupState() {
  static thread_local GroupState state;
  return state;
}

void groupAppend(const CallInfo& info) {
  GroupState& g = group();
  g.pending.push_back(info);
  g.calls++;
}
void groupRecordError(ncclResult_t result) {
  GroupState& g = group();
  if (g.depth > 0 && result != ncclSuccess && result != ncclInProgress) g.error = result;  // the last error wins
}

namespace impl {

ncclResult_t ncclGroupStart() {
  GroupState& g = group();
  if (g.depth++ == 0) g.id = Runtime::get().beginGroup();
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() { return groupEndInternal(nullptr); }

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) { return groupEndInternal(simInfo); }

}  // namespace impl
}  // namespace nccl_fake

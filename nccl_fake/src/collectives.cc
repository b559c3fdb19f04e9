// SPDX-License-Identifier: Apache-2.0
// Collective and point-to-point calls, both modes: one wrapper per API function builds the CallInfo and submits it
// (enqueue.h has the pipeline). Also replay's backend: NCCL's argument checks, the per-communicator sequence, the
// Call event, then the effects (now, or at the outermost ncclGroupEnd). May call replay.h, record.h, Runtime.
#include <nvtx3/nvToolsExt.h>
#include <signal.h>

#include <cstdlib>

#include "nccl_fake/enqueue.h"
#include "nccl_fake/real_nccl.h"
#include "nccl_fake/record.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"

namespace nccl_fake {

using ranklens::events::Op;

size_t datatypeSize(ncclDataType_t datatype) { return ranklens::events::datatypeBytes(static_cast<int>(datatype)); }

namespace {

using ranklens::events::isReduction;
using ranklens::events::isRooted;

// NCCL's ArgsCheck: root (peer for P2P) range, datatype, reduction operator, then buffers. A user operator's
// scalar is taken into the call here, as NCCL does at enqueue: the operator may be destroyed once the call returns.
ncclResult_t argsCheck(CallInfo& info) {
  ncclComm* comm = info.comm;
  if ((isRooted(info.op) || ranklens::events::isP2p(info.op)) && (info.root < 0 || info.root >= comm->nRanks)) {
    WARN("%s : invalid root %d (root should be in the 0..%d range)", info.opName, info.root, comm->nRanks);
    return ncclInvalidArgument;
  }
  if (static_cast<int>(info.datatype) < 0 || info.datatype >= ncclNumTypes) {
    WARN("%s : invalid type %d", info.opName, static_cast<int>(info.datatype));
    return ncclInvalidArgument;
  }
  if (isReduction(info.op)) {
    if (static_cast<int>(info.redop) < 0 || info.redop > ncclMaxRedOp) {
      WARN("%s : invalid reduction operation %d", info.opName, static_cast<int>(info.redop));
      return ncclInvalidArgument;
    }
    if (info.redop >= ncclNumOps) {
      std::lock_guard<std::mutex> lock(comm->mu);
      long index = static_cast<long>(userRedOpMangle(comm, info.redop)) - ncclNumOps;
      if (index < 0 || static_cast<size_t>(index) >= comm->userOps.size() ||
          comm->userOps[index].datatype == ncclNumTypes) {
        WARN("%s : reduction operation %d unknown to this communicator", info.opName, static_cast<int>(info.redop));
        return ncclInvalidArgument;
      }
      if (info.count > 0 && comm->userOps[index].datatype != info.datatype) {
        WARN("Data type supplied to user-created ncclRedOp_t does not match type given to reduction operation");
        return ncclInvalidArgument;
      }
      info.premulScalar = comm->userOps[index].scalar;
    }
    // NCCL 2.28.9's one-rank path has no fp8 PreMulSum kernel (its host code tests __CUDA_ARCH__, which only device
    // code defines) and returns ncclInvalidArgument without a word, for ncclAvg too (a PreMulSum by 1/N for floats).
    // A replayed program must meet the error its real run met; RankLens says why.
    const bool fp8 = info.datatype == ncclFloat8e4m3 || info.datatype == ncclFloat8e5m2;
    if (fp8 && comm->nRanks == 1 && info.count > 0 && (info.redop == ncclAvg || info.redop >= ncclNumOps)) {
      WARN(
          "%s : NCCL 2.28.9 returns ncclInvalidArgument for ncclAvg and PreMulSum on fp8 data on a one-rank "
          "communicator (it has no such one-rank kernel); RankLens answers the same",
          info.opName);
      return ncclInvalidArgument;
    }
  }
  // Real NCCL checks pointers only with NCCL_CHECK_POINTERS=1 and otherwise faults on the GPU later; RankLens always
  // checks for NULL when data would move, returning the code NCCL's pointer check returns.
  if (info.count == 0) return ncclSuccess;
  const bool amRoot = comm->rank == info.root;
  if (info.op == Op::kSend) return bufferCheck(info.sendbuff, info.opName, "buff");
  if (info.op == Op::kRecv) return bufferCheck(info.recvbuff, info.opName, "buff");
  if ((info.op != Op::kBroadcast || amRoot) && (info.op != Op::kScatter || amRoot))
    NCCLCHECK(bufferCheck(info.sendbuff, info.opName, "sendbuff"));
  if ((info.op != Op::kReduce || amRoot) && (info.op != Op::kGather || amRoot))
    NCCLCHECK(bufferCheck(info.recvbuff, info.opName, "recvbuff"));
  return ncclSuccess;
}

}  // namespace

namespace {

// Replay outside a group: the call is its own group, applied and held now.
ncclResult_t applyNow(CallInfo& info, const ranklens::events::Call& event) {
  // Outside a group a call is its own group, so a Send to self or Recv from self can have no partner.
  if (ranklens::events::isP2p(info.op) && info.root == info.comm->rank) {
    WARN(info.op == Op::kSend ? "Trying to send to self without a matching recv"
                              : "Trying to recv to self without a matching send");
    return ncclInvalidUsage;
  }
  // A range per call in NCCL's shape, so Nsight and torch.profiler's NVTX view line up with the holds. Formatted
  // only when an NVTX tool is attached (NVTX v3 loads one from NVTX_INJECTION64_PATH, which Nsight tools set):
  // otherwise the formatting alone would be the call's largest host cost.
  static const bool nvtxTool = getenv("NVTX_INJECTION64_PATH") != nullptr;
  if (nvtxTool) {
    char range[160];
    snprintf(range, sizeof range, "nccl%s(): comm %lu seq %lu bytes %lu", info.opName,
             static_cast<unsigned long>(event.commId), static_cast<unsigned long>(event.seq),
             static_cast<unsigned long>(event.bytes));
    nvtxRangePushA(range);
  }
  ncclResult_t ret = replay::markArrival(&info);
  if (ret == ncclSuccess) ret = applyEffects(info);
  if (ret == ncclSuccess) ret = replay::holdCall(info);
  ret = replay::settle(ret);
  if (ret == ncclSuccess) replay::holdHost(event.timeNs, info);
  if (nvtxTool) nvtxRangePop();
  return ret;
}

}  // namespace

ranklens::events::Call callEvent(const CommState& comm, const CallInfo& info, uint64_t seq, uint64_t groupId) {
  ranklens::events::Call event;
  event.seq = seq;
  event.commId = comm.id;
  event.op = static_cast<int>(info.op);
  event.datatype = info.datatype;
  event.count = info.count;
  event.rootOrPeer = (isRooted(info.op) || ranklens::events::isP2p(info.op)) ? info.root : -1;
  event.redop = isReduction(info.op) ? static_cast<int>(info.redop) : -1;
  event.stream = reinterpret_cast<uint64_t>(info.stream);
  event.groupId = groupId;
  event.nranks = comm.nRanks;
  event.rank = comm.rank;
  event.bytes = ranklens::events::receivedBytes(info.op, info.count, info.datatype, comm.nRanks, comm.rank, info.root);
  event.timeNs = monotonicNs();
  return event;
}

ncclResult_t submitCall(CallInfo info) {
  if (record::active()) return record::recordCall(info);
  return enqueueCheck(info);
}

ncclResult_t enqueueCheck(CallInfo info) {
  ncclResult_t ret = Runtime::get().ready(info.opName);
  if (ret == ncclSuccess) ret = commUsable(info.comm, info.opName);
  if (ret == ncclSuccess) {
    ret = argsCheck(info);
    // NCCL leaves a non-blocking communicator in a sticky error state after a bad argument.
    if (ret != ncclSuccess && !info.comm->blocking) info.comm->asyncError = ret;
  }
  if (ret != ncclSuccess) {
    groupRecordError(ret);
    return ret;
  }

  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(info.comm->seqMu);
    seq = info.comm->sequence(info.op, info.root)++;
  }
  const ranklens::events::Call event = callEvent(*info.comm, info, seq, currentGroupId());
  Runtime::get().emit(ranklens::trace::RecordType::kCall, event);
  // NCCL logs a Send's buffer as its recvbuff (ncclInfo carries sendbuff NULL for Send).
  const bool send = info.op == Op::kSend;
  INFO(kSubColl,
       "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p [nranks=%d] "
       "stream %p",
       info.opName, static_cast<unsigned long>(event.seq), send ? nullptr : info.sendbuff,
       send ? info.sendbuff : info.recvbuff, info.count, static_cast<int>(info.datatype), static_cast<int>(info.redop),
       info.root, static_cast<void*>(info.comm), info.comm->nRanks, static_cast<void*>(info.stream));

  const auto& settings = Runtime::get().settings();
  if (settings.break_comm >= 0 && static_cast<uint64_t>(settings.break_comm) == event.commId &&
      static_cast<uint64_t>(settings.break_seq) == event.seq && !ranklens::events::isP2p(info.op)) {
    WARN("%s: comm %lu seq %lu reached (break_at): raising SIGTRAP", info.opName,
         static_cast<unsigned long>(event.commId), static_cast<unsigned long>(event.seq));
    raise(SIGTRAP);
  }
  if (replay::active()) {
    ret = replay::planCall(&info, event);
    if (ret != ncclSuccess) {
      groupRecordError(ret);
      return ret;
    }
  }

  if (groupDepth() > 0) {
    groupAppend(info);
    return ncclSuccess;
  }
  return applyNow(info, event);
}

namespace impl {
namespace {
CallInfo withApi(real::ApiId api, CallInfo info) {
  info.api = static_cast<int>(api);
  return info;
}
}  // namespace

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclAllReduce,
                            {Op::kAllReduce, "AllReduce", sendbuff, recvbuff, count, datatype, op, -1, comm, stream}));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclBroadcast, {Op::kBroadcast, "Broadcast", sendbuff, recvbuff, count,
                                                         datatype, ncclSum, root, comm, stream}));
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  // NCCL: an in-place Broadcast (replayed and recorded as one); record forwards ncclBcast itself.
  return submitCall(withApi(real::ApiId::ncclBcast,
                            {Op::kBroadcast, "Broadcast", buff, buff, count, datatype, ncclSum, root, comm, stream}));
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclReduce,
                            {Op::kReduce, "Reduce", sendbuff, recvbuff, count, datatype, op, root, comm, stream}));
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclAllGather, {Op::kAllGather, "AllGather", sendbuff, recvbuff, sendcount,
                                                         datatype, ncclSum, -1, comm, stream}));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclReduceScatter, {Op::kReduceScatter, "ReduceScatter", sendbuff, recvbuff,
                                                             recvcount, datatype, op, -1, comm, stream}));
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclAlltoAll, {Op::kAlltoAll, "AlltoAll", sendbuff, recvbuff, count, datatype,
                                                        ncclSum, -1, comm, stream}));
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclGather,
                            {Op::kGather, "Gather", sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream}));
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclScatter, {Op::kScatter, "Scatter", sendbuff, recvbuff, count, datatype,
                                                       ncclSum, root, comm, stream}));
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclSend,
                            {Op::kSend, "Send", sendbuff, nullptr, count, datatype, ncclSum, peer, comm, stream}));
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submitCall(withApi(real::ApiId::ncclRecv,
                            {Op::kRecv, "Recv", nullptr, recvbuff, count, datatype, ncclSum, peer, comm, stream}));
}

}  // namespace impl
}  // namespace nccl_fake

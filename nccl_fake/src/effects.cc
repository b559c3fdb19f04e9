// SPDX-License-Identifier: Apache-2.0
// What a call writes into its receive buffer when nothing was recorded (config `fill:`):
//   clone  - as if every peer held this rank's data ("every peer is a clone of me"), which keeps symmetric
//            protocols (size exchanges, shape checks, object all-gathers) self-consistent. A reduction's result is
//            what N equal contributions reduce to: N x data for a sum (so that DDP's pre-divided gradients keep
//            their size), data^N for a product, this rank's data for max/min/avg (StreamDevice::reduceCopies);
//   keep   - receive buffers are never touched;
//   zero   - everything received from peers is zero;
//   poison - everything received from peers is NaN (floating types) or 0xFF bytes, to expose consumers of
//            unrestored data.
// Under clone/zero/poison this rank's own contribution is placed where NCCL would put it, and a 1-rank communicator
// (no peers at all) gets NCCL's exact result. Non-root ranks never read a Broadcast/Scatter sendbuff (NCCL ignores
// it; it may dangle). Effects go through the stream device.
#include "nccl_fake/enqueue.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"

namespace nccl_fake {

using ranklens::config::Fill;
using ranklens::events::Op;

namespace {

uint64_t poisonPattern(ncclDataType_t datatype) {
  switch (datatype) {
    case ncclFloat16:
      return 0x7E00;  // quiet NaN
    case ncclBfloat16:
      return 0x7FC0;  // quiet NaN
    case ncclFloat32:
      return 0x7FC00000;  // quiet NaN
    case ncclFloat64:
      return 0x7FF8000000000000ull;  // quiet NaN
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 0x7F;  // NaN in both fp8 formats
    default:
      return ~0ull;  // 0xFF bytes
  }
}

class Effects {
 public:
  explicit Effects(const CallInfo& info)
      : info_(info),
        device_(Runtime::get().device()),
        fill_(Runtime::get().settings().fill),
        elem_(datatypeSize(info.datatype)),
        bytes_(info.count * elem_) {}

  ncclResult_t apply() {
    if (info_.count == 0 || fill_ == Fill::kKeep) return ncclSuccess;
    const int n = info_.comm->nRanks, rank = info_.comm->rank;
    const bool amRoot = rank == info_.root;
    auto* recv = static_cast<char*>(info_.recvbuff);
    auto* send = static_cast<const char*>(info_.sendbuff);
    if (n == 1) return alone(recv, send);
    switch (info_.op) {
      case Op::kAllReduce:
        return reducedFromPeers(recv, send, n);
      case Op::kReduce:
        return amRoot ? reducedFromPeers(recv, send, n) : ncclSuccess;
      case Op::kBroadcast:
        // Root: the result is its own data. Others: a clone root holds what this rank's buffer holds.
        if (amRoot) return copy(recv, send, bytes_);
        return fromPeers(recv, recv, bytes_);
      case Op::kAllGather:
        return gatherInto(recv, send, n, rank);
      case Op::kGather:
        return amRoot ? gatherInto(recv, send, n, rank) : ncclSuccess;
      case Op::kReduceScatter:
        return reducedFromPeers(recv, send + static_cast<size_t>(rank) * bytes_, n);
      case Op::kScatter:
        if (amRoot) return copy(recv, send + static_cast<size_t>(rank) * bytes_, bytes_);
        return peerData(recv, bytes_);
      case Op::kAlltoAll:
        // Chunk j comes from peer j; a clone peer sends what this rank sends to itself (its chunk `rank`).
        if (fill_ == Fill::kClone) return replicate(recv, send + static_cast<size_t>(rank) * bytes_, n);
        for (int j = 0; j < n; ++j) {
          if (j == rank) continue;
          NCCLCHECK(
              fromPeers(recv + static_cast<size_t>(j) * bytes_, send + static_cast<size_t>(rank) * bytes_, bytes_));
        }
        return copy(recv + static_cast<size_t>(rank) * bytes_, send + static_cast<size_t>(rank) * bytes_, bytes_);
      case Op::kRecv:
        // From self: the paired Send's data, exactly as NCCL copies it. From a peer: peer-only data.
        if (info_.root == rank) return copy(recv, static_cast<const char*>(info_.selfSendbuff), bytes_);
        return peerData(recv, bytes_);
      case Op::kSend:
        return ncclSuccess;
    }
    return ncclSuccess;
  }

 private:
  // No peers: every operation reduces to NCCL's local copy (send -> recv where out of place), except that a
  // PreMulSum still multiplies by its scalar.
  ncclResult_t alone(char* recv, const char* send) {
    if (info_.op == Op::kSend) return ncclSuccess;
    if (info_.op == Op::kRecv) return copy(recv, static_cast<const char*>(info_.selfSendbuff), bytes_);
    if (ranklens::events::isReduction(info_.op)) return reduced(recv, send, 1);
    return copy(recv, send, bytes_);
  }
  // A reduction's result: under clone, what `copies` contributions equal to `own` reduce to; else zero/poison.
  ncclResult_t reducedFromPeers(char* dst, const char* own, int copies) {
    if (fill_ != Fill::kClone) return fillWith(dst, bytes_);
    return reduced(dst, own, copies);
  }
  ncclResult_t reduced(char* dst, const char* own, int copies) {
    ranklens::device::Reduction reduction;
    reduction.datatype = static_cast<int>(info_.datatype);
    reduction.copies = static_cast<uint64_t>(copies);
    switch (info_.redop) {
      case ncclSum:
        break;
      case ncclProd:
        reduction.product = true;
        break;
      case ncclMax:
      case ncclMin:
      case ncclAvg:
        return copy(dst, own, bytes_);
      default:  // a user operator: PreMulSum, the only kind NCCL has
        reduction.premul = true;
        reduction.scalar = info_.premulScalar;
    }
    if (copies == 1 && !reduction.premul) return copy(dst, own, bytes_);
    return status(device_.reduceCopies(dst, own, info_.count, reduction, info_.stream), "reduction");
  }
  // A result that depends on peers' data (no reduction): under clone it equals `own`; else zero/poison.
  ncclResult_t fromPeers(char* dst, const char* own, size_t bytes) {
    if (fill_ == Fill::kClone) return copy(dst, own, bytes);
    return fillWith(dst, bytes);
  }
  // Data that only a peer can provide and that no clone rule defines (Recv, non-root Scatter): zero under clone.
  ncclResult_t peerData(char* dst, size_t bytes) {
    if (fill_ == Fill::kPoison) return fillWith(dst, bytes);
    return status(device_.fill(dst, bytes, 1, 0, info_.stream), "fill");
  }
  ncclResult_t gatherInto(char* recv, const char* send, int n, int rank) {
    if (fill_ == Fill::kClone) return replicate(recv, send, n);  // every slot is this rank's data
    char* mine = recv + static_cast<size_t>(rank) * bytes_;
    NCCLCHECK(copy(mine, send, bytes_));  // own slot first: in-place callers already have it there
    for (int j = 0; j < n; ++j)
      if (j != rank) NCCLCHECK(fromPeers(recv + static_cast<size_t>(j) * bytes_, mine, bytes_));
    return ncclSuccess;
  }
  // `src`'s bytes_ into each of the n slots of recv (StreamDevice::replicate; the source's own slot left alone).
  ncclResult_t replicate(char* recv, const char* src, int n) {
    return status(device_.replicate(recv, src, bytes_, static_cast<size_t>(n), bytes_, info_.stream), "copy");
  }
  ncclResult_t copy(char* dst, const char* src, size_t bytes) {
    if (dst == src) return ncclSuccess;
    return status(device_.copy(dst, src, bytes, info_.stream), "copy");
  }
  ncclResult_t fillWith(char* dst, size_t bytes) {
    if (fill_ == Fill::kZero) return status(device_.fill(dst, bytes, 1, 0, info_.stream), "fill");
    return status(device_.fill(dst, bytes / elem_, elem_, poisonPattern(info_.datatype), info_.stream), "poison");
  }
  ncclResult_t status(int code, const char* what) {
    if (code == 0) return ncclSuccess;
    WARN("%s : %s of the receive buffer failed: %s", info_.opName, what, ranklens::device::lastError().c_str());
    return ncclUnhandledCudaError;
  }

  const CallInfo& info_;
  ranklens::device::StreamDevice& device_;
  const Fill fill_;
  const size_t elem_, bytes_;
};

}  // namespace

ncclResult_t applyEffects(const CallInfo& info) {
  ncclResult_t restored = ncclSuccess;
  if (info.recorded != nullptr && replay::restorePayload(info, &restored)) return restored;
  return Effects(info).apply();
}

float estimateMicroseconds(const CallInfo& info) {
  float us = 0;
  if (replay::simulatedMicroseconds(info, &us)) return us;
  // Without a recording to learn from: 15 us latency + bus bytes at 250 GB/s (nccl-tests bus factors).
  const double n = info.comm->nRanks;
  const double bytes = static_cast<double>(info.count) * datatypeSize(info.datatype);
  double factor = 1.0;
  switch (info.op) {
    case Op::kAllReduce:
      factor = 2.0 * (n - 1) / n;
      break;
    case Op::kAllGather:
    case Op::kReduceScatter:
    case Op::kAlltoAll:
      factor = (n - 1);
      break;
    case Op::kGather:
    case Op::kScatter:
      factor = (n - 1);
      break;
    default:
      factor = 1.0;
  }
  return static_cast<float>(15.0 + bytes * factor / 250e9 * 1e6);
}

}  // namespace nccl_fake

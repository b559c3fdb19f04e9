// SPDX-License-Identifier: Apache-2.0
// The virtual communication events RankLens produces for every NCCL call. They are records of the trace store
// (ranklens/trace.h, docs/trace-format.md): msgpack arrays whose fields are only ever appended (readers of an older
// minor version ignore extra trailing fields, missing ones keep their defaults).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#ifndef MSGPACK_NO_BOOST
#define MSGPACK_NO_BOOST 1  // header-only msgpack-cxx without Boost
#endif
#include <msgpack.hpp>

namespace ranklens {
namespace events {

// The NCCL operations, in a stable numbering used on disk.
enum class Op : int {
  kAllReduce = 0,
  kBroadcast = 1,
  kReduce = 2,
  kAllGather = 3,
  kReduceScatter = 4,
  kAlltoAll = 5,
  kGather = 6,
  kScatter = 7,
  kSend = 8,
  kRecv = 9,
};
const char* opName(Op op);
bool isP2p(Op op);
bool isRooted(Op op);     // Broadcast, Reduce, Gather, Scatter: a root argument
bool isReduction(Op op);  // AllReduce, Reduce, ReduceScatter: a reduction operator
// ncclDataType_t values as stored in records: bytes per element (0 for invalid values) and NCCL-style names.
size_t datatypeBytes(int datatype);
const char* datatypeName(int datatype);  // "float32", "bfloat16", ...; "invalid" otherwise
// The message size of one call for this rank: its receive buffer's size (0 for Reduce/Gather off the root; for Send
// the bytes sent). Call.bytes.
uint64_t receivedBytes(Op op, uint64_t count, int datatype, int nranks, int rank, int root);

// Communicator identity: what lets a replayed communicator be matched to a recorded one without the unique id.
struct CommInit {
  uint64_t commId = 0;  // creation order in this process, from 0
  int nranks = 0, rank = 0;
  int64_t parentId = -1;  // split/shrink parent, -1 for a root communicator
  int64_t color = -1, key = -1;
  std::string how;              // init | initAll | initScalable | split | shrink
  std::string name;             // ncclConfig_t.commName, when the framework sets it
  std::vector<int> worldRanks;  // world rank of each member (identity for root communicators)
  int cudaDev = 0;
  bool blocking = true;
  int64_t timeNs = 0;
  MSGPACK_DEFINE_ARRAY(commId, nranks, rank, parentId, color, key, how, name, worldRanks, cudaDev, blocking, timeNs)
};

struct CommEnd {
  uint64_t commId = 0;
  std::string how;  // finalize | destroy | abort | revoke
  int64_t timeNs = 0;
  MSGPACK_DEFINE_ARRAY(commId, how, timeNs)
};

struct Call {
  uint64_t commId = 0;
  uint64_t seq = 0;      // per-communicator collective sequence (collectives), per-(peer, direction) sequence (P2P)
  int op = 0;            // Op
  int datatype = 0;      // ncclDataType_t
  uint64_t count = 0;    // as passed (AllGather: send count; ReduceScatter: receive count; AlltoAll: per peer)
  int rootOrPeer = -1;   // root for rooted collectives, peer for Send/Recv, -1 otherwise
  int redop = -1;        // ncclRedOp_t for reductions (user PreMulSum ops appear as their handle), -1 otherwise
  uint64_t stream = 0;   // cudaStream_t value, to tell streams apart
  uint64_t groupId = 0;  // 0: not inside ncclGroupStart/End; else the outermost group's id
  int nranks = 0, rank = 0;
  uint64_t bytes = 0;   // bytes this rank receives (recvbuff size), the usual message size in reports
  int64_t timeNs = 0;   // CLOCK_MONOTONIC at submission
  int64_t hostNs = -1;  // 1.2: how long the call kept the calling thread (record mode), -1 unknown
  MSGPACK_DEFINE_ARRAY(commId, seq, op, datatype, count, rootOrPeer, redop, stream, groupId, nranks, rank, bytes,
                       timeNs, hostNs)
};

struct GroupEnd {
  uint64_t groupId = 0;
  uint32_t calls = 0;
  int result = 0;  // ncclResult_t of ncclGroupEnd
  int64_t timeNs = 0;
  int64_t hostNs = -1;  // 1.2: how long ncclGroupEnd kept the calling thread (record mode), -1 unknown
  MSGPACK_DEFINE_ARRAY(groupId, calls, result, timeNs, hostNs)
};

struct Stage {
  std::string name;  // step | forward | backward | optimizer | any adapter label
  int64_t step = -1;
  int64_t timeNs = 0;
  MSGPACK_DEFINE_ARRAY(name, step, timeNs)
};

// Where a rank's steps start: its "step" markers (ranklensMarkStage("step", k); train_gpt.py --mark-steps), else the
// Python adapter's "optimizer" markers (one after each optimizer step: the next step starts there). Numbered markers
// only (step >= 0), the first of each number, in time order.
struct StepMarkers {
  const char* kind = "step";  // the marker name used: "step" or "optimizer"
  std::vector<Stage> marks;
};
StepMarkers stepMarkers(const std::vector<Stage>& stages);
// The index in `marks` (StepMarkers::marks, time-ordered) of the last marker at or before `timeNs`: the step a call
// submitted then belongs to; -1 before the first marker (or with none).
ptrdiff_t markerBefore(const std::vector<Stage>& marks, int64_t timeNs);
// The most bytes of one step: `timedBytes` (time, bytes) summed per step, the steps cut at stepMarkers(stages) (what
// precedes the first marker counts as a step; without markers, everything is one). 0 for none.
uint64_t largestStepBytes(const std::vector<Stage>& stages,
                          const std::vector<std::pair<int64_t, uint64_t>>& timedBytes);

}  // namespace events
}  // namespace ranklens

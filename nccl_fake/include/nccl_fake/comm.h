// SPDX-License-Identifier: Apache-2.0
// The communicator: the state record and replay share (CommState), and replay's virtual communicator built on it.
// Its identity (creation order, size, rank, split lineage, name) is what later matches it to a recorded one.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nccl_fake/core.h"
#include "ranklens/device.h"
#include "ranklens/events.h"

constexpr uint64_t kCommMagic = 0x0280028000000002ull;  // like NCCL's NCCL_MAGIC guard words

namespace nccl_fake {

// What record and replay both keep of a communicator: its identity in the trace (creation order, size, rank, split
// lineage, name) and its call sequences. Replay's handle is this state (ncclComm below); record keeps one per real
// NCCL handle (the program holds the real NCCL's ncclComm_t there, see record_state.h).
struct CommState {
  uint64_t id = 0;  // creation order in this process
  int nRanks = 0;
  int rank = 0;
  int cudaDev = 0;
  int64_t parentId = -1;
  int64_t color = -1;
  int64_t key = -1;
  std::string how;   // init | initAll | initScalable | split | shrink
  std::string name;  // ncclConfig_t.commName
  bool blocking = true;

  // Guards the sequences. Record holds it from reading a call's number, across the real call, to committing it:
  // two threads issuing on one communicator (NCCL leaves their order to the caller) must not take the same number.
  std::mutex seqMu;
  uint64_t collSeq = 0;
  std::map<int, uint64_t> sendSeq, recvSeq;  // per peer

  // The counter a call takes its number from: Send and Recv count per peer, every other op on one counter.
  // Caller holds seqMu.
  uint64_t& sequence(ranklens::events::Op op, int peer) {
    if (op == ranklens::events::Op::kSend) return sendSeq[peer];
    if (op == ranklens::events::Op::kRecv) return recvSeq[peer];
    return collSeq;
  }
};

}  // namespace nccl_fake

// The virtual communicator of replay: rank r of N with no peers behind it.
struct ncclComm : nccl_fake::CommState {
  uint64_t startMagic = kCommMagic;
  std::vector<int> worldRanks;  // world rank of every member, in comm-rank order
  int worldSize = 0;            // ranks of the root communicator (the world worldRanks number), for the mesh
  int ranksPerNode = 8;
  uint64_t paceChain = 0;  // replay, peer_pacing: its chain on the device (StreamDevice::paceChain), set at creation

  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<bool> finalized{false};
  std::atomic<bool> revoked{false};
  std::atomic<bool> destroyed{false};

  std::mutex mu;  // guards the user reduction ops and registrations below
  struct UserRedOp {
    ncclDataType_t datatype = ncclNumTypes;  // ncclNumTypes: a free slot
    ranklens::device::Scalar scalar;         // its PreMulSum scalar
  };
  std::vector<UserRedOp> userOps;         // index = op - ncclNumOps
  std::vector<size_t> freeUserOps;        // freed slots, most recent last
  std::map<void*, size_t> registrations;  // handle -> size
  uint64_t endMagic = kCommMagic;
};

namespace nccl_fake {

// Argument checks shaped like NCCL's (misc/argcheck.cc): they WARN with the same text and return the same code.
ncclResult_t commCheck(const ncclComm* comm, const char* opName, const char* argName);
ncclResult_t ptrCheck(const void* ptr, const char* opName, const char* argName);
// Buffer check in the words of NCCL's CudaPtrCheck ("%s : %s %p is not a valid pointer").
ncclResult_t bufferCheck(const void* ptr, const char* opName, const char* argName);
// User reduction operator handle <-> slot: handle = mangle(comm, ncclNumOps + slot); mangle is an involution.
int userRedOpMangle(const ncclComm* comm, int op);
// Not destroyed (the tombstone of a destroyed communicator answers with ncclInvalidArgument).
ncclResult_t commAlive(const ncclComm* comm, const char* opName);
// commCheck plus: not destroyed, not revoked, no pending async error.
ncclResult_t commUsable(ncclComm* comm, const char* opName);

}  // namespace nccl_fake

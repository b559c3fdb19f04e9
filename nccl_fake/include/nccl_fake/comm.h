// SPDX-License-Identifier: Apache-2.0
// The virtual communicator: rank r of N with no peers behind it. Its identity (creation order, size, rank, split
// lineage, name) is what later matches it to a recorded communicator.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nccl_fake/core.h"
#include "ranklens/device.h"

constexpr uint64_t kCommMagic = 0x0280028000000002ull;  // like NCCL's NCCL_MAGIC guard words

struct ncclComm {
  uint64_t startMagic = kCommMagic;
  uint64_t id = 0;  // creation order in this process
  int nRanks = 0;
  int rank = 0;
  int cudaDev = 0;
  int64_t parentId = -1;
  int64_t color = -1;
  int64_t key = -1;
  std::string how;   // init | initAll | initScalable | split | shrink
  std::string name;  // ncclConfig_t.commName
  std::vector<int> worldRanks;  // world rank of every member, in comm-rank order
  int worldSize = 0;            // ranks of the root communicator (the world worldRanks number), for the mesh
  bool blocking = true;
  int ranksPerNode = 8;
  uint64_t paceChain = 0;  // replay, peer_pacing: its chain on the device (StreamDevice::paceChain), set at creation

  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<bool> finalized{false};
  std::atomic<bool> revoked{false};
  std::atomic<bool> destroyed{false};

  std::mutex mu;  // guards the sequences and user reduction ops below
  uint64_t collSeq = 0;
  std::map<int, uint64_t> sendSeq, recvSeq;  // per peer
  struct UserRedOp {
    ncclDataType_t datatype = ncclNumTypes;  // ncclNumTypes: a free slot
    ranklens::device::Scalar scalar;         // its PreMulSum scalar
  };
  std::vector<UserRedOp> userOps;            // index = op - ncclNumOps
  std::vector<size_t> freeUserOps;           // freed slots, most recent last
  std::map<void*, size_t> registrations;     // handle -> size
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

// SPDX-License-Identifier: Apache-2.0
// Argument checks with NCCL's messages and codes (compare NCCL's misc/argcheck.cc and enqueue.cc).
#include "nccl_fake/comm.h"

namespace nccl_fake {

ncclResult_t bufferCheck(const void* ptr, const char* opName, const char* argName) {
  if (ptr == nullptr) {
    WARN("%s : %s %p is not a valid pointer", opName, argName, ptr);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

int userRedOpMangle(const ncclComm* comm, int op) {
  // NCCL mangles user operator handles with the communicator's address so that an operator used with another
  // communicator is detected; handles below ncclNumOps are never mangled.
  uint64_t h = reinterpret_cast<uint64_t>(comm);
  h ^= h >> 32;
  h *= 0x9e3779b97f4a7c13ull;
  h >>= 32;
  h &= 0x7fffffff;
  int mangled = static_cast<int>(h) ^ op;
  return mangled < ncclNumOps ? op : mangled;
}

ncclResult_t ptrCheck(const void* ptr, const char* opName, const char* argName) {
  if (ptr == nullptr) {
    WARN("%s : %s argument is NULL", opName, argName);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t commCheck(const ncclComm* comm, const char* opName, const char* argName) {
  NCCLCHECK(ptrCheck(comm, opName, argName));
  if (comm->startMagic != kCommMagic || comm->endMagic != kCommMagic) {
    WARN("Error: corrupted comm object detected");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t commAlive(const ncclComm* comm, const char* opName) {
  // NCCL frees a destroyed communicator; RankLens keeps a tombstone so that use-after-destroy gets a clear error
  // instead of undefined behaviour.
  if (comm->destroyed.load()) {
    WARN("%s : communicator %p (id %lu) was already destroyed", opName, static_cast<const void*>(comm),
         static_cast<unsigned long>(comm->id));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t commUsable(ncclComm* comm, const char* opName) {
  NCCLCHECK(commCheck(comm, opName, "comm"));
  NCCLCHECK(commAlive(comm, opName));
  if (comm->revoked.load()) {
    WARN("%s: communicator was revoked", opName);
    return ncclInvalidUsage;
  }
  int async = comm->asyncError.load();
  if (async == ncclInProgress) {
    WARN("Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  if (async != ncclSuccess) {
    WARN("%s : communicator %p is in error state %d (%s)", opName, static_cast<void*>(comm), async,
         impl::ncclGetErrorString(static_cast<ncclResult_t>(async)));
    return static_cast<ncclResult_t>(async);
  }
  return ncclSuccess;
}

}  // namespace nccl_fake

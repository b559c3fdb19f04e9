// SPDX-License-Identifier: Apache-2.0
// NCCL 2.28's device-API host helpers. Teams and resource requirements are pure arithmetic and get their real
// semantics over the virtual topology (`ranks_per_node` consecutive world ranks per node). Device communicators need
// peer memory that a lone rank does not have: they fail with NCCL's code for a communicator without symmetric memory.
#include <cstring>
#include <numeric>

#include "nccl_fake/comm.h"
#include "nccl_fake/runtime.h"

// Layouts of NCCL 2.28's requirement handles (opaque in the public headers; see docs/api-coverage.md).
struct ncclLsaBarrierHandle {
  ncclDevResourceHandle_t bufHandle;
  int nBarriers;
};
struct ncclGinBarrierHandle {
  ncclGinSignal_t signal0;
  ncclDevResourceHandle_t bufHandle;
};
struct ncclLLA2AHandle {
  ncclDevResourceHandle_t bufHandle;
  uint32_t nSlots;
};

namespace nccl_fake {
namespace {

constexpr int kGinMaxContexts = 4;

// NCCL: split ranks 1..n-1 into runs of consecutive ranks on the same node; the LSA size is the gcd of the runs.
int lsaSize(const ncclComm* comm) {
  const int perNode = comm->ranksPerNode > 0 ? comm->ranksPerNode : 1;
  int size = 0, run = 1;
  for (int r = 1; r < comm->nRanks; ++r) {
    if (comm->worldRanks[r] / perNode == comm->worldRanks[r - 1] / perNode) {
      ++run;
    } else {
      size = std::gcd(size, run);
      run = 1;
    }
  }
  return std::gcd(size, run);
}

bool teamCommOk(const ncclComm* comm, const char* op) {
  return commCheck(comm, op, "comm") == ncclSuccess && commAlive(comm, op) == ncclSuccess;
}

}  // namespace

namespace impl {

ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const*, ncclDevComm_t*) {
  NCCLCHECK(commCheck(comm, "ncclDevCommCreate", "comm"));
  WARN(
      "Communicator does not support symmetric memory! (RankLens: device-initiated communication needs peer memory "
      "that a replayed rank does not have; see docs/api-coverage.md)");
  return ncclInvalidUsage;
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const*) {
  NCCLCHECK(commCheck(comm, "ncclDevCommDestroy", "comm"));
  NCCLCHECK(commAlive(comm, "ncclDevCommDestroy"));
  return ncclSuccess;  // nothing can have been created
}

ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  if (!teamCommOk(comm, "ncclTeamWorld")) return ncclTeam_t{};
  return ncclTeam_t{comm->nRanks, comm->rank, 1};
}

ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  if (!teamCommOk(comm, "ncclTeamLsa")) return ncclTeam_t{};
  const int size = lsaSize(comm);
  return ncclTeam_t{size, comm->rank % size, 1};
}

ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  if (!teamCommOk(comm, "ncclTeamRail")) return ncclTeam_t{};
  const int size = lsaSize(comm);
  return ncclTeam_t{comm->nRanks / size, comm->rank / size, size};
}

int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  if (!teamCommOk(comm, "ncclTeamRankToWorld")) return -1;
  return comm->rank + (rank - team.rank) * team.stride;
}

int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  if (!teamCommOk(comm, "ncclTeamRankToLsa")) return -1;
  return comm->rank % lsaSize(comm) + (rank - team.rank) * team.stride;
}

ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq) {
  NCCLCHECK(ptrCheck(outHandle, "ncclLsaBarrierCreateRequirement", "outHandle"));
  NCCLCHECK(ptrCheck(outReq, "ncclLsaBarrierCreateRequirement", "outReq"));
  memset(outReq, 0, sizeof(*outReq));
  outHandle->nBarriers = nBarriers;
  outReq->bufferSize =
      (3 * static_cast<size_t>(nBarriers) + static_cast<size_t>(nBarriers) * team.nRanks) * sizeof(uint32_t);
  outReq->bufferAlign = 4;
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
}

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t, ncclTeam_t, int nBarriers, ncclGinBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq) {
  NCCLCHECK(ptrCheck(outHandle, "ncclGinBarrierCreateRequirement", "outHandle"));
  NCCLCHECK(ptrCheck(outReq, "ncclGinBarrierCreateRequirement", "outReq"));
  memset(outReq, 0, sizeof(*outReq));
  outReq->bufferSize = static_cast<size_t>(nBarriers) * kGinMaxContexts * sizeof(uint32_t);
  outReq->bufferAlign = 4;
  outReq->outBufferHandle = &outHandle->bufHandle;
  outReq->ginSignalCount = nBarriers;
  outReq->outGinSignalStart = &outHandle->signal0;
  return ncclSuccess;
}

int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) { return maxElts * ((maxEltSize + 7) / 8); }

ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                        ncclDevResourceRequirements_t* outReq) {
  NCCLCHECK(ptrCheck(outHandle, "ncclLLA2ACreateRequirement", "outHandle"));
  NCCLCHECK(ptrCheck(outReq, "ncclLLA2ACreateRequirement", "outReq"));
  outHandle->nSlots = static_cast<uint32_t>(nSlots);
  memset(outReq, 0, sizeof(*outReq));
  outReq->bufferSize = static_cast<size_t>(nBlocks) * (1 + 2 * static_cast<size_t>(nSlots)) * 16;
  outReq->bufferAlign = 16;
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
}

}  // namespace impl
}  // namespace nccl_fake

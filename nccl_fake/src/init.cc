// SPDX-License-Identifier: Apache-2.0
// Virtual communicators: creation (init, initAll, scalable, split, shrink), queries, teardown; version, unique ids
// and error strings. A virtual communicator is rank r of N with no peers behind it.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>

#include "nccl_fake/comm_config.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/enqueue.h"
#include "nccl_fake/runtime.h"
#include "ranklens/mesh.h"

namespace nccl_fake {

using ranklens::trace::RecordType;

namespace {
constexpr unsigned int kConfigMagic = 0xcafebeef;

}  // namespace

// NCCL's parseCommConfig: read `size` first, copy at most what we know, require the magic, ignore fields newer than
// the caller's version, validate the rest with NCCL's messages.
ncclResult_t parseCommConfig(const ncclConfig_t* user, CommConfig* out) {
  if (user == nullptr) return ncclSuccess;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  const size_t size = readVersionedStruct(user, &config);
  if (config.magic != kConfigMagic) {
    WARN("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    return ncclInvalidArgument;
  }
  const int undef = NCCL_CONFIG_UNDEF_INT;
  if (config.version < NCCL_VERSION(2, 14, 0)) config.blocking = undef;
  if (config.version < NCCL_VERSION(2, 17, 0)) config.cgaClusterSize = config.minCTAs = config.maxCTAs = undef;
  if (config.version < NCCL_VERSION(2, 27, 0)) config.collnetEnable = config.CTAPolicy = config.shrinkShare = undef;
  if (config.version < NCCL_VERSION(2, 27, 0)) config.nvlsCTAs = undef;
  if (config.version < NCCL_VERSION(2, 28, 0)) config.nChannelsPerNetPeer = config.nvlinkCentricSched = undef;
  if (size < offsetof(ncclConfig_t, commName) + sizeof(config.commName)) config.commName = nullptr;

  auto bad01 = [&](int v) { return v != undef && v != 0 && v != 1; };
  if (bad01(config.blocking)) {
    WARN("Invalid config blocking attribute value %d", config.blocking);
    return ncclInvalidArgument;
  }
  if (config.cgaClusterSize != undef && config.cgaClusterSize < 0) {
    WARN("Invalid config cgaClusterSize attribute value %d", config.cgaClusterSize);
    return ncclInvalidArgument;
  }
  if ((config.minCTAs != undef && config.minCTAs <= 0) || (config.maxCTAs != undef && config.maxCTAs <= 0) ||
      config.minCTAs > config.maxCTAs) {
    WARN("Invalid config min/max channels attribute value %d/%d", config.minCTAs, config.maxCTAs);
    return ncclInvalidArgument;
  }
  if (bad01(config.splitShare)) {
    WARN("Invalid config splitShare attribute value %d", config.splitShare);
    return ncclInvalidArgument;
  }
  if (bad01(config.collnetEnable)) {
    WARN("Invalid config collnetEnable attribute value %d", config.collnetEnable);
    return ncclInvalidArgument;
  }
  if (config.CTAPolicy != undef &&
      (config.CTAPolicy < NCCL_CTA_POLICY_DEFAULT || config.CTAPolicy > NCCL_CTA_POLICY_ZERO)) {
    WARN("Invalid config policy attribute value %d", config.CTAPolicy);
    return ncclInvalidArgument;
  }
  if (bad01(config.shrinkShare)) {
    WARN("Invalid config shrinkShare attribute value %d", config.shrinkShare);
    return ncclInvalidArgument;
  }
  if (config.nvlsCTAs != undef && config.nvlsCTAs <= 0) {
    WARN("Invalid config nvlsCTAs attribute value %d", config.nvlsCTAs);
    return ncclInvalidArgument;
  }
  if (config.nChannelsPerNetPeer != undef && (config.nChannelsPerNetPeer <= 0 || config.nChannelsPerNetPeer > 64)) {
    WARN("Invalid config nChannelsPerNetPeer attribute value %d", config.nChannelsPerNetPeer);
    return ncclInvalidArgument;
  }
  if (bad01(config.nvlinkCentricSched)) {
    WARN("Invalid config nvlinkCentricSched attribute value %d", config.nvlinkCentricSched);
    return ncclInvalidArgument;
  }
  if (config.blocking != undef) out->blocking = config.blocking;
  if (config.commName != nullptr) out->name = config.commName;
  return ncclSuccess;
}

// NCCL_COMM_BLOCKING=0|1 overrides ncclConfig_t.blocking, as NCCL's envConfigOverride does.
void applyBlockingEnv(CommConfig* config) {
  if (const int blocking = ranklens::config::readContext().comm_blocking; blocking >= 0) config->blocking = blocking;
}

namespace {

// Every communicator ever created. Destroyed ones stay as tombstones (a few hundred bytes each) so that a late call
// with a stale handle gets a clear error instead of reading freed memory.
void keepForever(ncclComm* comm) {
  static std::mutex mu;
  static auto* all = new std::vector<std::unique_ptr<ncclComm>>();
  std::lock_guard<std::mutex> lock(mu);
  all->emplace_back(comm);
}

// Creates and announces a virtual communicator; returns ncclInProgress for non-blocking ones (the caller polls
// ncclCommGetAsyncError, which then reports success: a virtual init completes at once).
ncclResult_t createComm(ncclComm_t* out, int nranks, int rank, const CommConfig& config, const char* how,
                        const ncclComm* parent, int64_t color, int64_t key, std::vector<int> worldRanks, int cudaDev) {
  Runtime& rt = Runtime::get();
  auto* comm = new ncclComm();
  keepForever(comm);
  comm->id = rt.nextCommId();
  comm->nRanks = nranks;
  comm->rank = rank;
  comm->cudaDev = cudaDev;
  comm->how = how;
  comm->name = config.name;
  comm->blocking = config.blocking != 0;
  comm->ranksPerNode = rt.settings().ranks_per_node;
  comm->parentId = parent ? static_cast<int64_t>(parent->id) : -1;
  comm->color = color;
  comm->key = key;
  comm->worldRanks = std::move(worldRanks);
  comm->worldSize = parent ? parent->worldSize : nranks;
  if (ncclResult_t matched = replay::onCommCreated(comm); matched != ncclSuccess) {
    comm->destroyed = true;  // stays a tombstone, like every communicator
    *out = nullptr;
    return matched;
  }
  *out = comm;

  ranklens::events::CommInit event;
  event.commId = comm->id;
  event.nranks = nranks;
  event.rank = rank;
  event.parentId = comm->parentId;
  event.color = color;
  event.key = key;
  event.how = how;
  event.name = comm->name;
  event.worldRanks = comm->worldRanks;
  event.cudaDev = cudaDev;
  event.blocking = comm->blocking;
  event.timeNs = monotonicNs();
  rt.emit(RecordType::kCommInit, event, rank);
  INFO(kSubInit, "%s comm %p id %lu rank %d nranks %d cudaDev %d%s%s - Init COMPLETE (virtual)", how,
       static_cast<void*>(comm), static_cast<unsigned long>(comm->id), rank, nranks, cudaDev,
       comm->name.empty() ? "" : " name ", comm->name.c_str());
  return comm->blocking ? ncclSuccess : ncclInProgress;
}

int currentDevice() {
  int dev = 0;
  if (Runtime::get().device().currentDevice(&dev) != 0) dev = 0;
  return dev;
}

std::vector<int> identity(int n) {
  std::vector<int> ranks(n);
  for (int i = 0; i < n; ++i) ranks[i] = i;
  return ranks;
}

ncclResult_t initRankChecked(ncclComm_t* newcomm, int nranks, int rank, ncclConfig_t* config, const char* how,
                             int nId = 1) {
  if (nId <= 0 || nId > nranks) {
    WARN("improper usage of ncclCommInitRank: nId = %d, nranks=%d", nId, nranks);
    return ncclInvalidArgument;
  }
  NCCLCHECK(Runtime::get().ready("CommInitRank"));
  NCCLCHECK(ptrCheck(newcomm, "CommInitRank", "newcomm"));
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("Invalid rank requested : %d/%d", rank, nranks);
    *newcomm = nullptr;
    return ncclInvalidArgument;
  }
  CommConfig parsed;
  ncclResult_t ret = parseCommConfig(config, &parsed);
  if (ret != ncclSuccess) {
    *newcomm = nullptr;
    return ret;
  }
  applyBlockingEnv(&parsed);
  return createComm(newcomm, nranks, rank, parsed, how, nullptr, -1, -1, identity(nranks), currentDevice());
}

// Ends a communicator's life; the object stays as a tombstone so later use gets a clear error, not a crash.
void announceEnd(ncclComm* comm, const char* how) {
  ranklens::events::CommEnd event;
  event.commId = comm->id;
  event.how = how;
  event.timeNs = monotonicNs();
  Runtime::get().emit(RecordType::kCommEnd, event);
  INFO(kSubInit, "comm %p id %lu rank %d nranks %d - %s COMPLETE", static_cast<void*>(comm),
       static_cast<unsigned long>(comm->id), comm->rank, comm->nRanks, how);
}

std::string describeRanks(const std::vector<int>& ranks) {
  std::string text = "[";
  for (size_t i = 0; i < ranks.size() && i < 16; ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) text += ",...";
  return text + "]";
}

}  // namespace

namespace impl {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) {
    WARN("GetVersion : version argument is NULL");
    return ncclInvalidArgument;
  }
  NCCLCHECK(Runtime::get().ready("GetVersion"));
  *version = Runtime::get().settings().nccl_version;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* out) {
  NCCLCHECK(Runtime::get().ready("GetUniqueId"));
  NCCLCHECK(ptrCheck(out, "GetUniqueId", "out"));
  // No bootstrap behind a virtual communicator: the id only has to be recognisable in logs.
  static std::atomic<uint64_t> counter{0};
  memset(out, 0, sizeof(*out));
  const uint64_t pid = static_cast<uint64_t>(getpid()), n = counter.fetch_add(1);
  memcpy(out->internal, "RANKLENS", 8);
  memcpy(out->internal + 8, &pid, sizeof(pid));
  memcpy(out->internal + 16, &n, sizeof(n));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* newcomm, int nranks, ncclUniqueId, int rank) {
  return initRankChecked(newcomm, nranks, rank, nullptr, "init");
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* newcomm, int nranks, ncclUniqueId, int rank, ncclConfig_t* config) {
  return initRankChecked(newcomm, nranks, rank, config, "init");
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  if (nId > 0 && nId <= nranks) NCCLCHECK(ptrCheck(commIds, "CommInitRankScalable", "commIds"));
  return initRankChecked(newcomm, nranks, myrank, config, "initScalable", nId);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  NCCLCHECK(Runtime::get().ready("CommInitAll"));
  NCCLCHECK(ptrCheck(comms, "CommInitAll", "comms"));
  if (ndev < 0) {
    WARN("Invalid device count requested : %d", ndev);
    return ncclInvalidArgument;
  }
  if (devlist != nullptr) {
    std::set<int> seen;
    for (int i = 0; i < ndev; ++i) {
      if (devlist[i] < 0) {
        WARN("Invalid device %d (totalnDev=%d)", devlist[i], ndev);
        return ncclInvalidArgument;
      }
      if (!seen.insert(devlist[i]).second) {
        WARN("CommInitAll : device %d appears twice in devlist", devlist[i]);
        return ncclInvalidUsage;
      }
    }
  }
  CommConfig config;
  config.blocking = 1;
  for (int i = 0; i < ndev; ++i)
    createComm(&comms[i], ndev, i, config, "initAll", nullptr, -1, -1, identity(ndev), devlist ? devlist[i] : i);
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  NCCLCHECK(Runtime::get().ready("ncclCommSplit"));
  NCCLCHECK(commCheck(comm, "ncclCommSplit", "comm"));
  NCCLCHECK(ptrCheck(newcomm, "ncclCommSplit", "newcomm"));
  NCCLCHECK(commUsable(comm, "ncclCommSplit"));
  *newcomm = nullptr;
  if (color == NCCL_SPLIT_NOCOLOR) {
    INFO(kSubInit, "Rank %d has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator", comm->rank);
    return ncclSuccess;
  }
  CommConfig parsed;
  parsed.blocking = comm->blocking ? 1 : 0;
  NCCLCHECK(parseCommConfig(config, &parsed));
  applyBlockingEnv(&parsed);

  // A recording knows the child's size and this rank's place in it.
  int recordedSize = 0, recordedRank = 0;
  std::vector<int> recordedMembers;
  if (replay::recordedSplitChild(comm, color, key, &recordedSize, &recordedRank, &recordedMembers)) {
    INFO(kSubInit, "ncclCommSplit: comm %p color %d key %d -> rank %d of %d, as recorded", static_cast<void*>(comm),
         color, key, recordedRank, recordedSize);
    return createComm(newcomm, recordedSize, recordedRank, parsed, "split", comm, color, key,
                      std::move(recordedMembers), comm->cudaDev);
  }
  // A virtual rank cannot see its peers' colors: the child's members come from the groups table, else the mesh.
  const int me = comm->worldRanks[comm->rank];
  const ranklens::config::GroupSpec* match = nullptr;
  const auto& groups = Runtime::get().settings().groups;
  // Only for the table: a world of 131,072 ranks would pay for it on every split.
  const std::set<int> parentMembers =
      groups.empty() ? std::set<int>() : std::set<int>(comm->worldRanks.begin(), comm->worldRanks.end());
  for (const auto& group : groups) {
    if (group.color && *group.color != color) continue;
    if (std::find(group.members.begin(), group.members.end(), me) == group.members.end()) continue;
    bool subset =
        std::all_of(group.members.begin(), group.members.end(), [&](int r) { return parentMembers.count(r) != 0; });
    if (!subset) continue;
    match = &group;
    break;  // first match in file order (docs/config.md)
  }
  if (match == nullptr && !Runtime::get().settings().mesh.empty()) {
    // The mesh: any rank at any world size, without a table (ranklens/mesh.h).
    ranklens::config::MeshSplit child;
    const ranklens::Status placed = ranklens::config::resolveMeshSplit(
        Runtime::get().settings(), comm->worldSize, comm->worldRanks, comm->rank, color, key, &child);
    if (!placed.isOk()) {
      WARN("%s", placed.message().c_str());
      return ncclInvalidUsage;
    }
    INFO(kSubInit, "ncclCommSplit: comm %p color %d key %d -> rank %d of %zu %s, mesh dimensions '%s' (%s)",
         static_cast<void*>(comm), color, key, child.rank, child.members.size(), describeRanks(child.members).c_str(),
         child.dims.c_str(), child.how.c_str());
    const int size = static_cast<int>(child.members.size());  // before the members move into the call
    return createComm(newcomm, size, child.rank, parsed, "split", comm, color, key, std::move(child.members),
                      comm->cudaDev);
  }
  if (match == nullptr) {
    WARN(
        "ncclCommSplit : cannot size the child of comm %p (rank %d of %d, world rank %d, color %d, key %d): a virtual "
        "rank does not see its peers' colors. Describe the layout with a mesh (e.g. RANKLENS_MESH=dp=-1,tp=2, with "
        "RANKLENS_MESH_COLORS=tp=0-99 when the colors are not torch's; ranklens replay --mesh) or the child in the "
        "config's `groups:` table (e.g. RANKLENS_GROUPS='[{members: [...], color: %d}]' with world ranks in "
        "child-rank order); see docs/config.md",
        static_cast<void*>(comm), comm->rank, comm->nRanks, me, color, key, color);
    return ncclInvalidUsage;
  }
  const int childRank =
      static_cast<int>(std::find(match->members.begin(), match->members.end(), me) - match->members.begin());
  INFO(kSubInit, "ncclCommSplit: comm %p color %d key %d -> %zu ranks %s from groups entry %s%s%s",
       static_cast<void*>(comm), color, key, match->members.size(), describeRanks(match->members).c_str(),
       match->origin.c_str(), match->name.empty() ? "" : " ", match->name.c_str());
  if (parsed.name.empty() && !match->name.empty()) parsed.name = match->name;
  return createComm(newcomm, static_cast<int>(match->members.size()), childRank, parsed, "split", comm, color, key,
                    match->members, comm->cudaDev);
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  NCCLCHECK(Runtime::get().ready("ncclCommShrink"));
  NCCLCHECK(commCheck(comm, "ncclCommShrink", "comm"));
  NCCLCHECK(ptrCheck(newcomm, "ncclCommShrink", "newcomm"));
  NCCLCHECK(ptrCheck(excludeRanksList, "ncclCommShrink", "excludeRanksList"));
  if (excludeRanksCount <= 0) {
    WARN("ncclCommShrink : excludeRanksCount must be positive, got %d", excludeRanksCount);
    return ncclInvalidArgument;
  }
  // NCCL sorts the caller's list in place; do the same so callers see identical side effects.
  std::sort(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::set<int> excluded;
  for (int i = 0; i < excludeRanksCount; ++i) {
    int r = excludeRanksList[i];
    if (r < 0 || r >= comm->nRanks || !excluded.insert(r).second) {
      WARN("ncclCommShrink : excluded rank %d is out of range 0..%d or listed twice", r, comm->nRanks - 1);
      return ncclInvalidArgument;
    }
  }
  if (excluded.count(comm->rank)) {
    WARN("ncclCommShrink : rank %d is in its own exclude list; excluded ranks must not call ncclCommShrink",
         comm->rank);
    return ncclInvalidArgument;
  }
  NCCLCHECK(commUsable(comm, "ncclCommShrink"));
  *newcomm = nullptr;
  CommConfig parsed;
  parsed.blocking = comm->blocking ? 1 : 0;
  NCCLCHECK(parseCommConfig(config, &parsed));
  applyBlockingEnv(&parsed);
  std::vector<int> survivors;
  int childRank = 0;
  for (int r = 0; r < comm->nRanks; ++r) {
    if (excluded.count(r)) continue;
    if (r == comm->rank) childRank = static_cast<int>(survivors.size());
    survivors.push_back(comm->worldRanks[r]);
  }
  (void)shrinkFlags;  // NCCL tests only NCCL_SHRINK_ABORT, which affects in-flight work a virtual comm does not have
  return createComm(newcomm, static_cast<int>(survivors.size()), childRank, parsed, "shrink", comm, -1, -1, survivors,
                    comm->cudaDev);
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  NCCLCHECK(commUsable(comm, "ncclCommFinalize"));
  if (comm->finalized.exchange(true)) {
    WARN("ncclCommFinalize : comm %p was already finalized", static_cast<void*>(comm));
    return ncclInvalidArgument;
  }
  announceEnd(comm, "finalize");
  return comm->blocking ? ncclSuccess : ncclInProgress;
}

static ncclResult_t endComm(ncclComm_t comm, const char* how) {
  if (comm == nullptr) return ncclSuccess;
  NCCLCHECK(commCheck(comm, how, "comm"));
  if (comm->destroyed.exchange(true)) {
    WARN("comm %p has already been destroyed", static_cast<void*>(comm));
    return ncclInvalidArgument;
  }
  announceEnd(comm, how);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return endComm(comm, "destroy"); }
ncclResult_t ncclCommAbort(ncclComm_t comm) { return endComm(comm, "abort"); }

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  if (comm == nullptr) return ncclSuccess;
  NCCLCHECK(commCheck(comm, "ncclCommRevoke", "comm"));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("ncclCommRevoke : revokeFlags must be NCCL_REVOKE_DEFAULT (0), got %d", revokeFlags);
    return ncclInvalidArgument;
  }
  if (comm->destroyed.load() || comm->finalized.load() || comm->revoked.load()) {
    WARN("ncclCommRevoke : comm %p is already destroyed, finalized or revoked", static_cast<void*>(comm));
    return ncclInvalidArgument;
  }
  comm->revoked = true;
  comm->finalized = true;
  announceEnd(comm, "revoke");
  return comm->blocking ? ncclSuccess : ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  NCCLCHECK(commCheck(comm, "ncclGetAsyncError", "comm"));
  NCCLCHECK(ptrCheck(asyncError, "ncclGetAsyncError", "asyncError"));
  NCCLCHECK(commAlive(comm, "ncclGetAsyncError"));
  *asyncError = static_cast<ncclResult_t>(comm->asyncError.load());
  return ncclSuccess;
}

static ncclResult_t queryCheck(const ncclComm* comm, const void* out, const char* op, const char* arg) {
  NCCLCHECK(commCheck(comm, op, "comm"));
  NCCLCHECK(ptrCheck(out, op, arg));
  NCCLCHECK(commAlive(comm, op));
  if (comm->asyncError.load() == ncclInProgress) {
    WARN("Attempt to use communicator before the previous operation returned ncclSuccess");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  NCCLCHECK(queryCheck(comm, count, "CommCount", "count"));
  *count = comm->nRanks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  NCCLCHECK(queryCheck(comm, device, "CommCuDevice", "devid"));
  *device = comm->cudaDev;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  NCCLCHECK(queryCheck(comm, rank, "CommUserRank", "rank"));
  *rank = comm->rank;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    default:
      return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return lastErrorText(); }  // process-wide, as in NCCL

void ncclResetDebugInit() { resetLogging(); }
void ncclResetDebugInitInternal() { resetLogging(); }

}  // namespace impl
}  // namespace nccl_fake

// SPDX-License-Identifier: Apache-2.0
// Conformance of every exported NCCL function through the public C ABI of RankLens's libnccl.so.2, on the host
// device (CTest sets RANKLENS_CONFIG=tests/data/conformance.yaml: host device and a split table). Error paths check
// NCCL's code and that the reason reaches ncclGetLastError.
#include <gtest/gtest.h>
#include <nccl.h>
#include <nccl_device/core.h>
#include <nccl_device/ll_a2a.h>
#include <nccl_device/lsa_barrier.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ranklens_api.h"

namespace {

std::string lastError() { return ncclGetLastError(nullptr); }

ncclComm_t makeComm(int nranks, int rank) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess);
  return comm;
}

#define EXPECT_NCCL_ERROR(call, code, fragment)                                                \
  do {                                                                                         \
    ncclResult_t r_ = (call);                                                                  \
    EXPECT_EQ(r_, code) << #call;                                                              \
    EXPECT_NE(lastError().find(fragment), std::string::npos) << "last error: " << lastError(); \
  } while (0)

TEST(Version, ReportsNccl22809) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
}

TEST(ErrorString, ExactNcclStrings) {
  EXPECT_STREQ(ncclGetErrorString(ncclSuccess), "no error");
  EXPECT_STREQ(ncclGetErrorString(ncclInvalidArgument), "invalid argument (run with NCCL_DEBUG=WARN for details)");
  EXPECT_STREQ(ncclGetErrorString(ncclInProgress), "NCCL operation in progress");
  EXPECT_STREQ(ncclGetErrorString(ncclNumResults), "unknown result code");
  EXPECT_STREQ(ncclGetErrorString(static_cast<ncclResult_t>(-3)), "unknown result code");
}

TEST(UniqueId, NullAndDistinct) {
  EXPECT_NCCL_ERROR(ncclGetUniqueId(nullptr), ncclInvalidArgument, "GetUniqueId : out argument is NULL");
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(memcmp(&a, &b, sizeof(a)), 0);
}

TEST(CommInit, VirtualRankOfN) {
  ncclComm_t comm = makeComm(64, 37);
  int count = 0, rank = -1, dev = -1;
  EXPECT_EQ(ncclCommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(ncclCommUserRank(comm, &rank), ncclSuccess);
  EXPECT_EQ(ncclCommCuDevice(comm, &dev), ncclSuccess);
  EXPECT_EQ(count, 64);
  EXPECT_EQ(rank, 37);
  EXPECT_EQ(dev, 0);
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(CommInit, BadArguments) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_NCCL_ERROR(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, "nId = 1, nranks=0");
  EXPECT_NCCL_ERROR(ncclCommInitRank(&comm, 4, id, 4), ncclInvalidArgument, "Invalid rank requested : 4/4");
  EXPECT_EQ(comm, nullptr);
  EXPECT_NCCL_ERROR(ncclCommInitRank(&comm, 4, id, -1), ncclInvalidArgument, "Invalid rank requested : -1/4");
  EXPECT_NCCL_ERROR(ncclCommInitRank(nullptr, 4, id, 0), ncclInvalidArgument,
                    "CommInitRank : newcomm argument is NULL");
}

TEST(CommInitConfig, ValidatesLikeNccl) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  EXPECT_NCCL_ERROR(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidArgument,
                    "not initialized via NCCL_CONFIG_INITIALIZER");
  config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 2;
  EXPECT_NCCL_ERROR(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidArgument,
                    "Invalid config blocking attribute value 2");
  config = NCCL_CONFIG_INITIALIZER;
  config.minCTAs = 8;
  config.maxCTAs = 4;
  EXPECT_NCCL_ERROR(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidArgument, "min/max channels");
  config = NCCL_CONFIG_INITIALIZER;
  config.CTAPolicy = 7;
  EXPECT_NCCL_ERROR(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidArgument, "policy attribute value 7");
  config = NCCL_CONFIG_INITIALIZER;
  config.nChannelsPerNetPeer = 65;
  EXPECT_NCCL_ERROR(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclInvalidArgument, "nChannelsPerNetPeer");
  // A caller built against an older nccl.h passes a smaller struct with an older version: newer fields are ignored.
  config = NCCL_CONFIG_INITIALIZER;
  config.version = NCCL_VERSION(2, 26, 0);
  config.nChannelsPerNetPeer = -5;  // field introduced in 2.28: must be ignored
  config.size = offsetof(ncclConfig_t, nChannelsPerNetPeer);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 1, &config), ncclSuccess);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 2, id, 1, nullptr), ncclSuccess);  // NULL config = defaults
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

TEST(CommInitConfig, NonBlockingInProgressThenSuccess) {
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "tp";
  EXPECT_EQ(ncclCommInitRankConfig(&comm, 8, id, 5, &config), ncclInProgress);
  ASSERT_NE(comm, nullptr);
  ncclResult_t state = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  float buf[4] = {1, 2, 3, 4};
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  // A bad argument leaves a non-blocking communicator in a sticky error state, as in NCCL.
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, static_cast<ncclDataType_t>(99), ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInvalidArgument);
  EXPECT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
}

TEST(CommInitAll, OneProcessManyRanks) {
  ncclComm_t comms[4] = {};
  ASSERT_EQ(ncclCommInitAll(comms, 4, nullptr), ncclSuccess);
  for (int i = 0; i < 4; ++i) {
    int rank = -1, dev = -1, count = 0;
    ncclCommUserRank(comms[i], &rank);
    ncclCommCuDevice(comms[i], &dev);
    ncclCommCount(comms[i], &count);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(dev, i);
    EXPECT_EQ(count, 4);
    EXPECT_EQ(ncclCommDestroy(comms[i]), ncclSuccess);
  }
  EXPECT_NCCL_ERROR(ncclCommInitAll(comms, -1, nullptr), ncclInvalidArgument, "Invalid device count requested : -1");
  EXPECT_NCCL_ERROR(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument, "CommInitAll : comms argument is NULL");
  int dup[2] = {0, 0};
  EXPECT_EQ(ncclCommInitAll(comms, 2, dup), ncclInvalidUsage);
  EXPECT_EQ(ncclCommInitAll(comms, 0, nullptr), ncclSuccess);
}

TEST(CommInitScalable, ChecksIdCount) {
  ncclUniqueId ids[2];
  ncclGetUniqueId(&ids[0]);
  ncclGetUniqueId(&ids[1]);
  ncclComm_t comm = nullptr;
  EXPECT_NCCL_ERROR(ncclCommInitRankScalable(&comm, 8, 3, 0, ids, nullptr), ncclInvalidArgument, "nId = 0");
  EXPECT_NCCL_ERROR(ncclCommInitRankScalable(&comm, 8, 3, 9, ids, nullptr), ncclInvalidArgument, "nId = 9");
  ASSERT_EQ(ncclCommInitRankScalable(&comm, 8, 3, 2, ids, nullptr), ncclSuccess);
  int count = 0;
  ncclCommCount(comm, &count);
  EXPECT_EQ(count, 8);
  ncclCommDestroy(comm);
}

// tests/data/conformance.yaml: groups {0,2,4,6} color 1 "even", {1,3,5,7} color 1, {4,5} any color "pair".
TEST(CommSplit, FromGroupTable) {
  ncclComm_t world = makeComm(8, 4);
  ncclComm_t child = nullptr;
  ASSERT_EQ(ncclCommSplit(world, 1, 4, &child, nullptr), ncclSuccess);
  int count = 0, rank = -1;
  ncclCommCount(child, &count);
  ncclCommUserRank(child, &rank);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(rank, 2);
  // Any color matches an entry without one; the split of a split resolves in world ranks.
  ncclComm_t pair = nullptr;
  ASSERT_EQ(ncclCommSplit(world, 9, 0, &pair, nullptr), ncclSuccess);
  ncclCommCount(pair, &count);
  ncclCommUserRank(pair, &rank);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(rank, 0);
  ncclComm_t none = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommSplit(world, NCCL_SPLIT_NOCOLOR, 0, &none, nullptr), ncclSuccess);
  EXPECT_EQ(none, nullptr);
  ncclCommDestroy(pair);
  ncclCommDestroy(child);
  ncclCommDestroy(world);
}

TEST(CommSplit, WithoutTableEntryExplainsFix) {
  ncclComm_t world = makeComm(16, 12);  // world rank 12 is in no entry
  ncclComm_t child = nullptr;
  EXPECT_NCCL_ERROR(ncclCommSplit(world, 3, 0, &child, nullptr), ncclInvalidUsage, "RANKLENS_GROUPS");
  EXPECT_NCCL_ERROR(ncclCommSplit(nullptr, 3, 0, &child, nullptr), ncclInvalidArgument,
                    "ncclCommSplit : comm argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommSplit(world, 3, 0, nullptr, nullptr), ncclInvalidArgument, "newcomm argument is NULL");
  ncclCommDestroy(world);
}

TEST(CommShrink, ChildSizeAndRank) {
  ncclComm_t world = makeComm(8, 3);
  int exclude[] = {5, 1};
  ncclComm_t child = nullptr;
  ASSERT_EQ(ncclCommShrink(world, exclude, 2, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess);
  EXPECT_EQ(exclude[0], 1);  // NCCL sorts the caller's list in place
  int count = 0, rank = -1;
  ncclCommCount(child, &count);
  ncclCommUserRank(child, &rank);
  EXPECT_EQ(count, 6);
  EXPECT_EQ(rank, 2);
  int self[] = {3};
  EXPECT_NCCL_ERROR(ncclCommShrink(world, self, 1, &child, nullptr, 0), ncclInvalidArgument, "own exclude list");
  EXPECT_EQ(ncclCommShrink(world, exclude, 0, &child, nullptr, 0), ncclInvalidArgument);
  int outOfRange[] = {8};
  EXPECT_EQ(ncclCommShrink(world, outOfRange, 1, &child, nullptr, 0), ncclInvalidArgument);
  EXPECT_NCCL_ERROR(ncclCommShrink(world, nullptr, 1, &child, nullptr, 0), ncclInvalidArgument, "excludeRanksList");
  ncclCommDestroy(world);
}

TEST(CommLifecycle, FinalizeDestroyAbortRevoke) {
  EXPECT_EQ(ncclCommDestroy(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(nullptr), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(nullptr, 0), ncclSuccess);

  ncclComm_t comm = makeComm(2, 0);
  EXPECT_EQ(ncclCommFinalize(comm), ncclSuccess);
  EXPECT_EQ(ncclCommFinalize(comm), ncclInvalidArgument);
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
  EXPECT_NCCL_ERROR(ncclCommDestroy(comm), ncclInvalidArgument, "has already been destroyed");
  float x = 1;
  EXPECT_NCCL_ERROR(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr), ncclInvalidArgument,
                    "already destroyed");

  ncclComm_t revoked = makeComm(2, 1);
  EXPECT_EQ(ncclCommRevoke(revoked, 1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommRevoke(revoked, NCCL_REVOKE_DEFAULT), ncclSuccess);
  EXPECT_EQ(ncclCommRevoke(revoked, NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  EXPECT_NCCL_ERROR(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, revoked, nullptr), ncclInvalidUsage,
                    "AllReduce: communicator was revoked");
  EXPECT_EQ(ncclCommDestroy(revoked), ncclSuccess);
}

TEST(CommQueries, NullArguments) {
  int v = 0;
  EXPECT_NCCL_ERROR(ncclCommCount(nullptr, &v), ncclInvalidArgument, "CommCount : comm argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommUserRank(nullptr, &v), ncclInvalidArgument, "CommUserRank : comm argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommCuDevice(nullptr, &v), ncclInvalidArgument, "CommCuDevice : comm argument is NULL");
  ncclComm_t comm = makeComm(2, 0);
  EXPECT_NCCL_ERROR(ncclCommCount(comm, nullptr), ncclInvalidArgument, "CommCount : count argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommUserRank(comm, nullptr), ncclInvalidArgument, "CommUserRank : rank argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommCuDevice(comm, nullptr), ncclInvalidArgument, "CommCuDevice : devid argument is NULL");
  EXPECT_NCCL_ERROR(ncclCommGetAsyncError(comm, nullptr), ncclInvalidArgument, "asyncError argument is NULL");
  ncclResult_t r;
  EXPECT_NCCL_ERROR(ncclCommGetAsyncError(nullptr, &r), ncclInvalidArgument, "ncclGetAsyncError : comm argument");
  // A corrupted handle is detected by its guard words.
  std::vector<unsigned char> garbage(4096, 0x5a);
  EXPECT_NCCL_ERROR(ncclCommCount(reinterpret_cast<ncclComm_t>(garbage.data()), &v), ncclInvalidArgument,
                    "corrupted comm object");
  ncclCommDestroy(comm);
}

TEST(Memory, AllocFree) {
  void* ptr = nullptr;
  ASSERT_EQ(ncclMemAlloc(&ptr, 1 << 20), ncclSuccess);
  ASSERT_NE(ptr, nullptr);
  memset(ptr, 1, 1 << 20);  // host device: plain host memory
  EXPECT_EQ(ncclMemFree(ptr), ncclSuccess);
  EXPECT_EQ(ncclMemFree(nullptr), ncclSuccess);
  EXPECT_EQ(ncclMemAlloc(nullptr, 16), ncclUnhandledCudaError);
  void* zero = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(ncclMemAlloc(&zero, 0), ncclSuccess);
  EXPECT_EQ(zero, nullptr);
  int onStack = 0;
  EXPECT_NCCL_ERROR(ncclMemFree(&onStack), ncclUnhandledCudaError, "not allocated by ncclMemAlloc");
}

TEST(Registration, HandlesRefcounted) {
  ncclComm_t comm = makeComm(4, 1);
  std::vector<char> buf(8192);
  void *h1 = nullptr, *h2 = nullptr;
  ASSERT_EQ(ncclCommRegister(comm, buf.data(), buf.size(), &h1), ncclSuccess);
  ASSERT_EQ(ncclCommRegister(comm, buf.data(), buf.size(), &h2), ncclSuccess);
  EXPECT_EQ(h1, h2);
  EXPECT_EQ(ncclCommDeregister(comm, h1), ncclSuccess);
  EXPECT_EQ(ncclCommDeregister(comm, h2), ncclSuccess);
  EXPECT_NCCL_ERROR(ncclCommDeregister(comm, h1), ncclInvalidUsage, "Deregister: Could not find handle");
  EXPECT_EQ(ncclCommDeregister(comm, nullptr), ncclSuccess);
  EXPECT_NCCL_ERROR(ncclCommRegister(nullptr, buf.data(), 1, &h1), ncclInvalidArgument, "ncclCommRegister : comm");
  ncclCommDestroy(comm);
}

TEST(Windows, RegisterDeregister) {
  ncclComm_t comm = makeComm(4, 1);
  void* buf = nullptr;
  ASSERT_EQ(ncclMemAlloc(&buf, 1 << 16), ncclSuccess);
  ncclWindow_t win = nullptr;
  ASSERT_EQ(ncclCommWindowRegister(comm, buf, 1 << 16, &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_NE(win, nullptr);
  ncclWindow_t untouched = reinterpret_cast<ncclWindow_t>(0x77);
  EXPECT_EQ(ncclCommWindowRegister(comm, nullptr, 16, &untouched, 0), ncclSuccess);
  EXPECT_EQ(untouched, reinterpret_cast<ncclWindow_t>(0x77));
  ncclWindow_t misaligned = nullptr;
  EXPECT_NCCL_ERROR(ncclCommWindowRegister(comm, static_cast<char*>(buf) + 8, 64, &misaligned, 0), ncclInvalidArgument,
                    "suitably aligned");
  EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclSuccess);
  EXPECT_EQ(ncclCommWindowDeregister(comm, win), ncclInvalidUsage);
  EXPECT_EQ(ncclCommWindowDeregister(comm, nullptr), ncclSuccess);
  ncclMemFree(buf);
  ncclCommDestroy(comm);
}

TEST(RedOps, PreMulSumLifecycle) {
  ncclComm_t comm = makeComm(4, 2);
  ncclComm_t other = makeComm(4, 2);
  float scalar = 0.5f;
  ncclRedOp_t op;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm), ncclSuccess);
  EXPECT_GE(static_cast<int>(op), static_cast<int>(ncclNumOps));
  float buf[8] = {};
  EXPECT_EQ(ncclAllReduce(buf, buf, 8, ncclFloat, op, comm, nullptr), ncclSuccess);
  EXPECT_NCCL_ERROR(ncclAllReduce(buf, buf, 8, ncclFloat, op, other, nullptr), ncclInvalidArgument,
                    "unknown to this communicator");
  EXPECT_NCCL_ERROR(ncclAllReduce(buf, buf, 4, ncclFloat64, op, comm, nullptr), ncclInvalidArgument,
                    "does not match type");
  EXPECT_NCCL_ERROR(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "operator is a NCCL builtin.");
  EXPECT_NCCL_ERROR(ncclRedOpDestroy(static_cast<ncclRedOp_t>(-1), comm), ncclInvalidArgument, "garbage");
  EXPECT_NCCL_ERROR(ncclRedOpDestroy(op, nullptr), ncclInvalidArgument, "invalid communicator passed");
  EXPECT_EQ(ncclRedOpDestroy(op, comm), ncclSuccess);
  EXPECT_NCCL_ERROR(ncclRedOpDestroy(op, comm), ncclInvalidArgument, "operator unknown to this communicator.");
  EXPECT_NCCL_ERROR(ncclAllReduce(buf, buf, 8, ncclFloat, op, comm, nullptr), ncclInvalidArgument, "unknown");
  ncclCommDestroy(other);
  ncclCommDestroy(comm);
}

// Every collective and P2P call against every argument error NCCL reports.
enum class Call {
  AllReduce,
  Broadcast,
  Bcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv
};
const char* callName(Call c) {
  static const char* names[] = {"AllReduce", "Broadcast", "Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                "AlltoAll",  "Gather",    "Scatter",   "Send",   "Recv"};
  return names[static_cast<int>(c)];
}

ncclResult_t invoke(Call c, const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                    ncclComm_t comm) {
  switch (c) {
    case Call::AllReduce:
      return ncclAllReduce(send, recv, count, type, op, comm, nullptr);
    case Call::Broadcast:
      return ncclBroadcast(send, recv, count, type, root, comm, nullptr);
    case Call::Bcast:
      return ncclBcast(recv, count, type, root, comm, nullptr);
    case Call::Reduce:
      return ncclReduce(send, recv, count, type, op, root, comm, nullptr);
    case Call::AllGather:
      return ncclAllGather(send, recv, count, type, comm, nullptr);
    case Call::ReduceScatter:
      return ncclReduceScatter(send, recv, count, type, op, comm, nullptr);
    case Call::AlltoAll:
      return ncclAlltoAll(send, recv, count, type, comm, nullptr);
    case Call::Gather:
      return ncclGather(send, recv, count, type, root, comm, nullptr);
    case Call::Scatter:
      return ncclScatter(send, recv, count, type, root, comm, nullptr);
    case Call::Send:
      return ncclSend(send, count, type, root, comm, nullptr);
    case Call::Recv:
      return ncclRecv(recv, count, type, root, comm, nullptr);
  }
  return ncclInternalError;
}

class CollectiveErrors : public ::testing::TestWithParam<Call> {
 protected:
  void SetUp() override { comm_ = makeComm(4, 1); }
  void TearDown() override { ncclCommDestroy(comm_); }
  ncclComm_t comm_ = nullptr;
  std::vector<float> send_ = std::vector<float>(64, 1.0f), recv_ = std::vector<float>(64, 0.0f);
};

TEST_P(CollectiveErrors, Valid) {
  // Root 1 is this rank; a P2P call to self outside a group has no partner, so P2P uses peer 2 instead.
  const int mine = (GetParam() == Call::Send || GetParam() == Call::Recv) ? 2 : 1;
  EXPECT_EQ(invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, ncclSum, mine, comm_), ncclSuccess);
  EXPECT_EQ(invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, ncclSum, 0, comm_), ncclSuccess);
  EXPECT_EQ(invoke(GetParam(), nullptr, nullptr, 0, ncclFloat, ncclSum, 0, comm_), ncclSuccess);
}

TEST_P(CollectiveErrors, NullComm) {
  std::string expected = std::string(callName(GetParam())) + " : comm argument is NULL";
  EXPECT_NCCL_ERROR(invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, ncclSum, 0, nullptr),
                    ncclInvalidArgument, expected);
}

TEST_P(CollectiveErrors, InvalidType) {
  for (int type : {-1, 12, 1000}) {
    std::string expected = std::string(callName(GetParam())) + " : invalid type " + std::to_string(type);
    EXPECT_NCCL_ERROR(
        invoke(GetParam(), send_.data(), recv_.data(), 4, static_cast<ncclDataType_t>(type), ncclSum, 0, comm_),
        ncclInvalidArgument, expected);
  }
}

class RootedErrors : public CollectiveErrors {};
class ReductionErrors : public CollectiveErrors {};

TEST_P(RootedErrors, InvalidRootOrPeer) {
  for (int root : {-1, 4, INT_MAX}) {
    std::string expected = std::string(callName(GetParam())) + " : invalid root " + std::to_string(root) +
                           " (root should be in the 0..4 range)";
    EXPECT_NCCL_ERROR(invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, ncclSum, root, comm_),
                      ncclInvalidArgument, expected);
  }
}

TEST_P(ReductionErrors, InvalidReduction) {
  EXPECT_NCCL_ERROR(
      invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, static_cast<ncclRedOp_t>(-2), 0, comm_),
      ncclInvalidArgument, "invalid reduction operation -2");
  EXPECT_NCCL_ERROR(
      invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, static_cast<ncclRedOp_t>(77), 0, comm_),
      ncclInvalidArgument, "reduction operation 77 unknown to this communicator");
}

TEST_P(CollectiveErrors, NullBuffers) {
  // Root 1 is this rank, so every buffer of rooted collectives is significant.
  const Call c = GetParam();
  if (c != Call::Recv && c != Call::Bcast)
    EXPECT_NCCL_ERROR(invoke(c, nullptr, recv_.data(), 4, ncclFloat, ncclSum, 1, comm_), ncclInvalidArgument,
                      "is not a valid pointer");
  if (c != Call::Send)
    EXPECT_NCCL_ERROR(invoke(c, send_.data(), nullptr, 4, ncclFloat, ncclSum, 1, comm_), ncclInvalidArgument,
                      "is not a valid pointer");
}

TEST_P(CollectiveErrors, DestroyedAndCorruptComm) {
  std::vector<unsigned char> garbage(4096, 0);
  EXPECT_NCCL_ERROR(invoke(GetParam(), send_.data(), recv_.data(), 4, ncclFloat, ncclSum, 0,
                           reinterpret_cast<ncclComm_t>(garbage.data())),
                    ncclInvalidArgument, "corrupted comm");
}

std::string paramName(const ::testing::TestParamInfo<Call>& info) {
  return info.param == Call::Bcast ? std::string("Bcast") : std::string(callName(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllCalls, CollectiveErrors,
                         ::testing::Values(Call::AllReduce, Call::Broadcast, Call::Bcast, Call::Reduce, Call::AllGather,
                                           Call::ReduceScatter, Call::AlltoAll, Call::Gather, Call::Scatter, Call::Send,
                                           Call::Recv),
                         paramName);
INSTANTIATE_TEST_SUITE_P(RootedCalls, RootedErrors,
                         ::testing::Values(Call::Broadcast, Call::Bcast, Call::Reduce, Call::Gather, Call::Scatter,
                                           Call::Send, Call::Recv),
                         paramName);
INSTANTIATE_TEST_SUITE_P(ReductionCalls, ReductionErrors,
                         ::testing::Values(Call::AllReduce, Call::Reduce, Call::ReduceScatter), paramName);

TEST(Groups, EndWithoutStart) {
  EXPECT_NCCL_ERROR(ncclGroupEnd(), ncclInvalidUsage, "ncclGroupEnd: not in a group call.");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_NCCL_ERROR(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "not in a group call");
}

TEST(Groups, EffectsAtOutermostEnd) {
  ncclComm_t comm = makeComm(4, 1);
  std::vector<float> send(4, 3.0f), recv(16, -1.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllGather(send.data(), recv.data(), 4, ncclFloat, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);  // inner end: nothing happens yet
  EXPECT_EQ(recv[0], -1.0f);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_NE(recv[4], -1.0f);  // own slot (rank 1) is placed in every mode but keep
  ncclCommDestroy(comm);
}

TEST(Groups, ErrorInsideGroupCancelsGroup) {
  ncclComm_t comm = makeComm(4, 1);
  std::vector<float> send(4, 3.0f), recv(16, -1.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllGather(send.data(), recv.data(), 4, ncclFloat, comm, nullptr), ncclSuccess);
  EXPECT_EQ(ncclSend(send.data(), 4, ncclFloat, 9, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_EQ(recv[4], -1.0f);  // nothing in the failed group took effect
  // The thread's group state is clean again.
  EXPECT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  ncclCommDestroy(comm);
}

TEST(Groups, SelfSendRecvPairedInGroup) {
  ncclComm_t comm = makeComm(4, 2);
  std::vector<float> send(8, 7.0f), recv(8, -1.0f);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclRecv(recv.data(), 8, ncclFloat, 2, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(send.data(), 8, ncclFloat, 2, comm, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  const char* fill = getenv("RANKLENS_FILL");
  if (fill == nullptr || std::string(fill) != "keep") EXPECT_EQ(recv[7], 7.0f);  // the exact data, as NCCL copies it
  EXPECT_NCCL_ERROR(ncclSend(send.data(), 8, ncclFloat, 2, comm, nullptr), ncclInvalidUsage,
                    "Trying to send to self without a matching recv");
  ncclGroupStart();
  ncclRecv(recv.data(), 8, ncclFloat, 2, comm, nullptr);
  EXPECT_NCCL_ERROR(ncclGroupEnd(), ncclInvalidUsage, "Trying to recv to self without a matching send");
  ncclGroupStart();
  ncclRecv(recv.data(), 8, ncclFloat, 2, comm, nullptr);
  ncclSend(send.data(), 4, ncclFloat, 2, comm, nullptr);  // 16 bytes sent, 32 expected
  EXPECT_NCCL_ERROR(ncclGroupEnd(), ncclInvalidUsage, "does not match the paired Send to self");
  ncclCommDestroy(comm);
}

TEST(Groups, SimulateEnd) {
  ncclComm_t comm = makeComm(8, 0);
  std::vector<float> buf(1 << 10, 2.0f), out(1 << 10, -1.0f);
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ncclGroupStart();
  ncclAllReduce(buf.data(), out.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  ASSERT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_GT(sim.estimatedTime, 0.0f);
  EXPECT_EQ(out[0], -1.0f);  // simulated: nothing launched
  ncclSimInfo_t empty = NCCL_SIM_INFO_INITIALIZER;
  ncclGroupStart();
  EXPECT_EQ(ncclGroupSimulateEnd(&empty), ncclSuccess);
  EXPECT_EQ(empty.estimatedTime, NCCL_UNDEF_FLOAT);
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 1;
  ncclGroupStart();
  ncclAllReduce(buf.data(), out.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
  EXPECT_NCCL_ERROR(ncclGroupSimulateEnd(&bad), ncclInvalidArgument, "NCCL_SIM_INFO_INITIALIZER");
  EXPECT_EQ(out[0], -1.0f);
  ncclCommDestroy(comm);
}

TEST(DeviceApi, TeamsOverVirtualTopology) {
  ncclComm_t comm = makeComm(16, 11);  // ranks_per_node 8 (default): two nodes of 8
  ncclTeam_t world = ncclTeamWorld(comm);
  EXPECT_EQ(world.nRanks, 16);
  EXPECT_EQ(world.rank, 11);
  EXPECT_EQ(world.stride, 1);
  ncclTeam_t lsa = ncclTeamLsa(comm);
  EXPECT_EQ(lsa.nRanks, 8);
  EXPECT_EQ(lsa.rank, 3);
  ncclTeam_t rail = ncclTeamRail(comm);
  EXPECT_EQ(rail.nRanks, 2);
  EXPECT_EQ(rail.rank, 1);
  EXPECT_EQ(rail.stride, 8);
  EXPECT_EQ(ncclTeamRankToWorld(comm, rail, 0), 3);
  EXPECT_EQ(ncclTeamRankToWorld(comm, lsa, 0), 8);
  EXPECT_EQ(ncclTeamRankToLsa(comm, lsa, 5), 5);
  EXPECT_EQ(ncclLLA2ACalcSlots(10, 12), 20);
  ncclDevResourceRequirements_t req;
  ncclLLA2AHandle_t* handle = reinterpret_cast<ncclLLA2AHandle_t*>(new uint64_t[2]);
  EXPECT_EQ(ncclLLA2ACreateRequirement(2, 3, handle, &req), ncclSuccess);
  EXPECT_EQ(req.bufferSize, 2u * (1 + 2 * 3) * 16);
  EXPECT_EQ(req.bufferAlign, 16u);
  delete[] reinterpret_cast<uint64_t*>(handle);
  ncclLsaBarrierHandle_t* barrier = reinterpret_cast<ncclLsaBarrierHandle_t*>(new uint64_t[2]);
  EXPECT_EQ(ncclLsaBarrierCreateRequirement(lsa, 2, barrier, &req), ncclSuccess);
  EXPECT_EQ(req.bufferSize, (3u * 2 + 2u * 8) * sizeof(uint32_t));
  delete[] reinterpret_cast<uint64_t*>(barrier);
  ncclDevComm_t* devComm = nullptr;
  ncclDevCommRequirements_t reqs{};
  EXPECT_NCCL_ERROR(ncclDevCommCreate(comm, &reqs, devComm), ncclInvalidUsage, "symmetric memory");
  EXPECT_EQ(ncclDevCommDestroy(comm, nullptr), ncclSuccess);
  ncclCommDestroy(comm);
}

TEST(LastError, ProcessWide) {
  ncclGetVersion(nullptr);
  std::string here = lastError();
  std::string there;
  std::thread([&] { there = lastError(); }).join();
  EXPECT_EQ(here, there);
  EXPECT_FALSE(here.empty());
}

TEST(RanklensApi, Small) {
  EXPECT_EQ(ranklensApiVersion(), RANKLENS_API_VERSION);
  EXPECT_EQ(ranklensMarkStage("step", 1), ncclSuccess);
  EXPECT_EQ(ranklensMarkStage(nullptr, 1), ncclInvalidArgument);
  EXPECT_EQ(ranklensFlush(), ncclSuccess);
  EXPECT_STREQ(ranklensEventLogPath(), "");  // no trace dir configured in this test
}

TEST(Debug, ResetDebugInit) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // deprecated in nccl.h, still exported and callable
  ncclResetDebugInit();                                     // must not crash or change results
#pragma GCC diagnostic pop
  int v = 0;
  EXPECT_EQ(ncclGetVersion(&v), ncclSuccess);
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// The fake "real NCCL" libraries that record-mode tests load instead of libnccl.so.2: each loaded by path, the way
// the recorder loads the real one. Runs with FAKE_REAL_NCCL_SPIN_US=2000 (see CMakeLists.txt).
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct FakeLib {
  void* handle;

  explicit FakeLib(const char* path) : handle(dlopen(path, RTLD_NOW | RTLD_LOCAL)) {
    if (handle == nullptr) ADD_FAILURE() << dlerror();
  }
  bool has(const char* name) const { return dlsym(handle, name) != nullptr; }
  // The exported function `name`, of type F: fn<decltype(ncclAllReduce)>("pncclAllReduce")(...).
  template <typename F>
  F* fn(const char* name) const {
    void* symbol = dlsym(handle, name);
    if (symbol == nullptr) throw std::runtime_error(std::string("missing symbol ") + name);
    return reinterpret_cast<F*>(symbol);
  }
  int calls(const char* name) const { return fn<int(const char*)>("fakeRealNcclCalls")(name); }
  void reset() const { fn<void()>("fakeRealNcclReset")(); }
};
#define FN(lib, name) (lib).fn<decltype(name)>(#name)  // no reference to the symbol itself: nothing links libnccl

// One instance of each library for the whole process (dlclose would not unload them anyway).
const FakeLib& full() {
  static const FakeLib lib(FAKE_REAL_NCCL);
  lib.reset();
  return lib;
}
const FakeLib& old() {
  static const FakeLib lib(FAKE_REAL_NCCL_OLD);
  lib.reset();
  return lib;
}

ncclComm_t initComm(const FakeLib& lib, int nranks, int rank) {
  ncclComm_t comm = nullptr;
  EXPECT_EQ(FN(lib, ncclCommInitRank)(&comm, nranks, ncclUniqueId{}, rank), ncclSuccess);
  return comm;
}

TEST(FakeRealNccl, IsFakeAndReportsItsVersion) {
  int version = 0;
  EXPECT_EQ(full().fn<int()>("fakeRealNcclIsFake")(), 1);
  ASSERT_EQ(FN(full(), ncclGetVersion)(&version), ncclSuccess);
  EXPECT_EQ(version, 22707);
  ASSERT_EQ(FN(old(), ncclGetVersion)(&version), ncclSuccess);
  EXPECT_EQ(version, 22304);
  EXPECT_STREQ(FN(full(), ncclGetErrorString)(ncclInvalidUsage), "fake-real: error 5");
}

TEST(FakeRealNccl, BothLibrariesAreSeparateObjectsNamedLibnccl) {
  EXPECT_NE(full().handle, old().handle);
  EXPECT_EQ(std::string(FAKE_REAL_NCCL).substr(std::string(FAKE_REAL_NCCL).size() - 13), "/libnccl.so.2");
}

TEST(FakeRealNccl, ExportsProfilerAliasesButOldLacksShrinkAndRevoke) {
  EXPECT_TRUE(full().has("pncclAllReduce"));
  EXPECT_TRUE(full().has("ncclCommShrink"));
  EXPECT_TRUE(full().has("pncclCommShrink"));
  EXPECT_TRUE(full().has("pncclCommRevoke"));
  EXPECT_FALSE(full().has("pncclResetDebugInitInternal"));
  EXPECT_TRUE(old().has("ncclAllReduce"));
  EXPECT_TRUE(old().has("pncclAllReduce"));
  EXPECT_FALSE(old().has("ncclCommShrink"));
  EXPECT_FALSE(old().has("pncclCommShrink"));
  EXPECT_FALSE(old().has("ncclCommRevoke"));
  EXPECT_FALSE(old().has("pncclCommRevoke"));
}

TEST(FakeRealNccl, ProfilerAliasCountsAsTheSameFunction) {
  const FakeLib& lib = full();
  int version = 0;
  lib.fn<decltype(ncclGetVersion)>("pncclGetVersion")(&version);
  FN(lib, ncclGetVersion)(&version);
  EXPECT_EQ(lib.calls("ncclGetVersion"), 2);
  EXPECT_EQ(lib.calls("pncclGetVersion"), 2);
  EXPECT_EQ(lib.calls("ncclNoSuchFunction"), -1);
}

TEST(FakeRealNccl, InitAllCallsTheExportedInitRank) {
  const FakeLib& lib = full();
  ncclComm_t comms[3] = {};
  const int devlist[3] = {5, 6, 7};
  ASSERT_EQ(FN(lib, ncclCommInitAll)(comms, 3, devlist), ncclSuccess);
  EXPECT_EQ(lib.calls("ncclCommInitAll"), 1);
  EXPECT_EQ(lib.calls("ncclCommInitRank"), 3);
  for (int i = 0; i < 3; ++i) {
    int count = 0, rank = -1, device = -1;
    ASSERT_EQ(FN(lib, ncclCommCount)(comms[i], &count), ncclSuccess);
    ASSERT_EQ(FN(lib, ncclCommUserRank)(comms[i], &rank), ncclSuccess);
    ASSERT_EQ(FN(lib, ncclCommCuDevice)(comms[i], &device), ncclSuccess);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(device, devlist[i]);
  }
}

TEST(FakeRealNccl, InitRankChecksAndDeviceFromEnvironment) {
  const FakeLib& lib = full();
  ncclComm_t comm = nullptr;
  EXPECT_EQ(FN(lib, ncclCommInitRank)(&comm, 0, ncclUniqueId{}, 0), ncclInvalidArgument);
  EXPECT_EQ(FN(lib, ncclCommInitRank)(&comm, 4, ncclUniqueId{}, 4), ncclInvalidArgument);
  EXPECT_STREQ(FN(lib, ncclGetLastError)(nullptr), "fake-real: ncclCommInitRank: rank 4 out of range [0, 4)");
  setenv("FAKE_REAL_NCCL_DEVICE", "3", 1);
  comm = initComm(lib, 4, 1);
  unsetenv("FAKE_REAL_NCCL_DEVICE");
  int device = -1;
  ASSERT_EQ(FN(lib, ncclCommCuDevice)(comm, &device), ncclSuccess);
  EXPECT_EQ(device, 3);
  EXPECT_EQ(FN(lib, ncclCommDestroy)(comm), ncclSuccess);
}

TEST(FakeRealNccl, AllReduceFloatSumIsSendTimesNranks) {
  const FakeLib& lib = full();
  ncclComm_t comm = initComm(lib, 4, 2);
  std::vector<float> send = {1.0f, 2.5f, -3.0f}, recv(3, 0.0f);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(FN(lib, ncclAllReduce)(send.data(), recv.data(), 3, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::microseconds(2000));  // FAKE_REAL_NCCL_SPIN_US
  EXPECT_EQ(recv, (std::vector<float>{4.0f, 10.0f, -12.0f}));
  std::vector<int> isend = {7, 8}, irecv(2, 0);
  ASSERT_EQ(FN(lib, ncclAllReduce)(isend.data(), irecv.data(), 2, ncclInt32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(irecv, isend);  // anything but a float sum: a copy
  auto* profiled = lib.fn<decltype(ncclAllReduce)>("pncclAllReduce");
  EXPECT_EQ(profiled(send.data(), recv.data(), 0, ncclFloat32, ncclSum, comm, nullptr), ncclSuccess);
  EXPECT_EQ(lib.calls("ncclAllReduce"), 3);
}

TEST(FakeRealNccl, AllGatherRepeatsTheSendBuffer) {
  const FakeLib& lib = full();
  ncclComm_t comm = initComm(lib, 3, 0);
  std::vector<int16_t> send = {1, 2}, recv(6, 0);
  ASSERT_EQ(FN(lib, ncclAllGather)(send.data(), recv.data(), 2, ncclFloat16, comm, nullptr), ncclSuccess);
  EXPECT_EQ(recv, (std::vector<int16_t>{1, 2, 1, 2, 1, 2}));
}

TEST(FakeRealNccl, RecvFillsWithPeerPlusOne) {
  const FakeLib& lib = full();
  ncclComm_t comm = initComm(lib, 4, 0);
  std::vector<uint8_t> recv(8, 0);
  ASSERT_EQ(FN(lib, ncclRecv)(recv.data(), 2, ncclInt32, 2, comm, nullptr), ncclSuccess);
  EXPECT_EQ(recv, std::vector<uint8_t>(8, 3));
  ASSERT_EQ(FN(lib, ncclRecv)(recv.data(), 1, ncclUint8, 255, comm, nullptr), ncclSuccess);
  EXPECT_EQ(recv[0], 0);
  EXPECT_EQ(recv[1], 3);
}

TEST(FakeRealNccl, BcastCallsTheExportedBroadcast) {
  const FakeLib& lib = full();
  ncclComm_t comm = initComm(lib, 2, 1);
  std::vector<double> buff = {1.5, 2.5};
  ASSERT_EQ(FN(lib, ncclBcast)(buff.data(), 2, ncclFloat64, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(buff, (std::vector<double>{1.5, 2.5}));
  EXPECT_EQ(lib.calls("ncclBcast"), 1);
  EXPECT_EQ(lib.calls("ncclBroadcast"), 1);
}

TEST(FakeRealNccl, NonBlockingInitIsInProgressUntilFirstPoll) {
  const FakeLib& lib = full();
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(FN(lib, ncclCommInitRankConfig)(&comm, 2, ncclUniqueId{}, 0, &config), ncclInProgress);
  ncclResult_t state = ncclSuccess;
  ASSERT_EQ(FN(lib, ncclCommGetAsyncError)(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  ASSERT_EQ(FN(lib, ncclCommGetAsyncError)(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclSuccess);
  // A group with a call on a non-blocking communicator ends in progress (and still runs).
  std::vector<uint8_t> recv(4, 0);
  ASSERT_EQ(FN(lib, ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(FN(lib, ncclRecv)(recv.data(), 4, ncclInt8, 0, comm, nullptr), ncclSuccess);
  EXPECT_EQ(FN(lib, ncclGroupEnd)(), ncclInProgress);
  EXPECT_EQ(recv, std::vector<uint8_t>(4, 1));
}

TEST(FakeRealNccl, GroupDefersEffectsToTheOutermostEnd) {
  const FakeLib& lib = full();
  ncclComm_t comm = initComm(lib, 2, 0);
  std::vector<uint8_t> recv(4, 0);
  ASSERT_EQ(FN(lib, ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(FN(lib, ncclGroupStart)(), ncclSuccess);
  ASSERT_EQ(FN(lib, ncclRecv)(recv.data(), 4, ncclInt8, 1, comm, nullptr), ncclSuccess);
  ASSERT_EQ(FN(lib, ncclSend)(recv.data(), 4, ncclInt8, 1, comm, nullptr), ncclSuccess);
  ASSERT_EQ(FN(lib, ncclGroupEnd)(), ncclSuccess);
  EXPECT_EQ(recv, std::vector<uint8_t>(4, 0));
  ASSERT_EQ(FN(lib, ncclGroupEnd)(), ncclSuccess);
  EXPECT_EQ(recv, std::vector<uint8_t>(4, 2));
  EXPECT_EQ(FN(lib, ncclGroupEnd)(), ncclInvalidUsage);
}

TEST(FakeRealNccl, NullCommIsInvalidWithLastError) {
  const FakeLib& lib = full();
  EXPECT_STREQ(FN(lib, ncclGetLastError)(nullptr), "");
  float x = 1.0f;
  EXPECT_EQ(FN(lib, ncclAllReduce)(&x, &x, 1, ncclFloat32, ncclSum, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_STREQ(FN(lib, ncclGetLastError)(nullptr), "fake-real: ncclAllReduce: comm is NULL");
  int count = 0;
  EXPECT_EQ(FN(lib, ncclCommCount)(nullptr, &count), ncclInvalidArgument);
  EXPECT_STREQ(FN(lib, ncclGetLastError)(nullptr), "fake-real: ncclCommCount: comm is NULL");
}

TEST(FakeRealNccl, SplitAndShrink) {
  const FakeLib& lib = full();
  ncclComm_t parent = initComm(lib, 8, 5), child = nullptr;
  ASSERT_EQ(FN(lib, ncclCommSplit)(parent, NCCL_SPLIT_NOCOLOR, 0, &child, nullptr), ncclSuccess);
  EXPECT_EQ(child, nullptr);
  ASSERT_EQ(FN(lib, ncclCommSplit)(parent, 1, 0, &child, nullptr), ncclSuccess);
  int count = 0, rank = 0;
  FN(lib, ncclCommCount)(child, &count);
  FN(lib, ncclCommUserRank)(child, &rank);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(rank, 1);
  int exclude[] = {7};
  ASSERT_EQ(FN(lib, ncclCommShrink)(parent, exclude, 1, &child, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess);
  FN(lib, ncclCommCount)(child, &count);
  FN(lib, ncclCommUserRank)(child, &rank);
  EXPECT_EQ(count, 7);
  EXPECT_EQ(rank, 5);
}

}  // namespace

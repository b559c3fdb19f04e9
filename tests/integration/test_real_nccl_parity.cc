// SPDX-License-Identifier: Apache-2.0
// Differential test: the real NCCL 2.28.9 and RankLens, loaded side by side, must return the same code and the
// same ncclGetLastError text for every bad call that the real library can answer without a GPU.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <functional>
#include <string>

namespace {

struct Lib {
  void* handle = nullptr;
  template <typename F>
  F* sym(const char* name) {
    return reinterpret_cast<F*>(dlsym(handle, name));
  }
};

Lib open(const char* path) {
  Lib lib;
  lib.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return lib;
}

struct Outcome {
  int code;
  std::string lastError;
};

class Parity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    real_ = open(RANKLENS_REAL_NCCL);
    ours_ = open(RANKLENS_OUR_NCCL);
  }
  void SetUp() override {
    if (real_.handle == nullptr) GTEST_SKIP() << "real NCCL not loadable: " << dlerror();
    ASSERT_NE(ours_.handle, nullptr) << dlerror();
  }
  // Runs `call` against a library and captures the result and that library's last error.
  Outcome run(Lib& lib, const std::function<int(Lib&)>& call) {
    int code = call(lib);
    auto* lastError = lib.sym<const char*(ncclComm_t)>("ncclGetLastError");
    return {code, lastError(nullptr)};
  }
  void expectSame(const char* what, const std::function<int(Lib&)>& call) {
    Outcome real = run(real_, call), ours = run(ours_, call);
    EXPECT_EQ(ours.code, real.code) << what;
    EXPECT_EQ(ours.lastError, real.lastError) << what;
  }
  static Lib real_, ours_;
};
Lib Parity::real_, Parity::ours_;

TEST_F(Parity, ErrorStrings) {
  for (int code = -1; code <= 9; ++code) {
    auto* realFn = real_.sym<const char*(ncclResult_t)>("ncclGetErrorString");
    auto* ourFn = ours_.sym<const char*(ncclResult_t)>("ncclGetErrorString");
    EXPECT_STREQ(ourFn(static_cast<ncclResult_t>(code)), realFn(static_cast<ncclResult_t>(code))) << code;
  }
}

TEST_F(Parity, VersionAndNullVersion) {
  int a = 0, b = 0;
  EXPECT_EQ(real_.sym<ncclResult_t(int*)>("ncclGetVersion")(&a), ours_.sym<ncclResult_t(int*)>("ncclGetVersion")(&b));
  EXPECT_EQ(a, b);
  EXPECT_EQ(real_.sym<ncclResult_t(int*)>("ncclGetVersion")(nullptr),
            ours_.sym<ncclResult_t(int*)>("ncclGetVersion")(nullptr));
}

using AllReduceFn = ncclResult_t(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using RootedFn = ncclResult_t(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
using P2pFn = ncclResult_t(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);

TEST_F(Parity, NullCommEveryCollective) {
  float x = 0;
  expectSame("AllReduce", [&](Lib& l) {
    return l.sym<AllReduceFn>("ncclAllReduce")(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr);
  });
  expectSame("ReduceScatter", [&](Lib& l) {
    return l.sym<AllReduceFn>("ncclReduceScatter")(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr);
  });
  expectSame("Broadcast",
             [&](Lib& l) { return l.sym<RootedFn>("ncclBroadcast")(&x, &x, 1, ncclFloat, 0, nullptr, nullptr); });
  expectSame("Gather",
             [&](Lib& l) { return l.sym<RootedFn>("ncclGather")(&x, &x, 1, ncclFloat, 0, nullptr, nullptr); });
  expectSame("Scatter",
             [&](Lib& l) { return l.sym<RootedFn>("ncclScatter")(&x, &x, 1, ncclFloat, 0, nullptr, nullptr); });
  expectSame("Send", [&](Lib& l) { return l.sym<P2pFn>("ncclSend")(&x, 1, ncclFloat, 0, nullptr, nullptr); });
  expectSame("Recv", [&](Lib& l) {
    return l.sym<ncclResult_t(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t)>("ncclRecv")(
        &x, 1, ncclFloat, 0, nullptr, nullptr);
  });
  expectSame("AllGather", [&](Lib& l) {
    return l.sym<ncclResult_t(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)>("ncclAllGather")(
        &x, &x, 1, ncclFloat, nullptr, nullptr);
  });
  expectSame("AlltoAll", [&](Lib& l) {
    return l.sym<ncclResult_t(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t)>("ncclAlltoAll")(
        &x, &x, 1, ncclFloat, nullptr, nullptr);
  });
}

TEST_F(Parity, GroupsAndQueries) {
  expectSame("GroupEnd without start", [](Lib& l) { return l.sym<ncclResult_t()>("ncclGroupEnd")(); });
  expectSame("SimulateEnd without start", [](Lib& l) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    return l.sym<ncclResult_t(ncclSimInfo_t*)>("ncclGroupSimulateEnd")(&sim);
  });
  expectSame("error inside a group surfaces at GroupEnd", [](Lib& l) {
    float x = 0;
    l.sym<ncclResult_t()>("ncclGroupStart")();
    l.sym<AllReduceFn>("ncclAllReduce")(&x, &x, 1, ncclFloat, ncclSum, nullptr, nullptr);
    return static_cast<int>(l.sym<ncclResult_t()>("ncclGroupEnd")());
  });
  expectSame("CommCount NULL", [](Lib& l) {
    int v;
    return l.sym<ncclResult_t(ncclComm_t, int*)>("ncclCommCount")(nullptr, &v);
  });
  expectSame("CommUserRank NULL", [](Lib& l) {
    int v;
    return l.sym<ncclResult_t(ncclComm_t, int*)>("ncclCommUserRank")(nullptr, &v);
  });
  expectSame("CommCuDevice NULL", [](Lib& l) {
    int v;
    return l.sym<ncclResult_t(ncclComm_t, int*)>("ncclCommCuDevice")(nullptr, &v);
  });
  expectSame("GetAsyncError NULL", [](Lib& l) {
    ncclResult_t r;
    return l.sym<ncclResult_t(ncclComm_t, ncclResult_t*)>("ncclCommGetAsyncError")(nullptr, &r);
  });
  for (const char* fn : {"ncclCommDestroy", "ncclCommAbort", "ncclCommFinalize"})
    expectSame(fn, [fn](Lib& l) { return l.sym<ncclResult_t(ncclComm_t)>(fn)(nullptr); });
  expectSame("Revoke NULL", [](Lib& l) { return l.sym<ncclResult_t(ncclComm_t, int)>("ncclCommRevoke")(nullptr, 0); });
  expectSame("RedOpDestroy builtin",
             [](Lib& l) { return l.sym<ncclResult_t(ncclRedOp_t, ncclComm_t)>("ncclRedOpDestroy")(ncclMax, nullptr); });
  expectSame("RedOpDestroy garbage", [](Lib& l) {
    return l.sym<ncclResult_t(ncclRedOp_t, ncclComm_t)>("ncclRedOpDestroy")(static_cast<ncclRedOp_t>(-7), nullptr);
  });
  expectSame("RedOpDestroy NULL comm", [](Lib& l) {
    return l.sym<ncclResult_t(ncclRedOp_t, ncclComm_t)>("ncclRedOpDestroy")(static_cast<ncclRedOp_t>(9), nullptr);
  });
  expectSame("RedOpCreate NULL comm", [](Lib& l) {
    ncclRedOp_t op;
    float s = 1;
    return l.sym<ncclResult_t(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t)>(
        "ncclRedOpCreatePreMulSum")(&op, &s, ncclFloat, ncclScalarHostImmediate, nullptr);
  });
  // Not compared: init and split, where the real library needs a CUDA driver before it checks arguments
  // (covered against NCCL's documented messages in test_api_conformance).
}

}  // namespace

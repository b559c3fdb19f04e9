// SPDX-License-Identifier: Apache-2.0
// Reductions on the GPU, bit for bit: the CUDA device's reduceCopies against the host device's (what CI tests), and
// RankLens's one-rank reductions against the real NCCL's (every operator, every datatype). Skips itself without a
// GPU, and the second part without a loadable real NCCL (RANKLENS_REAL_NCCL, else the toolkit's).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ranklens/device.h"

namespace {

using ranklens::device::Reduction;

bool haveGpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t width;
  bool isFloat;
};
constexpr TypeInfo kTypes[] = {
    {ncclInt8, "int8", 1, false},     {ncclUint8, "uint8", 1, false},       {ncclInt32, "int32", 4, false},
    {ncclUint32, "uint32", 4, false}, {ncclInt64, "int64", 8, false},       {ncclUint64, "uint64", 8, false},
    {ncclFloat16, "fp16", 2, true},   {ncclFloat32, "fp32", 4, true},       {ncclFloat64, "fp64", 8, true},
    {ncclBfloat16, "bf16", 2, true},  {ncclFloat8e4m3, "fp8e4m3", 1, true}, {ncclFloat8e5m2, "fp8e5m2", 1, true},
};

// Every bit pattern of 8- and 16-bit types; for wider ones 2^16 random patterns and the special values' neighbours.
std::vector<unsigned char> inputsFor(const TypeInfo& t) {
  const size_t n = t.width <= 2 ? (size_t{1} << (8 * t.width)) : (size_t{1} << 16);
  std::vector<unsigned char> bytes(n * t.width);
  std::mt19937_64 rng(1234 + t.type);
  for (size_t i = 0; i < n; ++i) {
    uint64_t v = t.width <= 2 ? i : rng();
    if (t.width > 2 && i < 64) {  // zeros, ones, infinities, extremes and their neighbours
      const uint64_t specials[] = {
          0, 1, ~0ull, 0x7F800000, 0xFF800000, 0x7FF0000000000000ull, 0x3F800000, 0x3FF0000000000000ull};
      v = specials[i % 8] + (i / 8) - 4;
    }
    memcpy(&bytes[i * t.width], &v, t.width);
  }
  return bytes;
}

// The scalar bits of a PreMulSum for this type: a few values of either sign, below and above one.
std::vector<uint64_t> scalarsFor(const TypeInfo& t) {
  const double values[] = {0.5, 3.0, -1.25, 0.1};
  std::vector<uint64_t> out;
  for (double v : values) {
    uint64_t bits = 0;
    switch (t.type) {
      case ncclFloat16:
        bits = __half_raw(__double2half(v)).x;
        break;
      case ncclBfloat16:
        bits = __nv_bfloat16_raw(__double2bfloat16(v)).x;
        break;
      case ncclFloat32: {
        const float f = static_cast<float>(v);
        memcpy(&bits, &f, 4);
        break;
      }
      case ncclFloat64:
        memcpy(&bits, &v, 8);
        break;
      case ncclFloat8e4m3:
        bits = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
        break;
      case ncclFloat8e5m2:
        bits = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, __NV_E5M2);
        break;
      default:
        bits = static_cast<uint64_t>(static_cast<int64_t>(std::lround(v * 4)));  // 2, 12, -5, 0
    }
    if (t.width < 8) bits &= (1ull << (8 * t.width)) - 1;
    out.push_back(bits);
  }
  return out;
}

bool isNan(const TypeInfo& t, const unsigned char* p) {
  if (!t.isFloat) return false;
  uint64_t b = 0;
  memcpy(&b, p, t.width);
  switch (t.type) {
    case ncclFloat16:
      return (b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0;
    case ncclBfloat16:
      return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
    case ncclFloat32:
      return (b & 0x7F800000) == 0x7F800000 && (b & 0x7FFFFF) != 0;
    case ncclFloat64:
      return (b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (b & 0xFFFFFFFFFFFFFull) != 0;
    case ncclFloat8e4m3:
      return (b & 0x7F) == 0x7F;
    default:
      return (b & 0x7C) == 0x7C && (b & 0x3) != 0;  // e5m2
  }
}

// Equal bits, or NaN on both sides (NaN payloads are not specified). Returns the first difference's index or -1.
long firstDifference(const TypeInfo& t, const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  for (size_t i = 0; i * t.width < a.size(); ++i) {
    const unsigned char* x = &a[i * t.width];
    const unsigned char* y = &b[i * t.width];
    if (memcmp(x, y, t.width) == 0 || (isNan(t, x) && isNan(t, y))) continue;
    return static_cast<long>(i);
  }
  return -1;
}

std::string hexAt(const TypeInfo& t, const std::vector<unsigned char>& v, long i) {
  uint64_t b = 0;
  memcpy(&b, &v[static_cast<size_t>(i) * t.width], t.width);
  char text[32];
  snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(b));
  return text;
}

// A type's inputs on the device, its output and a scalar's 8 bytes.
struct DeviceBuffers {
  void *in = nullptr, *out = nullptr, *scalar = nullptr;
  explicit DeviceBuffers(const std::vector<unsigned char>& inputs)
      : ok_(cudaMalloc(&in, inputs.size()) == cudaSuccess && cudaMalloc(&out, inputs.size()) == cudaSuccess &&
            cudaMalloc(&scalar, 8) == cudaSuccess &&
            cudaMemcpy(in, inputs.data(), inputs.size(), cudaMemcpyHostToDevice) == cudaSuccess) {}
  ~DeviceBuffers() {
    cudaFree(in);
    cudaFree(out);
    cudaFree(scalar);
  }
  bool ok() const { return ok_; }

 private:
  bool ok_;
};

// The CUDA device's kernel and the host device's loop share their element code: the same bits for every datatype,
// sums and products of 1, 3 and 64 copies, PreMulSums with the scalar immediate or in (device) memory.
TEST(ReduceCopies, CudaDeviceMatchesTheHostDeviceBitForBit) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  std::string why;
  auto cuda = ranklens::device::makeCudaDevice(&why);
  ASSERT_NE(cuda, nullptr) << why;
  auto host = ranklens::device::makeHostDevice();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  for (const TypeInfo& t : kTypes) {
    SCOPED_TRACE(t.name);
    const auto in = inputsFor(t);
    const size_t count = in.size() / t.width;
    DeviceBuffers buffers(in);
    ASSERT_TRUE(buffers.ok());
    void *dIn = buffers.in, *dOut = buffers.out, *dScalar = buffers.scalar;
    std::vector<Reduction> cases;
    for (bool product : {false, true})
      for (uint64_t copies : {1, 3, 64}) {
        Reduction r;
        r.datatype = t.type;
        r.product = product;
        r.copies = copies;
        cases.push_back(r);
      }
    for (uint64_t scalar : scalarsFor(t))
      for (bool inMemory : {false, true}) {
        Reduction r;
        r.datatype = t.type;
        r.copies = inMemory ? 2 : 5;
        r.premul = true;
        r.scalar.bits = scalar;
        if (inMemory) r.scalar.at = &scalar;  // replaced by device memory for the CUDA device below
        cases.push_back(r);
      }
    for (Reduction r : cases) {
      SCOPED_TRACE(std::string(r.product  ? "prod"
                               : r.premul ? "premul"
                                          : "sum") +
                   " x" + std::to_string(r.copies) + (r.scalar.at ? " scalar in memory" : ""));
      uint64_t scalar = r.scalar.bits;
      std::vector<unsigned char> expected(in.size()), got(in.size());
      Reduction onHost = r;
      if (r.scalar.at != nullptr) onHost.scalar = {0, &scalar};
      ASSERT_EQ(host->reduceCopies(expected.data(), in.data(), count, onHost, nullptr), 0);
      if (r.scalar.at != nullptr) {
        ASSERT_EQ(cudaMemcpy(dScalar, &scalar, 8, cudaMemcpyHostToDevice), cudaSuccess);
        r.scalar = {0, dScalar};
      }
      ASSERT_EQ(cuda->reduceCopies(dOut, dIn, count, r, stream), 0) << ranklens::device::lastError();
      ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(got.data(), dOut, got.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      const long i = firstDifference(t, got, expected);
      EXPECT_EQ(i, -1) << "element " << i << " in " << hexAt(t, in, i) << ": GPU " << hexAt(t, got, i) << ", host "
                       << hexAt(t, expected, i);
    }
  }
  cudaStreamDestroy(stream);
}

// The real NCCL, opened with its own symbols first (it must not call RankLens's exports, which this binary links).
struct RealNccl {
  void* handle = nullptr;
  std::string path;
  template <typename F>
  F* sym(const char* name) {
    return reinterpret_cast<F*>(dlsym(handle, name));
  }
};

RealNccl openRealNccl() {
  RealNccl real;
  const char* env = getenv("RANKLENS_REAL_NCCL");
  real.path = env != nullptr && *env != '\0' ? env : RANKLENS_REAL_NCCL_LIB;
  real.handle = dlopen(real.path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  return real;
}

using AllReduceFn = ncclResult_t(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using InitAllFn = ncclResult_t(ncclComm_t*, int, const int*);
using CreatePreMulSumFn = ncclResult_t(ncclRedOp_t*, void*, ncclDataType_t, ncclScalarResidence_t, ncclComm_t);
using RedOpDestroyFn = ncclResult_t(ncclRedOp_t, ncclComm_t);
using CommDestroyFn = ncclResult_t(ncclComm_t);

// One side of the comparison: a library's one-rank communicator and the calls the test makes on it.
struct Side {
  InitAllFn* initAll;
  AllReduceFn* allReduce;
  CreatePreMulSumFn* createPreMulSum;
  RedOpDestroyFn* redOpDestroy;
  CommDestroyFn* commDestroy;
  ncclComm_t comm = nullptr;
};

// On a one-rank communicator NCCL's result depends on no peer: RankLens (replay, fill clone, CUDA device) must give
// the real library's bits for every operator and datatype, PreMulSum with a host or a device scalar included.
TEST(OneRankReductions, SameBitsAsTheRealNccl) {
  if (!haveGpu()) GTEST_SKIP() << "no GPU";
  RealNccl real = openRealNccl();
  if (real.handle == nullptr) GTEST_SKIP() << "real NCCL not loadable (" << real.path << "): " << dlerror();
  Side theirs{real.sym<InitAllFn>("ncclCommInitAll"), real.sym<AllReduceFn>("ncclAllReduce"),
              real.sym<CreatePreMulSumFn>("ncclRedOpCreatePreMulSum"), real.sym<RedOpDestroyFn>("ncclRedOpDestroy"),
              real.sym<CommDestroyFn>("ncclCommDestroy")};
  Side ours{ncclCommInitAll, ncclAllReduce, ncclRedOpCreatePreMulSum, ncclRedOpDestroy, ncclCommDestroy};
  ASSERT_NE(theirs.initAll, nullptr);
  ASSERT_NE(dlsym(RTLD_DEFAULT, "ranklensFlush"), nullptr) << "this binary must link RankLens's libnccl.so.2";
  const int device = 0;
  ASSERT_EQ(theirs.initAll(&theirs.comm, 1, &device), ncclSuccess) << "the real NCCL's one-rank communicator";
  ASSERT_EQ(ours.initAll(&ours.comm, 1, &device), ncclSuccess);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  int compared = 0, refused = 0;
  for (const TypeInfo& t : kTypes) {
    SCOPED_TRACE(t.name);
    const auto in = inputsFor(t);
    const size_t count = in.size() / t.width;
    DeviceBuffers buffers(in);
    ASSERT_TRUE(buffers.ok());
    void *dIn = buffers.in, *dOut = buffers.out, *dScalar = buffers.scalar;
    // Runs one reduction through a side; a PreMulSum operator is created on it from `scalar` (host or device).
    auto run = [&](Side& side, ncclRedOp_t op, const uint64_t* scalar, bool onDevice, ncclResult_t* result) {
      std::vector<unsigned char> out(in.size());
      EXPECT_EQ(cudaMemset(dOut, 0xA5, in.size()), cudaSuccess);
      ncclRedOp_t used = op;
      uint64_t hostScalar = scalar ? *scalar : 0;
      if (scalar != nullptr) {
        EXPECT_EQ(cudaMemcpy(dScalar, scalar, 8, cudaMemcpyHostToDevice), cudaSuccess);
        EXPECT_EQ(side.createPreMulSum(&used, onDevice ? dScalar : &hostScalar, t.type,
                                       onDevice ? ncclScalarDevice : ncclScalarHostImmediate, side.comm),
                  ncclSuccess);
      }
      *result = side.allReduce(dIn, dOut, count, t.type, used, side.comm, stream);
      EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
      if (scalar != nullptr) EXPECT_EQ(side.redOpDestroy(used, side.comm), ncclSuccess);
      EXPECT_EQ(cudaMemcpy(out.data(), dOut, out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
      return out;
    };
    auto compare = [&](const char* what, ncclRedOp_t op, const uint64_t* scalar, bool onDevice) {
      ncclResult_t theirResult, ourResult;
      const auto expected = run(theirs, op, scalar, onDevice, &theirResult);
      const auto got = run(ours, op, scalar, onDevice, &ourResult);
      ++compared;
      EXPECT_EQ(ourResult, theirResult) << what;
      if (theirResult != ncclSuccess) {  // NCCL 2.28.9: fp8 PreMulSum and avg on one rank (ncclInvalidArgument)
        ++refused;
        return;
      }
      const long i = firstDifference(t, got, expected);
      EXPECT_EQ(i, -1) << what << ": element " << i << " in " << hexAt(t, in, i) << ": RankLens " << hexAt(t, got, i)
                       << ", NCCL " << hexAt(t, expected, i);
    };
    compare("sum", ncclSum, nullptr, false);
    compare("prod", ncclProd, nullptr, false);
    compare("max", ncclMax, nullptr, false);
    compare("min", ncclMin, nullptr, false);
    compare("avg", ncclAvg, nullptr, false);
    for (uint64_t scalar : scalarsFor(t)) {
      const std::string what = "premulsum scalar " + std::to_string(scalar);
      compare((what + " host").c_str(), static_cast<ncclRedOp_t>(0), &scalar, false);
      compare((what + " device").c_str(), static_cast<ncclRedOp_t>(0), &scalar, true);
    }
  }
  EXPECT_EQ(compared, 12 * 13);
  EXPECT_EQ(refused, 2 * 9) << "the real NCCL refuses exactly fp8's avg and PreMulSums";
  RecordProperty("comparisons", compared);
  RecordProperty("refused_by_both", refused);
  printf("%d reductions compared, %d refused by both libraries\n", compared, refused);
  theirs.commDestroy(theirs.comm);
  ours.commDestroy(ours.comm);
  cudaStreamDestroy(stream);
}

}  // namespace

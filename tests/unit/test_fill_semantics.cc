// SPDX-License-Identifier: Apache-2.0
// Fill semantics (nccl_fake/src/effects.cc), black-box through the public NCCL API of libnccl.so.2.
// The library reads its settings once per process, so CTest runs this binary once per fill mode with
// RANKLENS_DEVICE=host (buffers are host memory, effects apply synchronously) and RANKLENS_FILL=clone|keep|zero|poison;
// the expectations below follow the mode read from the environment:
//   fromPeers  (a result that depends on peers' data): clone = this rank's own data, keep = untouched, zero = 0,
//              poison = quiet NaN of the type (0xFF bytes for integers);
//   peerData   (data only a peer can provide, no clone rule: Recv, non-root Scatter): clone = 0, keep = untouched,
//              zero = 0, poison = poison;
//   own        (this rank's own contribution where NCCL puts it): this rank's data, except keep = untouched.
//   summed     (a sum over the communicator): clone = what kRanks copies of this rank's data add up to (N x data,
//              rounded once to the datatype; integers wrap), otherwise as fromPeers.
// Buffers hold element bit patterns (uintN_t of the datatype's width), so NaNs compare exactly.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "ranklens_api.h"

namespace {

enum class Fill { kClone, kKeep, kZero, kPoison };

Fill fillMode() {
  static const Fill mode = [] {
    const char* env = getenv("RANKLENS_FILL");
    const std::string value = env ? env : "";
    if (value.empty() || value == "clone") return Fill::kClone;  // the library's default
    if (value == "keep") return Fill::kKeep;
    if (value == "zero") return Fill::kZero;
    if (value == "poison") return Fill::kPoison;
    fprintf(stderr, "RANKLENS_FILL=%s is not a fill mode this test knows\n", value.c_str());
    abort();
  }();
  return mode;
}

// One NCCL datatype: its element width (as an unsigned integer of that width) and its poison bit pattern.
template <ncclDataType_t kType, typename BitsT, BitsT kPoisonBits>
struct TypeCase {
  static constexpr ncclDataType_t type = kType;
  using Bits = BitsT;
  static constexpr Bits poison = kPoisonBits;
};

using Int8 = TypeCase<ncclInt8, uint8_t, 0xFF>;
using Uint8 = TypeCase<ncclUint8, uint8_t, 0xFF>;
using Int32 = TypeCase<ncclInt32, uint32_t, 0xFFFFFFFFu>;
using Uint32 = TypeCase<ncclUint32, uint32_t, 0xFFFFFFFFu>;
using Int64 = TypeCase<ncclInt64, uint64_t, ~0ull>;
using Uint64 = TypeCase<ncclUint64, uint64_t, ~0ull>;
using Float16 = TypeCase<ncclFloat16, uint16_t, 0x7E00>;
using Float32 = TypeCase<ncclFloat32, uint32_t, 0x7FC00000u>;
using Float64 = TypeCase<ncclFloat64, uint64_t, 0x7FF8000000000000ull>;
using Bfloat16 = TypeCase<ncclBfloat16, uint16_t, 0x7FC0>;
using Float8e4m3 = TypeCase<ncclFloat8e4m3, uint8_t, 0x7F>;
using Float8e5m2 = TypeCase<ncclFloat8e5m2, uint8_t, 0x7F>;

constexpr int kRanks = 4;
constexpr int kRank = 2;       // this rank in the 4-rank communicator
constexpr int kOtherRoot = 0;  // a root that is not this rank
constexpr size_t kCount = 5;   // elements per rank (per chunk)

template <typename Bits>
constexpr Bits sentinel() {
  Bits value = 0;
  for (size_t i = 0; i < sizeof(Bits); ++i) value = static_cast<Bits>((value << 8) | 0xA5);
  return value;
}

// Distinct small non-zero values (salt + i, at most 120): never the sentinel, zero, or a poison pattern.
template <typename Bits>
std::vector<Bits> ramp(size_t n, unsigned salt) {
  std::vector<Bits> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<Bits>(salt + i);
  return v;
}

template <typename Bits>
std::vector<Bits> slice(const std::vector<Bits>& v, size_t chunk, size_t count = kCount) {
  return std::vector<Bits>(v.begin() + chunk * count, v.begin() + (chunk + 1) * count);
}

template <typename Bits>
void place(std::vector<Bits>* v, size_t chunk, const std::vector<Bits>& part) {
  std::copy(part.begin(), part.end(), v->begin() + chunk * part.size());
}

// Expected contents per rule; `before` is what the receive buffer held before the call.
template <typename TC>
std::vector<typename TC::Bits> fromPeers(const std::vector<typename TC::Bits>& own,
                                         const std::vector<typename TC::Bits>& before) {
  using Bits = typename TC::Bits;
  switch (fillMode()) {
    case Fill::kClone:
      return own;
    case Fill::kKeep:
      return before;
    case Fill::kZero:
      return std::vector<Bits>(before.size(), 0);
    case Fill::kPoison:
      return std::vector<Bits>(before.size(), TC::poison);
  }
  return {};
}

// One element times n, rounded once to the datatype (the test's reference: exact product in double, then CUDA's own
// round-to-nearest conversion; fp8 saturating). Integers wrap modulo 2^bits.
template <typename TC>
typename TC::Bits timesN(typename TC::Bits bits, unsigned n) {
  using Bits = typename TC::Bits;
  double v = 0;
  switch (TC::type) {
    case ncclFloat16: {
      __half_raw r;
      r.x = static_cast<uint16_t>(bits);
      v = __half2float(__half(r));
      break;
    }
    case ncclBfloat16: {
      __nv_bfloat16_raw r;
      r.x = static_cast<uint16_t>(bits);
      v = __bfloat162float(__nv_bfloat16(r));
      break;
    }
    case ncclFloat32: {
      float f;
      memcpy(&f, &bits, 4);
      v = f;
      break;
    }
    case ncclFloat64:
      memcpy(&v, &bits, 8);
      break;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: {
      const auto kind = TC::type == ncclFloat8e4m3 ? __NV_E4M3 : __NV_E5M2;
      v = __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(bits), kind)));
      break;
    }
    default:
      return static_cast<Bits>(static_cast<uint64_t>(bits) * n);
  }
  v *= n;
  Bits out = 0;
  switch (TC::type) {
    case ncclFloat16:
      out = __half_raw(__double2half(v)).x;
      break;
    case ncclBfloat16:
      out = __nv_bfloat16_raw(__double2bfloat16(v)).x;
      break;
    case ncclFloat32: {
      const float f = static_cast<float>(v);
      memcpy(&out, &f, 4);
      break;
    }
    case ncclFloat64:
      memcpy(&out, &v, 8);
      break;
    default:
      out = __nv_cvt_double_to_fp8(v, __NV_SATFINITE, TC::type == ncclFloat8e4m3 ? __NV_E4M3 : __NV_E5M2);
  }
  return out;
}

template <typename TC>
std::vector<typename TC::Bits> summed(const std::vector<typename TC::Bits>& own,
                                      const std::vector<typename TC::Bits>& before, unsigned ranks) {
  if (fillMode() != Fill::kClone) return fromPeers<TC>(own, before);
  std::vector<typename TC::Bits> out(own.size());
  for (size_t i = 0; i < own.size(); ++i) out[i] = timesN<TC>(own[i], ranks);
  return out;
}

template <typename TC>
std::vector<typename TC::Bits> peerData(const std::vector<typename TC::Bits>& before) {
  using Bits = typename TC::Bits;
  switch (fillMode()) {
    case Fill::kClone:
    case Fill::kZero:
      return std::vector<Bits>(before.size(), 0);
    case Fill::kKeep:
      return before;
    case Fill::kPoison:
      return std::vector<Bits>(before.size(), TC::poison);
  }
  return {};
}

template <typename TC>
std::vector<typename TC::Bits> own(const std::vector<typename TC::Bits>& mine,
                                   const std::vector<typename TC::Bits>& before) {
  return fillMode() == Fill::kKeep ? before : mine;
}

template <typename Bits>
::testing::AssertionResult sameBits(const std::vector<Bits>& actual, const std::vector<Bits>& expected) {
  if (actual.size() != expected.size())
    return ::testing::AssertionFailure() << "size " << actual.size() << " != expected " << expected.size();
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i]) {
      char text[96];
      snprintf(text, sizeof(text), "element %zu is 0x%" PRIx64 ", expected 0x%" PRIx64, i,
               static_cast<uint64_t>(actual[i]), static_cast<uint64_t>(expected[i]));
      const char* fill = getenv("RANKLENS_FILL");
      return ::testing::AssertionFailure() << text << " (RANKLENS_FILL=" << (fill ? fill : "") << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

struct CommDeleter {
  void operator()(ncclComm* comm) const { EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess); }
};
using CommPtr = std::unique_ptr<ncclComm, CommDeleter>;

CommPtr makeComm(int nranks, int rank) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, nranks, id, rank), ncclSuccess);
  return CommPtr(comm);
}

template <typename TC>
class FillSemantics : public ::testing::Test {
 protected:
  using Bits = typename TC::Bits;
  static constexpr ncclDataType_t type = TC::type;

  void SetUp() override {
    comm_ = makeComm(kRanks, kRank);
    ASSERT_NE(comm_, nullptr);
  }
  ncclComm_t comm() const { return comm_.get(); }
  static std::vector<Bits> fresh(size_t n) { return std::vector<Bits>(n, sentinel<Bits>()); }

  CommPtr comm_;
};

using AllTypes = ::testing::Types<Float32, Int32, Bfloat16, Float64, Int8, Uint8, Uint32, Int64, Uint64, Float16,
                                  Float8e4m3, Float8e5m2>;

class TypeNames {
 public:
  template <typename TC>
  static std::string GetName(int) {
    switch (TC::type) {
      case ncclInt8:
        return "int8";
      case ncclUint8:
        return "uint8";
      case ncclInt32:
        return "int32";
      case ncclUint32:
        return "uint32";
      case ncclInt64:
        return "int64";
      case ncclUint64:
        return "uint64";
      case ncclFloat16:
        return "fp16";
      case ncclFloat32:
        return "fp32";
      case ncclFloat64:
        return "fp64";
      case ncclBfloat16:
        return "bf16";
      case ncclFloat8e4m3:
        return "fp8e4m3";
      case ncclFloat8e5m2:
        return "fp8e5m2";
      default:
        return "unknown";
    }
  }
};

TYPED_TEST_SUITE(FillSemantics, AllTypes, TypeNames);

// ---------------------------------------------------------------------------------------------------- AllReduce

// Under clone a sum is what kRanks clones of this rank add up to; max (below) is this rank's data.
TYPED_TEST(FillSemantics, AllReduceOutOfPlace) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), kCount, TestFixture::type, ncclSum, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, summed<TypeParam>(send, before, kRanks)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));  // the send buffer is never written
}

TYPED_TEST(FillSemantics, AllReduceInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclAllReduce(buf.data(), buf.data(), kCount, TestFixture::type, ncclMax, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(buf, fromPeers<TypeParam>(before, before)));
}

// ------------------------------------------------------------------------------------------------------- Reduce

TYPED_TEST(FillSemantics, ReduceAtRoot) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclReduce(send.data(), recv.data(), kCount, TestFixture::type, ncclSum, kRank, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, summed<TypeParam>(send, before, kRanks)));
}

TYPED_TEST(FillSemantics, ReduceAtRootInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclReduce(buf.data(), buf.data(), kCount, TestFixture::type, ncclSum, kRank, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(buf, summed<TypeParam>(before, before, kRanks)));
}

TYPED_TEST(FillSemantics, ReduceAtNonRootLeavesRecvUntouched) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclReduce(send.data(), recv.data(), kCount, TestFixture::type, ncclSum, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, before));
  // NCCL does not use recvbuff on a non-root rank: NULL is fine.
  EXPECT_EQ(ncclReduce(send.data(), nullptr, kCount, TestFixture::type, ncclSum, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
}

// ---------------------------------------------------------------------------------------------- Broadcast, Bcast

TYPED_TEST(FillSemantics, BroadcastAtRootCopiesSend) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclBroadcast(send.data(), recv.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));
}

TYPED_TEST(FillSemantics, BroadcastAtRootInPlaceUntouched) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclBroadcast(buf.data(), buf.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(buf, before));
}

// A clone root holds what this rank's receive buffer holds; the non-root sendbuff is never read (NCCL ignores it).
TYPED_TEST(FillSemantics, BroadcastAtNonRootOutOfPlace) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclBroadcast(send.data(), recv.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, fromPeers<TypeParam>(before, before)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));
}

// In place at a non-root: under clone the root's data is this rank's data, so the buffer stays as it is.
TYPED_TEST(FillSemantics, BroadcastAtNonRootInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclBroadcast(buf.data(), buf.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(buf, fromPeers<TypeParam>(before, before)));
}

// NCCL ignores sendbuff on non-root ranks, so NULL is legal.
TYPED_TEST(FillSemantics, BroadcastAtNonRootWithoutSendbuff) {
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclBroadcast(nullptr, recv.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, fromPeers<TypeParam>(before, before)));
}

TYPED_TEST(FillSemantics, BcastAtRootUntouched) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclBcast(buf.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(buf, before));
}

TYPED_TEST(FillSemantics, BcastAtNonRoot) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclBcast(buf.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(buf, fromPeers<TypeParam>(before, before)));
}

// ---------------------------------------------------------------------------------------------------- AllGather

TYPED_TEST(FillSemantics, AllGatherOutOfPlace) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kRanks * kCount);
  const auto before = recv;
  ASSERT_EQ(ncclAllGather(send.data(), recv.data(), kCount, TestFixture::type, this->comm(), nullptr), ncclSuccess);
  auto expected = before;
  for (int j = 0; j < kRanks; ++j) {
    const auto slot = slice(before, j);
    place(&expected, j, j == kRank ? own<TypeParam>(send, slot) : fromPeers<TypeParam>(send, slot));
  }
  EXPECT_TRUE(sameBits(recv, expected));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));
}

// In place: sendbuff == recvbuff + rank * count; the own slot already holds the data.
TYPED_TEST(FillSemantics, AllGatherInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kRanks * kCount, 1);
  const auto before = buf;
  const auto mine = slice(before, kRank);
  ASSERT_EQ(ncclAllGather(buf.data() + kRank * kCount, buf.data(), kCount, TestFixture::type, this->comm(), nullptr),
            ncclSuccess);
  auto expected = before;
  for (int j = 0; j < kRanks; ++j)
    if (j != kRank) place(&expected, j, fromPeers<TypeParam>(mine, slice(before, j)));
  EXPECT_TRUE(sameBits(buf, expected));
}

// ------------------------------------------------------------------------------------------------ ReduceScatter

// The result depends on every peer's chunk `rank`; a clone peer's chunk `rank` is this rank's.
TYPED_TEST(FillSemantics, ReduceScatterOutOfPlace) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kRanks * kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclReduceScatter(send.data(), recv.data(), kCount, TestFixture::type, ncclSum, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, summed<TypeParam>(slice(send, kRank), before, kRanks)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kRanks * kCount, 1)));
}

// In place: recvbuff == sendbuff + rank * recvcount; the other chunks of the send buffer are never written.
TYPED_TEST(FillSemantics, ReduceScatterInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kRanks * kCount, 1);
  const auto before = buf;
  ASSERT_EQ(ncclReduceScatter(buf.data(), buf.data() + kRank * kCount, kCount, TestFixture::type, ncclSum, this->comm(),
                              nullptr),
            ncclSuccess);
  auto expected = before;
  place(&expected, kRank, summed<TypeParam>(slice(before, kRank), slice(before, kRank), kRanks));
  EXPECT_TRUE(sameBits(buf, expected));
}

// ----------------------------------------------------------------------------------------------------- AlltoAll

// Chunk j comes from peer j; a clone peer sends what this rank sends to itself (send chunk `rank`).
TYPED_TEST(FillSemantics, AlltoAll) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kRanks * kCount, 1);
  auto recv = this->fresh(kRanks * kCount);
  const auto before = recv;
  ASSERT_EQ(ncclAlltoAll(send.data(), recv.data(), kCount, TestFixture::type, this->comm(), nullptr), ncclSuccess);
  const auto mine = slice(send, kRank);
  auto expected = before;
  for (int j = 0; j < kRanks; ++j) {
    const auto slot = slice(before, j);
    place(&expected, j, j == kRank ? own<TypeParam>(mine, slot) : fromPeers<TypeParam>(mine, slot));
  }
  EXPECT_TRUE(sameBits(recv, expected));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kRanks * kCount, 1)));
}

// ------------------------------------------------------------------------------------------------------- Gather

TYPED_TEST(FillSemantics, GatherAtRoot) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kRanks * kCount);
  const auto before = recv;
  ASSERT_EQ(ncclGather(send.data(), recv.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr), ncclSuccess);
  auto expected = before;
  for (int j = 0; j < kRanks; ++j) {
    const auto slot = slice(before, j);
    place(&expected, j, j == kRank ? own<TypeParam>(send, slot) : fromPeers<TypeParam>(send, slot));
  }
  EXPECT_TRUE(sameBits(recv, expected));
}

TYPED_TEST(FillSemantics, GatherAtRootInPlace) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kRanks * kCount, 1);
  const auto before = buf;
  const auto mine = slice(before, kRank);
  ASSERT_EQ(
      ncclGather(buf.data() + kRank * kCount, buf.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr),
      ncclSuccess);
  auto expected = before;
  for (int j = 0; j < kRanks; ++j)
    if (j != kRank) place(&expected, j, fromPeers<TypeParam>(mine, slice(before, j)));
  EXPECT_TRUE(sameBits(buf, expected));
}

TYPED_TEST(FillSemantics, GatherAtNonRootLeavesRecvUntouched) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kRanks * kCount);
  const auto before = recv;
  ASSERT_EQ(ncclGather(send.data(), recv.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, before));
  EXPECT_EQ(ncclGather(send.data(), nullptr, kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
}

// ------------------------------------------------------------------------------------------------------ Scatter

TYPED_TEST(FillSemantics, ScatterAtRoot) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kRanks * kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclScatter(send.data(), recv.data(), kCount, TestFixture::type, kRank, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(slice(send, kRank), before)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kRanks * kCount, 1)));
}

TYPED_TEST(FillSemantics, ScatterAtRootInPlaceUntouched) {
  using Bits = typename TestFixture::Bits;
  auto buf = ramp<Bits>(kRanks * kCount, 1);
  const auto before = buf;
  ASSERT_EQ(
      ncclScatter(buf.data(), buf.data() + kRank * kCount, kCount, TestFixture::type, kRank, this->comm(), nullptr),
      ncclSuccess);
  EXPECT_TRUE(sameBits(buf, before));
}

// Non-root: the data only the root has, with no clone rule (a non-root sendbuff is ignored, as NCCL does).
TYPED_TEST(FillSemantics, ScatterAtNonRoot) {
  using Bits = typename TestFixture::Bits;
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclScatter(nullptr, recv.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv, peerData<TypeParam>(before)));

  const auto send = ramp<Bits>(kRanks * kCount, 1);
  auto recv2 = this->fresh(kCount);
  ASSERT_EQ(ncclScatter(send.data(), recv2.data(), kCount, TestFixture::type, kOtherRoot, this->comm(), nullptr),
            ncclSuccess);
  EXPECT_TRUE(sameBits(recv2, peerData<TypeParam>(before)));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kRanks * kCount, 1)));
}

// --------------------------------------------------------------------------------------------------- Send, Recv

TYPED_TEST(FillSemantics, SendHasNoEffect) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto neighbour = this->fresh(kCount);  // a buffer next to it, to catch a stray write
  ASSERT_EQ(ncclSend(send.data(), kCount, TestFixture::type, 1, this->comm(), nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));
  EXPECT_TRUE(sameBits(neighbour, this->fresh(kCount)));
}

TYPED_TEST(FillSemantics, Recv) {
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ASSERT_EQ(ncclRecv(recv.data(), kCount, TestFixture::type, 3, this->comm(), nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, peerData<TypeParam>(before)));
}

// ----------------------------------------------------------------------------------------------------- count 0

TYPED_TEST(FillSemantics, CountZeroAcceptsNullBuffersAndWritesNothing) {
  using Bits = typename TestFixture::Bits;
  const ncclDataType_t t = TestFixture::type;
  ncclComm_t c = this->comm();
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclReduce(nullptr, nullptr, 0, t, ncclSum, kRank, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(nullptr, nullptr, 0, t, kRank, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclBcast(nullptr, 0, t, kOtherRoot, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, t, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclReduceScatter(nullptr, nullptr, 0, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAlltoAll(nullptr, nullptr, 0, t, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGather(nullptr, nullptr, 0, t, kRank, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclScatter(nullptr, nullptr, 0, t, kRank, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclSend(nullptr, 0, t, 1, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclRecv(nullptr, 0, t, 1, c, nullptr), ncclSuccess);

  // Real buffers with count 0: nothing is written, in any mode.
  const auto send = ramp<Bits>(kRanks * kCount, 1);
  auto recv = this->fresh(kRanks * kCount);
  const auto before = recv;
  EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 0, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllGather(send.data(), recv.data(), 0, t, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAlltoAll(send.data(), recv.data(), 0, t, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(send.data(), recv.data(), 0, t, kRank, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclScatter(nullptr, recv.data(), 0, t, kOtherRoot, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclRecv(recv.data(), 0, t, 1, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, before));

  // count 0 inside a group, too.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclRecv(nullptr, 0, t, 1, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

// -------------------------------------------------------------------------------------------------------- groups

TYPED_TEST(FillSemantics, GroupAppliesEffectsAtOutermostGroupEnd) {
  using Bits = typename TestFixture::Bits;
  const ncclDataType_t t = TestFixture::type;
  ncclComm_t c = this->comm();
  const auto send = ramp<Bits>(kCount, 1);
  auto reduced = this->fresh(kCount), received = this->fresh(kCount), gathered = this->fresh(kRanks * kCount);
  const auto fresh1 = this->fresh(kCount), freshN = this->fresh(kRanks * kCount);

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send.data(), reduced.data(), kCount, t, ncclSum, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nested
  ASSERT_EQ(ncclRecv(received.data(), kCount, t, 1, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclSend(send.data(), kCount, t, 3, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);  // inner end: nothing happens yet
  ASSERT_EQ(ncclAllGather(send.data(), gathered.data(), kCount, t, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(reduced, fresh1));
  EXPECT_TRUE(sameBits(received, fresh1));
  EXPECT_TRUE(sameBits(gathered, freshN));
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);  // outermost end: every effect, as if each call ran alone

  EXPECT_TRUE(sameBits(reduced, summed<TypeParam>(send, fresh1, kRanks)));
  EXPECT_TRUE(sameBits(received, peerData<TypeParam>(fresh1)));
  auto expected = freshN;
  for (int j = 0; j < kRanks; ++j) {
    const auto slot = slice(freshN, j);
    place(&expected, j, j == kRank ? own<TypeParam>(send, slot) : fromPeers<TypeParam>(send, slot));
  }
  EXPECT_TRUE(sameBits(gathered, expected));
  EXPECT_TRUE(sameBits(send, ramp<Bits>(kCount, 1)));
}

// A call that fails inside a group returns its error at once; ncclGroupEnd then returns it too, and no call of the
// group has any effect. The group state is reset afterwards.
TYPED_TEST(FillSemantics, FailingCallCancelsTheWholeGroup) {
  using Bits = typename TestFixture::Bits;
  const ncclDataType_t t = TestFixture::type;
  ncclComm_t c = this->comm();
  const auto send = ramp<Bits>(kCount, 1);
  auto reduced = this->fresh(kCount), received = this->fresh(kCount);
  const auto before = this->fresh(kCount);

  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(send.data(), reduced.data(), kCount, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclAllReduce(send.data(), nullptr, kCount, t, ncclSum, c, nullptr), ncclInvalidArgument);  // NULL recv
  EXPECT_EQ(ncclRecv(received.data(), kCount, t, 1, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_TRUE(sameBits(reduced, before));
  EXPECT_TRUE(sameBits(received, before));

  // A bad root in a nested group: same outcome at the outermost end.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclRecv(received.data(), kCount, t, 1, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclBroadcast(send.data(), reduced.data(), kCount, t, kRanks, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);  // inner end reports nothing yet
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  EXPECT_TRUE(sameBits(reduced, before));
  EXPECT_TRUE(sameBits(received, before));

  // The error does not stick: the next group and the next plain call apply normally.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclRecv(received.data(), kCount, t, 1, c, nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_TRUE(sameBits(received, peerData<TypeParam>(before)));
  EXPECT_EQ(ncclAllReduce(send.data(), reduced.data(), kCount, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(reduced, summed<TypeParam>(send, before, kRanks)));
}

TYPED_TEST(FillSemantics, SimulatedGroupHasNoEffect) {
  using Bits = typename TestFixture::Bits;
  const auto send = ramp<Bits>(kCount, 1);
  auto recv = this->fresh(kCount);
  const auto before = recv;
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), kCount, TestFixture::type, ncclSum, this->comm(), nullptr),
            ncclSuccess);
  ASSERT_EQ(ncclRecv(recv.data(), kCount, TestFixture::type, 1, this->comm(), nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, before));
  EXPECT_GT(sim.estimatedTime, 0.0f);
}

TYPED_TEST(FillSemantics, GroupEndWithoutGroupStartIsInvalidUsage) { EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage); }

// --------------------------------------------------------------------------------------------- 1-rank communicator

// With one rank there are no peers: every op that moves data places this rank's own data, in every mode but keep.
TYPED_TEST(FillSemantics, OneRankCommDataMovement) {
  using Bits = typename TestFixture::Bits;
  const ncclDataType_t t = TestFixture::type;
  CommPtr solo = makeComm(1, 0);
  ASSERT_NE(solo, nullptr);
  ncclComm_t c = solo.get();
  const auto send = ramp<Bits>(kCount, 1);
  const auto before = this->fresh(kCount);

  auto recv = before;
  ASSERT_EQ(ncclBroadcast(send.data(), recv.data(), kCount, t, 0, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclAllGather(send.data(), recv.data(), kCount, t, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclAlltoAll(send.data(), recv.data(), kCount, t, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclGather(send.data(), recv.data(), kCount, t, 0, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclScatter(send.data(), recv.data(), kCount, t, 0, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  // Invalid peers and roots are still checked against the real size.
  EXPECT_EQ(ncclRecv(recv.data(), kCount, t, 1, c, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclBroadcast(send.data(), recv.data(), kCount, t, 1, c, nullptr), ncclInvalidArgument);
}

// A reduction over a 1-rank communicator depends on no peer's data: NCCL's exact result in every mode but keep.
TYPED_TEST(FillSemantics, OneRankCommReductionsReturnOwnData) {
  using Bits = typename TestFixture::Bits;
  const ncclDataType_t t = TestFixture::type;
  CommPtr solo = makeComm(1, 0);
  ASSERT_NE(solo, nullptr);
  ncclComm_t c = solo.get();
  const auto send = ramp<Bits>(kCount, 1);
  const auto before = this->fresh(kCount);

  auto recv = before;
  ASSERT_EQ(ncclAllReduce(send.data(), recv.data(), kCount, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclReduce(send.data(), recv.data(), kCount, t, ncclSum, 0, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
  recv = before;
  ASSERT_EQ(ncclReduceScatter(send.data(), recv.data(), kCount, t, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_TRUE(sameBits(recv, own<TypeParam>(send, before)));
}

// ------------------------------------------------------------------------------ reductions, hand-computed values

// One element reduced over a communicator of `ranks` ranks (this rank 0 at the root), through the public API; the
// element's bits in and out.
template <typename Bits>
Bits reduceOne(Bits in, ncclDataType_t type, ncclRedOp_t op, int ranks, ncclComm_t comm = nullptr) {
  CommPtr owned;
  if (comm == nullptr) {
    owned = makeComm(ranks, 0);
    comm = owned.get();
  }
  Bits out = sentinel<Bits>();
  EXPECT_EQ(ncclAllReduce(&in, &out, 1, type, op, comm, nullptr), ncclSuccess);
  return out;
}

// Rounded once, to nearest even: 3 x (1 + 2^-23) = 3 + 1.5 ulp, a tie, goes to the even neighbour (3 + 2 ulp).
TEST(CloneReduction, SumsRoundOnceToNearestEven) {
  if (fillMode() != Fill::kClone) GTEST_SKIP() << "clone semantics";
  EXPECT_EQ(reduceOne<uint32_t>(0x3F800001u, ncclFloat32, ncclSum, 3), 0x40400002u);
  EXPECT_EQ(reduceOne<uint16_t>(0x3F81, ncclBfloat16, ncclSum, 3), 0x4042);  // 3 x 1.0078125 -> 3.03125
  EXPECT_EQ(reduceOne<uint16_t>(0x3E00, ncclFloat16, ncclSum, 3), 0x4480);   // 3 x 1.5 = 4.5
  EXPECT_EQ(reduceOne<uint8_t>(0x3C, ncclFloat8e4m3, ncclSum, 3), 0x49);     // 3 x 1.5 = 4.5
  EXPECT_EQ(reduceOne<uint8_t>(0x3E, ncclFloat8e5m2, ncclSum, 3), 0x44);     // 4.5 is a tie in e5m2: 4.0
  EXPECT_EQ(reduceOne<uint64_t>(0x3FB999999999999Aull, ncclFloat64, ncclSum, 3), 0x3FD3333333333334ull);  // 0.3..04
  EXPECT_EQ(reduceOne<uint32_t>(0x3FC00000u, ncclFloat32, ncclSum, 4), 0x40C00000u);                      // 4 x 1.5 = 6
}

TEST(CloneReduction, OverflowGivesInfinityOrFp8sLargestFiniteValue) {
  if (fillMode() != Fill::kClone) GTEST_SKIP() << "clone semantics";
  EXPECT_EQ(reduceOne<uint16_t>(0x7BFF, ncclFloat16, ncclSum, 4), 0x7C00);           // 4 x 65504 -> +inf
  EXPECT_EQ(reduceOne<uint16_t>(0xFBFF, ncclFloat16, ncclSum, 4), 0xFC00);           // -inf
  EXPECT_EQ(reduceOne<uint8_t>(0x7E, ncclFloat8e4m3, ncclSum, 3), 0x7E);             // 3 x 448 -> 448
  EXPECT_EQ(reduceOne<uint8_t>(0x7B, ncclFloat8e5m2, ncclSum, 3), 0x7B);             // 3 x 57344 -> 57344
  EXPECT_EQ(reduceOne<uint16_t>(0x7E00, ncclFloat16, ncclSum, 4) & 0x7E00, 0x7E00);  // NaN stays NaN
}

TEST(CloneReduction, IntegersWrap) {
  if (fillMode() != Fill::kClone) GTEST_SKIP() << "clone semantics";
  EXPECT_EQ(reduceOne<uint8_t>(100, ncclInt8, ncclSum, 3), 44);     // 300 mod 256
  EXPECT_EQ(reduceOne<uint8_t>(0xFD, ncclInt8, ncclSum, 3), 0xF7);  // -3 x 3 = -9
  EXPECT_EQ(reduceOne<uint8_t>(7, ncclUint8, ncclProd, 3), 87);     // 343 mod 256
  EXPECT_EQ(reduceOne<uint64_t>(1ull << 63, ncclUint64, ncclSum, 3), 1ull << 63);
  EXPECT_EQ(reduceOne<uint32_t>(0xFFFFFFFFu, ncclInt32, ncclProd, 3), 0xFFFFFFFFu);  // (-1)^3
  EXPECT_EQ(reduceOne<uint32_t>(0xFFFFFFFFu, ncclInt32, ncclProd, 4), 1u);           // (-1)^4
}

TEST(CloneReduction, ProductMaxMinAvg) {
  if (fillMode() != Fill::kClone) GTEST_SKIP() << "clone semantics";
  EXPECT_EQ(reduceOne<uint32_t>(0x3FC00000u, ncclFloat32, ncclProd, 3), 0x40580000u);  // 1.5^3 = 3.375
  EXPECT_EQ(reduceOne<uint16_t>(0x3E00, ncclFloat16, ncclProd, 4), 0x4510);            // 1.5^4 = 5.0625
  for (ncclRedOp_t op : {ncclMax, ncclMin, ncclAvg}) {
    EXPECT_EQ(reduceOne<uint32_t>(0x3FC00000u, ncclFloat32, op, 3), 0x3FC00000u) << op;
    EXPECT_EQ(reduceOne<uint8_t>(0xFD, ncclInt8, op, 5), 0xFD) << op;
  }
}

// PreMulSum: each contribution is multiplied by the scalar (rounded to the type), then summed. A host scalar is read
// when the operator is created, a device scalar when the reduction runs, and the operator may be destroyed once the
// call has returned, even inside a group (NCCL takes the scalar at the call).
TEST(CloneReduction, PreMulSumScalarResidence) {
  if (fillMode() == Fill::kKeep) GTEST_SKIP() << "keep never writes a receive buffer";
  for (int ranks : {1, 3}) {
    SCOPED_TRACE(ranks);
    CommPtr comm = makeComm(ranks, 0);
    const bool clone = fillMode() == Fill::kClone || ranks == 1;
    const uint32_t expectHalf = ranks == 1 ? 0x3FC00000u : 0x40900000u;  // 3 x 0.5 = 1.5, or 3 x 1.5 = 4.5
    float scalar = 0.5f;
    ncclRedOp_t immediate, onDevice;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&immediate, &scalar, ncclFloat32, ncclScalarHostImmediate, comm.get()),
              ncclSuccess);
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&onDevice, &scalar, ncclFloat32, ncclScalarDevice, comm.get()), ncclSuccess);
    scalar = 2.0f;                       // read by the device operator's next reduction, not by the immediate one
    const uint32_t three = 0x40400000u;  // 3.0f
    const uint32_t viaImmediate = reduceOne<uint32_t>(three, ncclFloat32, immediate, ranks, comm.get());
    const uint32_t viaDevice = reduceOne<uint32_t>(three, ncclFloat32, onDevice, ranks, comm.get());
    if (clone) {
      EXPECT_EQ(viaImmediate, expectHalf);
      EXPECT_EQ(viaDevice, ranks == 1 ? 0x40C00000u : 0x41900000u);  // 3 x 2 = 6, or 3 x 6 = 18
    } else {
      EXPECT_NE(viaImmediate, 0x40400000u);  // zero or poison, never the input
    }
    // Destroyed between the call and the group's end: the call keeps the scalar it was given.
    uint32_t in = three, out = sentinel<uint32_t>();
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(&in, &out, 1, ncclFloat32, immediate, comm.get(), nullptr), ncclSuccess);
    ASSERT_EQ(ncclRedOpDestroy(immediate, comm.get()), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    if (clone) EXPECT_EQ(out, expectHalf);
    EXPECT_EQ(ncclRedOpDestroy(onDevice, comm.get()), ncclSuccess);
  }
}

// On one rank PreMulSum is NCCL's exact result in every mode but keep: s x data rounded to the type. On fp8 NCCL
// 2.28.9 refuses it (and ncclAvg) with ncclInvalidArgument: so does RankLens, with a reason.
TEST(CloneReduction, OneRankPreMulSumOfEveryType) {
  if (fillMode() == Fill::kKeep) GTEST_SKIP() << "keep never writes a receive buffer";
  CommPtr comm = makeComm(1, 0);
  struct Case {
    ncclDataType_t type;
    uint64_t x, scalar, expected;
  } cases[] = {
      {ncclFloat16, 0x4200, 0x3800, 0x3E00},   // 3 x 0.5 = 1.5
      {ncclBfloat16, 0x4040, 0x3F00, 0x3FC0},  // 3 x 0.5 = 1.5
      {ncclFloat64, 0x4008000000000000ull, 0x3FE0000000000000ull, 0x3FF8000000000000ull},
      {ncclInt8, 0xFD, 0x03, 0xF7},           // -3 x 3 = -9
      {ncclUint32, 0x80000001u, 0x02, 0x02},  // wraps
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(static_cast<int>(c.type));
    ncclRedOp_t op;
    uint64_t scalar = c.scalar, in = c.x, out = 0;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, c.type, ncclScalarHostImmediate, comm.get()), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(&in, &out, 1, c.type, op, comm.get(), nullptr), ncclSuccess);
    const size_t width = c.type == ncclFloat64                                                        ? 8
                         : c.type == ncclUint32                                                       ? 4
                         : c.type == ncclInt8 || c.type == ncclFloat8e4m3 || c.type == ncclFloat8e5m2 ? 1
                                                                                                      : 2;
    EXPECT_EQ(out, c.expected) << "width " << width;  // little-endian: the element's bits, zero above
    EXPECT_EQ(ncclRedOpDestroy(op, comm.get()), ncclSuccess);
  }
  for (ncclDataType_t fp8 : {ncclFloat8e4m3, ncclFloat8e5m2}) {
    ncclRedOp_t op;
    uint8_t scalar = 0x40, in = 0x38, out = 0xA5;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, fp8, ncclScalarHostImmediate, comm.get()), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(&in, &out, 1, fp8, op, comm.get(), nullptr), ncclInvalidArgument);
    EXPECT_NE(std::string(ncclGetLastError(comm.get())).find("one-rank"), std::string::npos)
        << ncclGetLastError(comm.get());
    EXPECT_EQ(ncclReduce(&in, &out, 1, fp8, ncclAvg, 0, comm.get(), nullptr), ncclInvalidArgument);
    EXPECT_EQ(out, 0xA5) << "a refused call writes nothing";
    EXPECT_EQ(ncclAllReduce(&in, &out, 1, fp8, ncclSum, comm.get(), nullptr), ncclSuccess);  // sum is a copy
    EXPECT_EQ(out, 0x38);
    EXPECT_EQ(ncclRedOpDestroy(op, comm.get()), ncclSuccess);
  }
}

}  // namespace

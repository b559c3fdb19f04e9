// SPDX-License-Identifier: Apache-2.0
// StreamDevice::reduceCopies element by element, shared by the host device and the CUDA device's kernel so that
// both give the same bits. Conversions are CUDA's own (cuda_fp16/bf16/fp8), which compile for the host too.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <cstring>

#include "ranklens/device.h"

namespace ranklens {
namespace device {
namespace reduce_copies {

// ncclDataType_t's values.
enum : int {
  kInt8,
  kUint8,
  kInt32,
  kUint32,
  kInt64,
  kUint64,
  kFloat16,
  kFloat32,
  kFloat64,
  kBfloat16,
  kFloat8e4m3,
  kFloat8e5m2
};

// Elements are handled as unsigned integers of their width; integers in two's complement arithmetic modulo 2^bits,
// which is the same for signed and unsigned types.
template <int kType>
struct Bits;
template <>
struct Bits<kInt8> {
  using type = uint8_t;
};
template <>
struct Bits<kUint8> {
  using type = uint8_t;
};
template <>
struct Bits<kInt32> {
  using type = uint32_t;
};
template <>
struct Bits<kUint32> {
  using type = uint32_t;
};
template <>
struct Bits<kInt64> {
  using type = uint64_t;
};
template <>
struct Bits<kUint64> {
  using type = uint64_t;
};
template <>
struct Bits<kFloat16> {
  using type = uint16_t;
};
template <>
struct Bits<kFloat32> {
  using type = uint32_t;
};
template <>
struct Bits<kFloat64> {
  using type = uint64_t;
};
template <>
struct Bits<kBfloat16> {
  using type = uint16_t;
};
template <>
struct Bits<kFloat8e4m3> {
  using type = uint8_t;
};
template <>
struct Bits<kFloat8e5m2> {
  using type = uint8_t;
};

__host__ __device__ constexpr bool isFloat(int type) { return type >= kFloat16; }

template <int kType>
__host__ __device__ inline double decode(typename Bits<kType>::type bits) {
  if constexpr (kType == kFloat16) {
    __half_raw raw;
    raw.x = bits;
    return __half2float(__half(raw));
  } else if constexpr (kType == kBfloat16) {
    __nv_bfloat16_raw raw;
    raw.x = bits;
    return __bfloat162float(__nv_bfloat16(raw));
  } else if constexpr (kType == kFloat32) {
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
  } else if constexpr (kType == kFloat64) {
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
  } else {
    const __half_raw half = __nv_cvt_fp8_to_halfraw(bits, kType == kFloat8e4m3 ? __NV_E4M3 : __NV_E5M2);
    return __half2float(__half(half));
  }
}

// Rounds to nearest even; fp8 saturates to its largest finite value (NCCL's fp8 types convert with __NV_SATFINITE).
template <int kType>
__host__ __device__ inline typename Bits<kType>::type encode(double v) {
  if constexpr (kType == kFloat16) {
    return __half_raw(__double2half(v)).x;
  } else if constexpr (kType == kBfloat16) {
    return __nv_bfloat16_raw(__double2bfloat16(v)).x;
  } else if constexpr (kType == kFloat32) {
    const float f = static_cast<float>(v);
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
  } else if constexpr (kType == kFloat64) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
  } else {
    return __nv_cvt_double_to_fp8(v, __NV_SATFINITE, kType == kFloat8e4m3 ? __NV_E4M3 : __NV_E5M2);
  }
}

// The scalar a PreMulSum multiplies by, read where the Reduction says.
template <int kType>
__host__ __device__ inline typename Bits<kType>::type scalarOf(const Reduction& r) {
  using T = typename Bits<kType>::type;
  if (r.scalar.at != nullptr) return *static_cast<const T*>(r.scalar.at);
  return static_cast<T>(r.scalar.bits);
}

// One element x reduced over r.copies equal contributions (StreamDevice::reduceCopies).
template <int kType>
__host__ __device__ inline typename Bits<kType>::type reduceElement(typename Bits<kType>::type x,
                                                                    typename Bits<kType>::type scalar,
                                                                    const Reduction& r) {
  using T = typename Bits<kType>::type;
  if constexpr (!isFloat(kType)) {
    uint64_t y = x;  // the low bits are exact modulo 2^64, hence modulo 2^bits
    if (r.premul) y *= scalar;
    if (!r.product) return static_cast<T>(y * r.copies);
    uint64_t power = 1;
    for (uint64_t e = r.copies; e != 0; e >>= 1, y *= y)
      if (e & 1) power *= y;
    return static_cast<T>(power);
  } else {
    double y = decode<kType>(x);
    if (r.premul) y = decode<kType>(encode<kType>(decode<kType>(scalar) * y));
    if (!r.product) return encode<kType>(y * static_cast<double>(r.copies));  // exact below 2^29 copies
    // By squaring: IEEE products only, so the host and the GPU give the same bits (pow() may differ by an ulp).
    double power = 1;
    for (uint64_t e = r.copies; e != 0; e >>= 1, y *= y)
      if (e & 1) power *= y;
    return encode<kType>(power);
  }
}

// Elements begin, begin + step, ... below count (a grid-stride loop on the GPU, every element on the host).
template <int kType>
__host__ __device__ inline void reduceRange(void* dst, const void* src, size_t count, const Reduction& r, size_t begin,
                                            size_t step) {
  using T = typename Bits<kType>::type;
  const T scalar = r.premul ? scalarOf<kType>(r) : T(0);
  const T* in = static_cast<const T*>(src);
  T* out = static_cast<T*>(dst);
  for (size_t i = begin; i < count; i += step) out[i] = reduceElement<kType>(in[i], scalar, r);
}

// Every datatype, for tables of reduceRange<kType> instances (the host device's functions, the CUDA kernels).
#define RANKLENS_REDUCE_TYPES(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

}  // namespace reduce_copies
}  // namespace device
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
#include "dtype.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace rlpayload {
namespace {

const DtypeInfo kTypes[] = {
    {kInt8, "int8", 1, false, true, "|i1", "|u1"},
    {kUint8, "uint8", 1, false, false, "|u1", "|u1"},
    {kInt32, "int32", 4, false, true, "<i4", "<u4"},
    {kUint32, "uint32", 4, false, false, "<u4", "<u4"},
    {kInt64, "int64", 8, false, true, "<i8", "<u8"},
    {kUint64, "uint64", 8, false, false, "<u8", "<u8"},
    {kFloat16, "float16", 2, true, true, "<f2", "<u2"},
    {kFloat32, "float32", 4, true, true, "<f4", "<u4"},
    {kFloat64, "float64", 8, true, true, "<f8", "<u8"},
    {kBfloat16, "bfloat16", 2, true, true, nullptr, "<u2"},
    {kFloat8e4m3, "float8e4m3", 1, true, true, nullptr, "|u1"},
    {kFloat8e5m2, "float8e5m2", 1, true, true, nullptr, "|u1"},
};

template <typename T>
T loadRaw(const uint8_t* p) {
  T v;
  memcpy(&v, p, sizeof(T));  // payloads are little-endian, as are the hosts RankLens runs on
  return v;
}
template <typename T>
void storeRaw(uint8_t* p, T v) {
  memcpy(p, &v, sizeof(T));
}

// A binary float format with `expBits` exponent bits and `manBits` stored mantissa bits (bias 2^(expBits-1)-1).
// Decoding is exact: every such value with expBits <= 8 and manBits <= 23 is a float.
float decodeMinifloat(uint32_t bits, int expBits, int manBits, bool hasInf) {
  const uint32_t sign = (bits >> (expBits + manBits)) & 1u;
  const uint32_t expField = (bits >> manBits) & ((1u << expBits) - 1);
  const uint32_t man = bits & ((1u << manBits) - 1);
  const int bias = (1 << (expBits - 1)) - 1;
  const uint32_t expMax = (1u << expBits) - 1;
  float magnitude;
  if (hasInf && expField == expMax) {
    magnitude = man == 0 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
  } else if (!hasInf && expField == expMax && man == (1u << manBits) - 1) {
    magnitude = std::numeric_limits<float>::quiet_NaN();  // E4M3: S.1111.111 is the only NaN
  } else if (expField == 0) {
    magnitude = std::ldexp(static_cast<float>(man), 1 - bias - manBits);  // subnormal: 0.man x 2^(1-bias)
  } else {
    magnitude = std::ldexp(static_cast<float>(man | (1u << manBits)), static_cast<int>(expField) - bias - manBits);
  }
  return sign ? -magnitude : magnitude;
}

// Round-to-nearest-even encoder for the same family; overflow gives infinity, or NaN where there is none.
uint32_t encodeMinifloat(double value, int expBits, int manBits, bool hasInf) {
  const uint32_t signBit = 1u << (expBits + manBits);
  const uint32_t expMax = (1u << expBits) - 1;
  const uint32_t nan =
      hasInf ? (expMax << manBits) | (1u << (manBits - 1)) : (expMax << manBits) | ((1u << manBits) - 1);
  const uint32_t inf = expMax << manBits;
  if (std::isnan(value)) return nan;
  const uint32_t sign = std::signbit(value) ? signBit : 0;
  const double a = std::fabs(value);
  const int bias = (1 << (expBits - 1)) - 1;
  const int emin = 1 - bias;  // exponent of the smallest normal
  // Largest finite: IEEE-like formats stop one exponent below the all-ones field; E4M3 uses it except for the NaN.
  const int emax = hasInf ? static_cast<int>(expMax) - 1 - bias : static_cast<int>(expMax) - bias;
  const double maxMantissa = hasInf ? 2.0 - std::ldexp(1.0, -manBits) : 2.0 - std::ldexp(2.0, -manBits);
  const double maxFinite = std::ldexp(maxMantissa, emax);
  if (std::isinf(a)) return hasInf ? (sign | inf) : (sign | nan);
  if (a == 0) return sign;
  int e = std::ilogb(a);  // a = m x 2^e, 1 <= m < 2
  if (e < emin) e = emin;
  const double quantum = std::ldexp(1.0, e - manBits);
  const double steps = std::nearbyint(a / quantum);  // exact division by a power of two; default mode: ties to even
  const double rounded = steps * quantum;
  if (rounded > maxFinite) return hasInf ? (sign | inf) : (sign | nan);
  if (rounded == 0) return sign;
  if (rounded < std::ldexp(1.0, emin))  // subnormal
    return sign | static_cast<uint32_t>(rounded / std::ldexp(1.0, emin - manBits));
  const int re = std::ilogb(rounded);
  const uint32_t man = static_cast<uint32_t>(std::ldexp(rounded, manBits - re)) & ((1u << manBits) - 1);
  return sign | (static_cast<uint32_t>(re + bias) << manBits) | man;
}

bool parseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  std::string t;
  for (char c : text) t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const bool neg = !t.empty() && t[0] == '-';
  const std::string body = (t[0] == '-' || t[0] == '+') ? t.substr(1) : t;
  if (body == "nan") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (body == "inf" || body == "infinity") {
    *out = neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
    return true;
  }
  char* end = nullptr;
  errno = 0;
  *out = std::strtod(text.c_str(), &end);
  return end != nullptr && *end == '\0' && end != text.c_str();
}

std::string shortest(double v, bool asFloat) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  auto res =
      asFloat ? std::to_chars(buf, buf + sizeof(buf), static_cast<float>(v)) : std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

}  // namespace

const DtypeInfo* dtypeInfo(int code) {
  return code >= 0 && code < static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0])) ? &kTypes[code] : nullptr;
}

std::string dtypeName(int code) {
  const DtypeInfo* info = dtypeInfo(code);
  return info ? info->name : "invalid(" + std::to_string(code) + ")";
}

float halfToFloat(uint16_t bits) { return decodeMinifloat(bits, 5, 10, true); }
float bfloat16ToFloat(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  memcpy(&f, &wide, 4);
  return f;
}
float e4m3ToFloat(uint8_t bits) { return decodeMinifloat(bits, 4, 3, false); }
float e5m2ToFloat(uint8_t bits) { return decodeMinifloat(bits, 5, 2, true); }

uint16_t floatToHalf(double value) { return static_cast<uint16_t>(encodeMinifloat(value, 5, 10, true)); }
uint16_t floatToBfloat16(double value) { return static_cast<uint16_t>(encodeMinifloat(value, 8, 7, true)); }
uint8_t floatToE4m3(double value) { return static_cast<uint8_t>(encodeMinifloat(value, 4, 3, false)); }
uint8_t floatToE5m2(double value) { return static_cast<uint8_t>(encodeMinifloat(value, 5, 2, true)); }

double loadDouble(int dtype, const uint8_t* p) {
  switch (dtype) {
    case kInt8:
      return loadRaw<int8_t>(p);
    case kUint8:
      return loadRaw<uint8_t>(p);
    case kInt32:
      return loadRaw<int32_t>(p);
    case kUint32:
      return loadRaw<uint32_t>(p);
    case kInt64:
      return static_cast<double>(loadRaw<int64_t>(p));
    case kUint64:
      return static_cast<double>(loadRaw<uint64_t>(p));
    case kFloat16:
      return halfToFloat(loadRaw<uint16_t>(p));
    case kFloat32:
      return loadRaw<float>(p);
    case kFloat64:
      return loadRaw<double>(p);
    case kBfloat16:
      return bfloat16ToFloat(loadRaw<uint16_t>(p));
    case kFloat8e4m3:
      return e4m3ToFloat(p[0]);
    case kFloat8e5m2:
      return e5m2ToFloat(p[0]);
  }
  return std::numeric_limits<double>::quiet_NaN();
}

int64_t loadSigned(int dtype, const uint8_t* p) {
  switch (dtype) {
    case kInt8:
      return loadRaw<int8_t>(p);
    case kInt32:
      return loadRaw<int32_t>(p);
    case kInt64:
      return loadRaw<int64_t>(p);
    case kUint8:
      return loadRaw<uint8_t>(p);
    case kUint32:
      return loadRaw<uint32_t>(p);
    case kUint64:
      return static_cast<int64_t>(loadRaw<uint64_t>(p));
    default:
      return 0;
  }
}

uint64_t loadUnsigned(int dtype, const uint8_t* p) {
  switch (dtype) {
    case kUint8:
      return loadRaw<uint8_t>(p);
    case kUint32:
      return loadRaw<uint32_t>(p);
    case kUint64:
      return loadRaw<uint64_t>(p);
    case kInt8:
    case kInt32:
    case kInt64:
      return static_cast<uint64_t>(loadSigned(dtype, p));
    default:
      return 0;
  }
}

namespace {
template <typename T>
bool storeInteger(double value, uint8_t* p, bool* saturated) {
  if (std::isnan(value)) return false;
  const double r = std::nearbyint(value);
  T out;
  // Compare against the limits as doubles: 2^63 and 2^64 are exact, so `r >= max+1` is decided without overflow.
  const double lo = static_cast<double>(std::numeric_limits<T>::min());
  const double hiPlusOne = std::ldexp(1.0, std::numeric_limits<T>::digits);
  if (r < lo) {
    out = std::numeric_limits<T>::min();
    if (saturated) *saturated = true;
  } else if (r >= hiPlusOne) {
    out = std::numeric_limits<T>::max();
    if (saturated) *saturated = true;
  } else {
    out = static_cast<T>(r);
  }
  storeRaw(p, out);
  return true;
}
}  // namespace

bool storeDouble(int dtype, double value, uint8_t* p, bool* saturated) {
  switch (dtype) {
    case kInt8:
      return storeInteger<int8_t>(value, p, saturated);
    case kUint8:
      return storeInteger<uint8_t>(value, p, saturated);
    case kInt32:
      return storeInteger<int32_t>(value, p, saturated);
    case kUint32:
      return storeInteger<uint32_t>(value, p, saturated);
    case kInt64:
      return storeInteger<int64_t>(value, p, saturated);
    case kUint64:
      return storeInteger<uint64_t>(value, p, saturated);
    case kFloat16:
      storeRaw(p, floatToHalf(value));
      return true;
    case kFloat32:
      storeRaw(p, static_cast<float>(value));
      return true;
    case kFloat64:
      storeRaw(p, value);
      return true;
    case kBfloat16:
      storeRaw(p, floatToBfloat16(value));
      return true;
    case kFloat8e4m3:
      p[0] = floatToE4m3(value);
      return true;
    case kFloat8e5m2:
      p[0] = floatToE5m2(value);
      return true;
  }
  return false;
}

bool parseElement(int dtype, const std::string& text, uint8_t* p, std::string* reason) {
  const DtypeInfo* info = dtypeInfo(dtype);
  if (info == nullptr) {
    *reason = "unknown datatype";
    return false;
  }
  if (!info->isFloat) {
    // Integers exactly, without going through a double.
    errno = 0;
    char* end = nullptr;
    bool ok;
    if (info->isSigned) {
      const long long v = std::strtoll(text.c_str(), &end, 0);
      ok = errno == 0 && end && *end == '\0' && !text.empty();
      const int64_t lo = info->size == 1 ? INT8_MIN : info->size == 4 ? INT32_MIN : INT64_MIN;
      const int64_t hi = info->size == 1 ? INT8_MAX : info->size == 4 ? INT32_MAX : INT64_MAX;
      if (ok && (v < lo || v > hi)) {
        *reason = "'" + text + "' is outside the range of " + info->name;
        return false;
      }
      if (ok) {
        if (info->size == 1)
          storeRaw(p, static_cast<int8_t>(v));
        else if (info->size == 4)
          storeRaw(p, static_cast<int32_t>(v));
        else
          storeRaw(p, static_cast<int64_t>(v));
      }
    } else {
      ok = !text.empty() && text[0] != '-';
      const unsigned long long v = ok ? std::strtoull(text.c_str(), &end, 0) : 0;
      ok = ok && errno == 0 && end && *end == '\0';
      const uint64_t hi = info->size == 1 ? UINT8_MAX : info->size == 4 ? UINT32_MAX : UINT64_MAX;
      if (ok && v > hi) {
        *reason = "'" + text + "' is outside the range of " + info->name;
        return false;
      }
      if (ok) {
        if (info->size == 1)
          storeRaw(p, static_cast<uint8_t>(v));
        else if (info->size == 4)
          storeRaw(p, static_cast<uint32_t>(v));
        else
          storeRaw(p, static_cast<uint64_t>(v));
      }
    }
    if (!ok) *reason = "'" + text + "' is not a " + info->name + " value (an integer)";
    return ok;
  }
  double v;
  if (!parseDouble(text, &v)) {
    *reason = "'" + text + "' is not a number (use e.g. 1.5, -2e-3, nan, inf, -inf)";
    return false;
  }
  if (dtype == kFloat8e4m3 && std::isinf(v)) {
    *reason = "float8e4m3 has no infinity (its largest value is 448)";
    return false;
  }
  storeDouble(dtype, v, p, nullptr);
  return true;
}

std::string formatElement(int dtype, const uint8_t* p) {
  const DtypeInfo* info = dtypeInfo(dtype);
  if (info == nullptr) return "?";
  if (!info->isFloat)
    return info->isSigned ? std::to_string(loadSigned(dtype, p)) : std::to_string(loadUnsigned(dtype, p));
  return shortest(loadDouble(dtype, p), dtype != kFloat64);
}

bool isNan(int dtype, const uint8_t* p) {
  const DtypeInfo* info = dtypeInfo(dtype);
  return info && info->isFloat && std::isnan(loadDouble(dtype, p));
}

uint64_t ulpDistance(int dtype, const uint8_t* a, const uint8_t* b) {
  const DtypeInfo* info = dtypeInfo(dtype);
  if (info == nullptr || !info->isFloat) return 0;
  uint64_t ua = 0, ub = 0;
  memcpy(&ua, a, info->size);
  memcpy(&ub, b, info->size);
  const uint64_t signBit = 1ull << (info->size * 8 - 1);
  const uint64_t ma = ua & (signBit - 1), mb = ub & (signBit - 1);  // magnitudes: monotonic in the value
  const bool sa = (ua & signBit) != 0, sb = (ub & signBit) != 0;
  if (sa == sb) return ma > mb ? ma - mb : mb - ma;
  return ma + mb;  // opposite signs: distance through zero (each magnitude < 2^63, no overflow)
}

}  // namespace rlpayload

// SPDX-License-Identifier: Apache-2.0
// NCCL datatypes as stored in payloads: sizes, names, numpy dtype strings, exact decoding of every type (the 16- and
// 8-bit floats are converted here, bit by bit), rounding encoders for edits, and ULP distances for diffs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace rlpayload {

// ncclDataType_t values (docs/trace-format.md).
enum Dtype : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
  kFloat8e4m3 = 10,
  kFloat8e5m2 = 11,
};

struct DtypeInfo {
  int code;
  const char* name;  // NCCL-style name: float32, bfloat16, float8e4m3, ...
  size_t size;       // bytes per element
  bool isFloat;
  bool isSigned;          // integers: signed
  const char* npyDescr;   // numpy dtype string, or nullptr when numpy has none (bfloat16, fp8)
  const char* bitsDescr;  // the unsigned integer of the same width (raw bits)
};

// nullptr for values that are not NCCL datatypes.
const DtypeInfo* dtypeInfo(int code);
std::string dtypeName(int code);  // "invalid(<n>)" for unknown values

// Exact conversions of the narrow float formats (every value they hold is a float).
float halfToFloat(uint16_t bits);      // IEEE binary16
float bfloat16ToFloat(uint16_t bits);  // upper half of a binary32
float e4m3ToFloat(uint8_t bits);       // OCP FP8 E4M3 (FN): no infinity, NaN is S.1111.111, max 448
float e5m2ToFloat(uint8_t bits);       // OCP FP8 E5M2: IEEE-like, with infinities
// Round-to-nearest-even encoders. Overflow gives infinity where the format has one, NaN for E4M3 (no saturation).
uint16_t floatToHalf(double value);
uint16_t floatToBfloat16(double value);
uint8_t floatToE4m3(double value);
uint8_t floatToE5m2(double value);

// One element of `dtype` as a double (exact for every float type, and for integers up to 2^53 in magnitude).
double loadDouble(int dtype, const uint8_t* element);
// Integer elements exactly.
int64_t loadSigned(int dtype, const uint8_t* element);
uint64_t loadUnsigned(int dtype, const uint8_t* element);
// Stores `value` into one element: floats round to nearest even; integers round to nearest and saturate at the
// type's limits (`saturated` set). Returns false for a value the type cannot hold at all (NaN into an integer).
bool storeDouble(int dtype, double value, uint8_t* element, bool* saturated);
// Parses `text` as a value of `dtype` ("nan", "inf", "-inf", decimal or hex integers, any float) into one element.
bool parseElement(int dtype, const std::string& text, uint8_t* element, std::string* reason);
// Exact text of one element: integers in full, floats shortest round-trip of their value, "nan", "inf", "-inf".
std::string formatElement(int dtype, const uint8_t* element);

bool isNan(int dtype, const uint8_t* element);
// For float types: distance in units in the last place between two non-NaN elements, through the ordered integer
// representation of their bits (+0 and -0 are 0 apart; the largest finite value and infinity are 1 apart).
uint64_t ulpDistance(int dtype, const uint8_t* a, const uint8_t* b);

}  // namespace rlpayload

// SPDX-License-Identifier: Apache-2.0
#include "stats.h"

#include <cmath>

#include "dtype.h"

namespace rlpayload {

TensorStats computeStats(int dtype, const uint8_t* data, uint64_t count) {
  TensorStats s;
  s.count = count;
  const DtypeInfo* info = dtypeInfo(dtype);
  if (info == nullptr) return s;
  // Welford's running mean and sum of squared deviations: stable for long tensors.
  double mean = 0, m2 = 0;
  uint64_t minAt = 0, maxAt = 0;
  for (uint64_t i = 0; i < count; ++i) {
    const uint8_t* p = data + i * info->size;
    const double v = loadDouble(dtype, p);
    if (std::isnan(v)) {
      if (s.nan++ == 0) s.firstNan = static_cast<int64_t>(i);
      continue;
    }
    if (std::isinf(v)) {
      (v > 0 ? s.posInf : s.negInf)++;
      if (s.firstInf < 0) s.firstInf = static_cast<int64_t>(i);
      continue;
    }
    if (s.finite == 0) {
      s.min = s.max = v;
      minAt = maxAt = i;
    } else if (info->isFloat) {
      if (v < s.min) s.min = v, minAt = i;
      if (v > s.max) s.max = v, maxAt = i;
    } else if (info->isSigned) {  // exact comparisons: int64 values above 2^53 are not exact as doubles
      if (loadSigned(dtype, p) < loadSigned(dtype, data + minAt * info->size)) s.min = v, minAt = i;
      if (loadSigned(dtype, p) > loadSigned(dtype, data + maxAt * info->size)) s.max = v, maxAt = i;
    } else {
      if (loadUnsigned(dtype, p) < loadUnsigned(dtype, data + minAt * info->size)) s.min = v, minAt = i;
      if (loadUnsigned(dtype, p) > loadUnsigned(dtype, data + maxAt * info->size)) s.max = v, maxAt = i;
    }
    ++s.finite;
    const double delta = v - mean;
    mean += delta / static_cast<double>(s.finite);
    m2 += delta * (v - mean);
  }
  if (s.finite > 0) {
    s.mean = mean;
    s.stddev = std::sqrt(m2 / static_cast<double>(s.finite));
    s.minText = formatElement(dtype, data + minAt * info->size);
    s.maxText = formatElement(dtype, data + maxAt * info->size);
  }
  return s;
}

}  // namespace rlpayload

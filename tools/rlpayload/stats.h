// SPDX-License-Identifier: Apache-2.0
// Statistics of a decoded tensor: min/max/mean/std over finite values, NaN and infinity counts and first positions.
#pragma once

#include <cstdint>
#include <string>

namespace rlpayload {

struct TensorStats {
  uint64_t count = 0;                             // elements
  uint64_t finite = 0;                            // elements counted in min/max/mean/std
  double min = 0, max = 0, mean = 0, stddev = 0;  // population standard deviation; 0 when finite == 0
  std::string minText, maxText;                   // exact (integers beyond 2^53 included)
  uint64_t nan = 0, posInf = 0, negInf = 0;
  int64_t firstNan = -1, firstInf = -1;  // element index, -1 if none
};

TensorStats computeStats(int dtype, const uint8_t* data, uint64_t count);

}  // namespace rlpayload

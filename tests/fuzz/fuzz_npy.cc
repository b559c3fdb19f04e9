// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parseNpy (rlpayload inject reads user-given .npy files) on arbitrary bytes. An array that parses
// has a supported dtype and exactly count x item size data bytes; written back as a 1-D version 1.0 file, it parses
// to the same dtype, count and bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlpayload;
  const std::vector<uint8_t> image(data, data + size);
  NpyArray array;
  std::string reason;
  if (!parseNpy(image, &array, &reason)) {
    check(!reason.empty());
    return 0;
  }
  const size_t item = npyItemSize(array.descr);
  check(item > 0);
  check(array.data.size() == array.count * item);
  uint64_t product = 1;
  for (uint64_t dim : array.shape) product *= dim;
  check(product == array.count);
  const std::string header = npyHeader(array.descr, array.count);
  std::vector<uint8_t> again(header.begin(), header.end());
  again.insert(again.end(), array.data.begin(), array.data.end());
  NpyArray back;
  check(parseNpy(again, &back, &reason));
  check(back.descr == array.descr && back.count == array.count && back.data == array.data);
  return 0;
}

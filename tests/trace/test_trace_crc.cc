// SPDX-License-Identifier: Apache-2.0
// The trace format's CRC-32 (computed with ISA-L) must give exactly zlib's crc32(), which wrote every earlier
// trace and which the Python reader (tools/python) uses: compared here byte for byte, at every length up to 4 KiB
// and some large ones, from aligned and unaligned starts.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <random>
#include <vector>

#include "ranklens/trace.h"

namespace ranklens {
namespace trace {
namespace {

uint32_t zlibCrc(const uint8_t* data, size_t size) {
  return static_cast<uint32_t>(crc32(0L, data, static_cast<uInt>(size)));
}

TEST(TraceCrc32, CheckValueAndEmpty) {
  const char check[] = "123456789";
  EXPECT_EQ(crc32Bytes(check, 9), 0xCBF43926u);  // the CRC-32/ISO-HDLC check value
  EXPECT_EQ(crc32Bytes(check, 0), 0u);
  EXPECT_EQ(crc32Bytes(nullptr, 0), 0u);
}

TEST(TraceCrc32, EqualsZlibAtEveryLengthAndAlignment) {
  std::mt19937_64 random(20261201);
  std::vector<uint8_t> data((4u << 20) + 64);
  for (auto& b : data) b = static_cast<uint8_t>(random());
  for (size_t size = 0; size <= 4096; ++size) {
    const size_t start = size % 61;  // unaligned starts too
    ASSERT_EQ(crc32Bytes(data.data() + start, size), zlibCrc(data.data() + start, size)) << size << " at " << start;
  }
  for (size_t size : {size_t(65535), size_t(65536), size_t(1u << 20) + 7, size_t(4u << 20)})
    for (size_t start : {size_t(0), size_t(3), size_t(64)}) {
      if (start + size > data.size()) continue;
      ASSERT_EQ(crc32Bytes(data.data() + start, size), zlibCrc(data.data() + start, size)) << size << " at " << start;
    }
}

}  // namespace
}  // namespace trace
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// fuzz_payload's input layout, shared with the seed generator and the test that checks the committed seeds:
// rawBytes u32 LE (its top 4 bits pick PayloadRef.shuffle: 0 none, 1/2/3 widths 2/4/8, 4-15 the value itself,
// mostly invalid), rawCrc32 u32 LE, then the blob (compressedBytes = the rest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "ranklens/trace.h"

namespace fuzz_layout {

constexpr size_t kPayloadSeedHeader = 8;

// The reference the input describes (size >= kPayloadSeedHeader).
inline ranklens::trace::PayloadRef payloadSeedRef(const uint8_t* data, size_t size) {
  uint32_t rawBytes, rawCrc32;
  memcpy(&rawBytes, data, 4);
  memcpy(&rawCrc32, data + 4, 4);
  const uint32_t mode = rawBytes >> 28;
  ranklens::trace::PayloadRef ref;
  ref.shuffle = mode == 1 ? 2 : mode == 2 ? 4 : mode == 3 ? 8 : static_cast<int>(mode);
  ref.rawBytes = rawBytes & 0x0fffffffu;
  ref.rawCrc32 = rawCrc32;
  ref.count = ref.rawBytes;
  ref.datatype = 1;
  ref.compressedBytes = size - kPayloadSeedHeader;
  return ref;
}

// The first word of a seed for `ref` (its rawBytes and shuffle).
inline uint32_t payloadSeedWord(const ranklens::trace::PayloadRef& ref) {
  const uint32_t mode = ref.shuffle == 2   ? 1
                        : ref.shuffle == 4 ? 2
                        : ref.shuffle == 8 ? 3
                                           : static_cast<uint32_t>(ref.shuffle);
  return static_cast<uint32_t>(ref.rawBytes) | (mode << 28);
}

}  // namespace fuzz_layout

// SPDX-License-Identifier: Apache-2.0
// First-fit allocation of byte ranges inside one fixed region (pinned staging memory), free ranges coalesced on
// release. Sizes are rounded up to 256 bytes. Not thread-safe: the owner holds its own lock.
#pragma once

#include <cstddef>
#include <iterator>
#include <map>

namespace ranklens {

class FreeList {
 public:
  static constexpr size_t kAlign = 256;
  static size_t rounded(size_t bytes) { return ((bytes ? bytes : 1) + kAlign - 1) / kAlign * kAlign; }

  // The whole region [0, size) free, rounded down to the alignment.
  void reset(size_t size) {
    free_.clear();
    if (size >= kAlign) free_[0] = size / kAlign * kAlign;
  }

  // The offset of a free range of `bytes` (rounded), or false when no range is large enough.
  bool take(size_t bytes, size_t* offset) {
    const size_t need = rounded(bytes);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < need) continue;
      *offset = it->first;
      const size_t rest = it->second - need;
      free_.erase(it);
      if (rest > 0) free_[*offset + need] = rest;
      return true;
    }
    return false;
  }

  // Returns a range taken with the same `bytes`.
  void give(size_t offset, size_t bytes) {
    size_t size = rounded(bytes);
    auto next = free_.lower_bound(offset);
    if (next != free_.end() && offset + size == next->first) {
      size += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        prev->second += size;
        return;
      }
    }
    free_[offset] = size;
  }

 private:
  std::map<size_t, size_t> free_;  // offset -> length
};

}  // namespace ranklens

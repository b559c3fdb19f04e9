// SPDX-License-Identifier: Apache-2.0
// Value replay's payload pipeline: worker threads decode the recorded payloads in the order the recording made the
// calls, into one bounded arena of (pinned) memory, ahead of the replayed calls that need them. The replaying thread
// takes a decoded payload (waiting only if the workers have not got there yet), enqueues its copy, and hands the
// memory back with a test that says when the copy has left it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "ranklens/recording.h"

namespace ranklens {
namespace trace {

struct PrefetchStats {
  uint64_t decoded = 0, bytesDecoded = 0;
  uint64_t waits = 0;           // acquire() had to wait for a worker or decode itself
  uint64_t evicted = 0;         // decoded ahead but dropped for room (decoded again if asked for)
  uint64_t skipped = 0;         // decoded ahead and never asked for (the program skipped the call)
  uint64_t oversized = 0;       // larger than the arena: decoded into their own allocation
  uint64_t failures = 0;        // unreadable payloads (the caller falls back to fill semantics)
};

class PayloadPrefetcher {
 public:
  using Alloc = std::function<void*(size_t bytes)>;  // nullptr on failure
  using Free = std::function<void(void*)>;
  struct Options {
    size_t arenaBytes = 512u << 20;
    int threads = 2;
    uint64_t maxPayloadBytes = 0;  // only payloads of at most this many bytes (timing replay's control values); 0: all
  };
  PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free);
  ~PayloadPrefetcher();
  PayloadPrefetcher(const PayloadPrefetcher&) = delete;
  PayloadPrefetcher& operator=(const PayloadPrefetcher&) = delete;

  struct Staged {
    const uint8_t* data = nullptr;
    size_t bytes = 0;
  };
  // The decoded payload of `call` (which must carry one within maxPayloadBytes). False with `error` (file, offset, reason) when it cannot
  // be read. Every successful acquire must be followed by release().
  bool acquire(const RecordedCall* call, Staged* out, std::string* error);
  // The copy out of the staged bytes is enqueued; `copied()` turns true once the memory may be reused (polled by
  // the workers).
  void release(const RecordedCall* call, std::function<bool()> copied);
  PrefetchStats stats() const;
  bool arenaReady() const;  // false when the arena could not be allocated (payloads then use their own memory)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trace
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// Value replay's payload pipeline: worker threads decode the recorded payloads in the order the recording made the
// calls, into one bounded arena of (pinned) memory, ahead of the replayed calls that need them. The replaying thread
// takes a decoded payload (waiting only if the workers have not got there yet), enqueues its copy, and hands the
// memory back with a test that says when the copy has left it. With a device stage, the workers also move decoded
// payloads on into a bounded arena of device memory, off the replayed streams, so that a restore is a copy within
// the GPU (an H200 copies from pinned host memory at about 50 GB/s, within its memory at terabytes per second), and
// the pinned memory is free for decoding further ahead.
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
  uint64_t waits = 0;                        // acquire() had to wait for a worker or decode itself
  uint64_t evicted = 0;                      // decoded ahead but dropped for room (decoded again if asked for)
  uint64_t skipped = 0;                      // decoded ahead and never asked for (the program skipped the call)
  uint64_t oversized = 0;                    // larger than the arena: decoded into their own allocation
  uint64_t failures = 0;                     // unreadable payloads (the caller falls back to fill semantics)
  uint64_t uploaded = 0, bytesUploaded = 0;  // moved into device memory ahead of use
  uint64_t fromDevice = 0;                   // acquired from device memory (the rest from pinned host memory)
  uint64_t uploadFailures = 0;               // uploads that could not be enqueued (device staging then stops)
};

// prefetch_bytes: auto. A value replay keeps pace when its pinned memory holds about 4 steps of payloads (GPT-2 small
// DDP on one H200, 0.48 GB per step: 1 GiB 62-68 ms per step, 1.5 GiB 57, 2 GiB 55, 3 GiB 55, the job 52; the fixed
// 512 MiB of before 87-95 ms; bench/results/replay/README.md): 4x `largestStepBytes`
// (Recording::largestStepPayloadBytes), at least 512 MiB, at most 8 GiB and an eighth of `hostMemoryBytes` (0:
// unknown; pinned memory is taken from the host for good).
uint64_t autoArenaBytes(uint64_t largestStepBytes, uint64_t hostMemoryBytes);

// payload_device_bytes: auto. What the replayed rank can spare of its GPU's memory for payloads decoded ahead, from
// what the recorded job left free (the recorder's `device_memory_*` manifest counters) and what the replaying GPU
// has. Device staging of about two steps of payloads brought a value replay to the job's pace (GPT-2 small DDP on one
// H200, 0.48 GB per step: 1 GiB 53.1-53.2 ms per step, 256 MiB 54.9-56.9, the job 51.9-52.6).
struct DeviceStageSizing {
  uint64_t largestStepBytes = 0;           // Recording::largestStepPayloadBytes
  uint64_t arenaBytes = 0;                 // the pinned arena (prefetch_bytes): device staging never holds more
  uint64_t recordedTotalBytes = 0;         // 0: the recording does not say (older, crashed, or no GPU)
  uint64_t recordedLeastFreeBytes = 0;     // the least free memory the recorder saw on the job's GPU
  uint64_t totalBytes = 0, freeBytes = 0;  // the replaying GPU's, now (0: unknown)
};
// The recorded figures of DeviceStageSizing from a manifest's device_memory_* counters (left 0 without them).
void setRecordedDeviceMemory(const Manifest& manifest, DeviceStageSizing* in);
// Without recorded figures 256 MiB (what a fixed size gave before the recorders sampled memory). With them: the job's
// peak use (recorded total less least free, NCCL's buffers and other processes included) and a margin (2 GiB or a tenth
// of the GPU, the more) are kept from the replaying GPU, and half the rest may go to staging, up to two steps of
// payloads (at least 64 MiB). Never more than the arena nor half of what is free now; under 16 MiB it is 0 (no device
// staging). `basis` (may be null) says how the size was reached, for the log.
uint64_t autoDeviceStageBytes(const DeviceStageSizing& in, std::string* basis);

class PayloadPrefetcher {
 public:
  using Alloc = std::function<void*(size_t bytes)>;  // nullptr on failure
  using Free = std::function<void(void*)>;
  struct Options {
    size_t arenaBytes = 512u << 20;
    int threads = 2;
    uint64_t maxPayloadBytes = 0;  // only payloads of at most this many bytes (timing replay's control values); 0: all
  };
  // Device memory that payloads move into ahead of use. `upload` enqueues a copy from pinned host memory to device
  // memory on a stream of its own (called from worker threads) and gives a token; `passed` says whether that copy
  // has completed (single-use: true releases the token).
  struct DeviceStage {
    size_t arenaBytes = 0;  // 0: no device staging
    Alloc alloc;
    Free free;
    std::function<bool(void* dst, const void* src, size_t bytes, uint64_t* token)> upload;
    std::function<bool(uint64_t token)> passed;
  };
  PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free, DeviceStage device);
  PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free);  // pinned only
  ~PayloadPrefetcher();
  PayloadPrefetcher(const PayloadPrefetcher&) = delete;
  PayloadPrefetcher& operator=(const PayloadPrefetcher&) = delete;

  struct Staged {
    const uint8_t* data = nullptr;
    size_t bytes = 0;
    bool onDevice = false;  // data is in the device stage's memory (else pinned host memory)
  };
  // The decoded payload of `call` (which must carry one within maxPayloadBytes). Fails (file, offset, reason) when it
  // cannot be read. Every successful acquire must be followed by release().
  Status acquire(const RecordedCall* call, Staged* out);
  // The copy out of the staged bytes is enqueued; `copied()` turns true once the memory may be reused (polled by
  // the workers).
  void release(const RecordedCall* call, std::function<bool()> copied);
  PrefetchStats stats() const;
  bool arenaReady() const;   // false when the arena could not be allocated (payloads then use their own memory)
  bool deviceReady() const;  // a device stage was asked for and its arena allocated

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trace
}  // namespace ranklens

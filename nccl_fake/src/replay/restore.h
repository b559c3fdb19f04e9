// SPDX-License-Identifier: Apache-2.0
// Payload restore (restore.cc): the prefetcher that decodes the recorded payloads ahead of the program into pinned
// (and device) memory, and restorePayload (replay.h), which copies one into the receive buffer and follows
// on_payload_error when it cannot. May call the prefetcher, the stream device and the logger.
#pragma once

#include <cstdint>
#include <memory>

#include "ranklens/config.h"
#include "ranklens/payload_prefetcher.h"
#include "ranklens/recording.h"

namespace nccl_fake {
namespace replay {

struct Session;

struct Restore {
  std::unique_ptr<ranklens::trace::PayloadPrefetcher> prefetcher;
  ranklens::config::OnPayloadError onError = ranklens::config::OnPayloadError::kError;
  // timing fidelity restores the recorded payloads up to this size (the control values: sizes, flags, objects) so
  // that the rank takes the recorded path; value fidelity restores every recorded payload.
  uint64_t controlPayloadBytes = 0;
  uint64_t prefetchArenaBytes = 0;       // the pinned memory the prefetcher was given (prefetch_bytes, auto resolved)
  uint64_t largestStepPayloadBytes = 0;  // Recording::largestStepPayloadBytes
};

// The prefetcher for a recording with payloads at timing or value fidelity (none otherwise), sized by prefetch_bytes
// and payload_device_bytes; warns when its memory cannot be had (payloads are then decoded when needed).
void startPrefetcher(Session* s, const ranklens::config::Settings& st);

}  // namespace replay
}  // namespace nccl_fake

// SPDX-License-Identifier: Apache-2.0
// The replay's counters: how faithful the replay was (matched, mismatched, estimated, restored, held). Each part of
// the session adds to them under the session's lock; replay::finish (counters.cc) writes them into the replay
// trace's manifest and the summary line. Plain data: may call nothing.
#pragma once

#include <cstdint>

namespace nccl_fake {
namespace replay {

struct Counters {
  uint64_t calls = 0, matched = 0, mismatches = 0, resyncs = 0, recordedSkipped = 0, extra = 0, estimated = 0;
  uint64_t estimatesExtrapolated = 0;
  uint64_t estimatesFromBenchmarks = 0;  // from nccl-tests samples of the history (no recorded call was near)
  uint64_t untimed = 0;  // matched, but the recording has no duration for it (captured in a graph, lost)
  uint64_t payloadsRestored = 0, payloadBytesRestored = 0, payloadFailures = 0, filledWithoutPayload = 0;
  uint64_t payloadsSkippedCaptured = 0;  // a recorded payload not restored: the call is captured into a CUDA graph
  uint64_t holds = 0, heldNs = 0, hostHeldNs = 0;
  uint64_t hostCappedNs = 0;  // host_time: own: recorded host time above the cap, not replayed
  uint64_t pacedHolds = 0;    // peer_pacing: holds that knew their peers' pace
  uint64_t commsMatched = 0, commsUnmatched = 0, commsRebound = 0;
};

}  // namespace replay
}  // namespace nccl_fake

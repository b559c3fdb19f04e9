// SPDX-License-Identifier: Apache-2.0
// The end of a replay: the counters into the replay trace's manifest and the summary line, a WARN when the replay
// was not faithful.
#include "counters.h"

#include <cstdio>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "session.h"

namespace nccl_fake {
namespace replay {

using ranklens::config::Fidelity;

namespace {

void writeCounters(const Session& s, const Counters& c, const ranklens::trace::PrefetchStats& p) {
  auto* writer = Runtime::get().writer();
  if (writer == nullptr) return;
  const std::pair<const char*, uint64_t> values[] = {
      {"replay_calls", c.calls},
      {"replay_calls_matched", c.matched},
      {"replay_mismatches", c.mismatches},
      {"replay_resyncs", c.resyncs},
      {"replay_recorded_calls_skipped", c.recordedSkipped},
      {"replay_extra_calls", c.extra},
      {"replay_estimated", c.estimated},
      {"replay_estimates_extrapolated", c.estimatesExtrapolated},
      {"replay_estimates_from_benchmarks", c.estimatesFromBenchmarks},
      {"replay_untimed", c.untimed},
      {"replay_host_capped_ns", c.hostCappedNs},
      {"replay_holds_paced", c.pacedHolds},
      {"replay_holds", c.holds},
      {"replay_held_ns", c.heldNs},
      {"replay_host_held_ns", c.hostHeldNs},
      {"replay_payloads_restored", c.payloadsRestored},
      {"replay_payload_bytes_restored", c.payloadBytesRestored},
      {"replay_payload_failures", c.payloadFailures},
      {"replay_filled_without_payload", c.filledWithoutPayload},
      {"replay_payloads_skipped_captured", c.payloadsSkippedCaptured},
      {"replay_comms_matched", c.commsMatched},
      {"replay_comms_unmatched", c.commsUnmatched},
      {"replay_comms_rebound", c.commsRebound},
      {"replay_prefetch_waits", p.waits},
      {"replay_prefetch_evicted", p.evicted},
      {"replay_prefetch_oversized", p.oversized},
      {"replay_payloads_uploaded", p.uploaded},
      {"replay_payload_bytes_uploaded", p.bytesUploaded},
      {"replay_payloads_from_device", p.fromDevice},
      {"replay_payload_upload_failures", p.uploadFailures},
      {"replay_recorded_calls", s.recording ? s.recording->callCount() : 0},
      {"replay_hold_fixed_ns", static_cast<uint64_t>(s.holds.calibration.holdFixedNs)},
  };
  for (const auto& [name, value] : values) writer->setCounter(name, value);
}

// The summary line of a replay of a recording: INFO when it was faithful, else WARN.
void summarize(const Session& s, const Counters& c) {
  // At value fidelity a call filled for want of its payload makes the rank's values another run's.
  const bool faithful = c.mismatches == 0 && c.commsUnmatched == 0 && c.payloadFailures == 0 &&
                        (s.fidelity != Fidelity::kValue || c.filledWithoutPayload == 0);
  char line[512];
  snprintf(line, sizeof line,
           "replay summary: %lu calls, %lu matched, %lu mismatched (%lu resynchronised, %lu recorded calls skipped, "
           "%lu extra, %lu estimated), %lu payloads restored (%lu bytes), %lu filled without payload, %lu holds",
           static_cast<unsigned long>(c.calls), static_cast<unsigned long>(c.matched),
           static_cast<unsigned long>(c.mismatches), static_cast<unsigned long>(c.resyncs),
           static_cast<unsigned long>(c.recordedSkipped), static_cast<unsigned long>(c.extra),
           static_cast<unsigned long>(c.estimated), static_cast<unsigned long>(c.payloadsRestored),
           static_cast<unsigned long>(c.payloadBytesRestored), static_cast<unsigned long>(c.filledWithoutPayload),
           static_cast<unsigned long>(c.holds));
  if (faithful)
    INFO(kSubRanklens, "%s", line);
  else
    WARN("%s", line);
}

}  // namespace

void finish() {
  Session* s = loaded;
  if (s == nullptr) return;
  Counters c;
  ranklens::trace::PrefetchStats p;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    c = s->counters;
  }
  if (s->restore.prefetcher) p = s->restore.prefetcher->stats();
  writeCounters(*s, c, p);
  if (!s->recording) {
    INFO(kSubRanklens,
         "replay summary (no recording): %lu calls, each held for its estimate (%lu extrapolated "
         "beyond the history, %lu from nccl-tests samples), %lu holds",
         static_cast<unsigned long>(c.calls), static_cast<unsigned long>(c.estimatesExtrapolated),
         static_cast<unsigned long>(c.estimatesFromBenchmarks), static_cast<unsigned long>(c.holds));
    return;
  }
  summarize(*s, c);
  // Decoding that could not run far enough ahead holds the program up (in a value replay, every payload is decoded).
  const Restore& r = s->restore;
  if (s->fidelity == Fidelity::kValue && p.waits > 0 && r.prefetchArenaBytes < 4 * r.largestStepPayloadBytes)
    WARN(
        "replay: the program waited %lu times for payloads to be decoded: prefetch_bytes gave %.0f MiB of pinned "
        "memory, less than 4x the recording's largest step of payloads (%.0f MiB), so the replayed steps may run "
        "slower than recorded; raise prefetch_bytes (docs/config.md)",
        static_cast<unsigned long>(p.waits), r.prefetchArenaBytes / 1048576.0, r.largestStepPayloadBytes / 1048576.0);
}

}  // namespace replay
}  // namespace nccl_fake

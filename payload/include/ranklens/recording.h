// SPDX-License-Identifier: Apache-2.0
// A recorded rank, loaded for replay: its communicators in creation order and every call indexed by its sequence
// key, with the call's recorded GPU duration and payload reference attached. Payload bytes stay on disk until asked
// for (readPayload is thread-safe: each read opens the file itself).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace trace {

// Collectives share one sequence per communicator; Send and Recv have one per peer each.
enum class SeqKind : int { kCollective = 0, kSend = 1, kRecv = 2 };
SeqKind seqKindOf(int op);

struct CallKey {
  uint64_t commId = 0;
  SeqKind kind = SeqKind::kCollective;
  int peer = -1;  // -1 for collectives
  uint64_t seq = 0;
  bool operator==(const CallKey& o) const {
    return commId == o.commId && kind == o.kind && peer == o.peer && seq == o.seq;
  }
};
struct CallKeyHash {
  size_t operator()(const CallKey& k) const {
    uint64_t h =
        k.commId * 0x9E3779B97F4A7C15ull ^ (k.seq + 0x632BE59BD9B4E019ull * (static_cast<uint64_t>(k.kind) + 1));
    h ^= static_cast<uint64_t>(static_cast<int64_t>(k.peer)) * 0xC2B2AE3D27D4EB4Full;
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
CallKey callKeyOf(const events::Call& call);

struct RecordedCall {
  events::Call call;
  // GPU duration from the call's Timing record; for a call in a group, the first call on each stream carries the
  // duration of the whole group on that stream and the others carry -1. -1: not measured (captured, lost).
  int64_t durationNs = -1;
  bool captured = false;     // captured into a CUDA graph (ran at each launch): durationNs is a launch's, or -1
  bool kernelClock = false;  // durationNs is NCCL's kernel time (Timing.clock), without the host launch
  int64_t gapNs = -1;        // Timing.gapNs: since the communicator's previous collective ended; -1 unknown
  std::optional<PayloadRef> payload;
  uint64_t order = 0;  // submission order among all recorded calls of the rank
  // 1.13, a trace imported from a Flight Recorder dump: the dump's entry for this call (its state, the Python stack)
  std::shared_ptr<const FlightRecorderEntry> flightRecorder;
};

class Recording {
 public:
  // `path` is a rank directory or a trace root holding rank<rank> (rank < 0: the root must hold exactly one).
  // Damage in the trace is reported by problems(); what precedes it is used.
  static Status open(const std::string& path, int rank, std::unique_ptr<Recording>* recording);
  ~Recording();

  const Manifest& manifest() const;
  const std::string& directory() const;
  const std::vector<Problem>& problems() const;
  const std::vector<events::CommInit>& comms() const;  // creation order
  const RecordedCall* find(const CallKey& key) const;
  size_t callCount() const;
  size_t timedCount() const;
  // Calls with a payload, in submission order: the order replay will most likely ask for them.
  const std::vector<const RecordedCall*>& payloadOrder() const;
  // All recorded calls in submission order.
  const std::vector<RecordedCall>& calls() const;
  bool readPayload(const PayloadRef& ref, std::vector<uint8_t>* out, Problem* problem) const;
  bool readPayload(const PayloadRef& ref, uint8_t* out, size_t outBytes, Problem* problem) const;  // ref.rawBytes
  // GroupEnd.hostNs of a recorded group; -1 when unknown.
  int64_t groupHostNs(uint64_t groupId) const;
  // The stage markers (ranklensMarkStage), in trace order.
  const std::vector<events::Stage>& stages() const;
  // The payload bytes of the rank's largest step, its steps cut at its step markers (events::stepMarkers; what
  // precedes the first marker counts as a step); all of them when the recording has no markers.
  uint64_t largestStepPayloadBytes() const;

 private:
  Recording();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The calls a value replay of `recording` cannot give their recorded data: they receive bytes (not Send, more than
// 0) and the recording stored no payload for them, because its payload policy left them out (`payloads: small`,
// the default, stores up to 64 KiB) or it could not (payloadsNotStored). Replayed at value fidelity those calls get
// the fill semantics, and the rank's values part from the recorded run's at the first of them.
struct PayloadGaps {
  uint64_t receiving = 0;               // recorded calls that receive data
  uint64_t missing = 0;                 // of those, without a payload
  const RecordedCall* first = nullptr;  // the first of those in submission order
  int64_t firstStep = -1;               // its step number (events::stepMarkers); -1: no marker before it
  const char* stepKind = nullptr;       // the markers' name ("step", "optimizer"); nullptr: the rank has none
};
PayloadGaps payloadGaps(const Recording& recording);
// One sentence for a value replay's warning on payloadGaps(recording): how many, why (the manifest's counts and the
// recorded RANKLENS_PAYLOADS), the first call and its step, what follows and the fix. "" when nothing is missing.
std::string describePayloadGaps(const Recording& recording);

// The recordings of one job's ranks, opened together (history build, `ranklens trace waits`).
struct JobRecordings {
  std::vector<std::unique_ptr<Recording>> owned;
  std::vector<const Recording*> ranks;  // the same, in the order of the directories given
  // Opens every rank directory; fails with the first that cannot be read.
  Status open(const std::vector<std::string>& rankDirs);
};

}  // namespace trace
}  // namespace ranklens

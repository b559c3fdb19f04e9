// SPDX-License-Identifier: Apache-2.0
// Call matching (matching.cc): each replayed call to its recorded call by communicator binding, sequence and
// signature, resynchronised within resync_window when the program skipped recorded calls; a call the recording
// lacks follows on_mismatch. planCall (replay.h) is here: it matches, then asks hang.h and estimates.h. May call
// the recording, the bindings, the hang report and the estimator.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "nccl_fake/enqueue.h"
#include "ranklens/events.h"
#include "ranklens/recording.h"
#include "ranklens/status.h"

namespace nccl_fake {
namespace replay {

struct Session;

struct Matching {
  int window = 64;                                            // resync_window
  std::map<std::tuple<uint64_t, int, int>, int64_t> offsets;  // (replayed comm, kind, peer) -> recorded seq - replayed
  bool reportedFirst = false;  // the first mismatch was reported (later ones every 1000th)
  uint64_t warned = 0;
};

// Whether recorded call `r` has `info`'s op, type, count, root or peer and reduction. `unknown`: the fields a trace
// imported from a Flight Recorder dump does not know (it holds a stand-in for them), which are then not compared.
bool sameSignature(const ranklens::events::Call& r, const CallInfo& info, const std::string* unknown = nullptr);
// The fields recorded call `rc` does not know (see sameSignature), or nullptr.
inline const std::string* unknownOf(const ranklens::trace::RecordedCall* rc) {
  return rc != nullptr && rc->flightRecorder ? &rc->flightRecorder->unknown : nullptr;
}

// The application frames that made the call (outside this library), for mismatch and hang reports.
std::string callSite();

}  // namespace replay
}  // namespace nccl_fake

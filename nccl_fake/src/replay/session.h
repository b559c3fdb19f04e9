// SPDX-License-Identifier: Apache-2.0
// The replay session (session.cc): the recording of replay_trace, loaded and checked once at the first replayed
// communicator, and the parts each unit of the replay owns, composed here under one lock. session.cc loads it and
// may call every part's loader; the parts may call this header and each other's headers.
//
// Threads: the program's threads call replay.h concurrently. `mu` guards every part's mutable state (counters,
// bindings, offsets, step places, flags); what is set at load (the recording, the settings below, the paces, the
// caps, the calibration) is read without it.
#pragma once

#include <memory>
#include <mutex>

#include "bindings.h"
#include "counters.h"
#include "estimates.h"
#include "hang.h"
#include "holds.h"
#include "matching.h"
#include "nccl_fake/debug.h"
#include "nccl_fake/enqueue.h"
#include "ranklens/config.h"
#include "ranklens/recording.h"
#include "ranklens/status.h"
#include "restore.h"

namespace nccl_fake {
namespace replay {

struct Session {
  std::mutex mu;
  // Null when there is no recording (timing: estimated with a history and no replay_trace): every call is held
  // for its estimate, and nothing is matched.
  std::unique_ptr<ranklens::trace::Recording> recording;
  ranklens::config::Fidelity fidelity = ranklens::config::Fidelity::kStructure;
  ranklens::config::OnMismatch policy = ranklens::config::OnMismatch::kError;  // on_mismatch
  Counters counters;
  Bindings bindings;
  Matching matching;
  Estimates estimates;
  Restore restore;
  Holds holds;
  Hang hang;
};

// Set once by load(), never freed (calls may come from threads still running at exit). Null before the first
// communicator, and outside a replay; readers past planCall use it without loading.
extern Session* loaded;

// The session, loaded at the first call (null outside a replay, or when the recording cannot be replayed:
// loadFailure() then says why).
Session* load();
const ranklens::Status& loadFailure();

// Whether calls may be held for an estimate (timing: estimated, or on_mismatch: estimate): only then are they
// counted for the same-place rule (a map update per call, under the session's lock).
inline bool estimatesCalls(const Session& s) {
  return s.estimates.all || s.policy == ranklens::config::OnMismatch::kEstimate;
}

// The bytes the call receives (Send: sends), as its Call record counts them.
inline uint64_t bytesOf(const CallInfo& c) {
  return ranklens::events::receivedBytes(c.op, c.count, c.datatype, c.comm->nRanks, c.comm->rank, c.root);
}

// The C boundary of the replay: nccl_fake's one conversion (toNcclResult: the WARN that ncclGetLastError returns, and
// NCCL's code). Inline for the per-call paths, whose Status is nearly always success.
inline ncclResult_t toNccl(const ranklens::Status& status) {
  return status.isOk() ? ncclSuccess : toNcclResult(status);
}

}  // namespace replay
}  // namespace nccl_fake

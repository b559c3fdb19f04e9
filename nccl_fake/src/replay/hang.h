// SPDX-License-Identifier: Apache-2.0
// at_hang and break_at: hang, for a trace imported from Flight Recorder dumps: the replayed program reached the
// call where the recorded job hung (hang.cc). May call the recording's manifest and the logger.
#pragma once

#include <mutex>

#include "ranklens/config.h"
#include "ranklens/recording.h"

namespace nccl_fake {
namespace replay {

struct Session;

struct Hang {
  ranklens::config::AtHang at = ranklens::config::AtHang::kStop;
  bool breakAt = false;   // break_at: hang
  bool reported = false;  // an imported trace's hang: reported once (at_hang: continue goes on after it)
};

// Reports the hang at recorded call `rc` in the user's terms (said whatever NCCL_DEBUG is), then stops, waits for a
// debugger or goes on as at_hang says. Whether the call goes on (at_hang: continue, or a debugger let a waiting rank
// go); the call fails otherwise. Called and returns with `lock` (the session's) held; releases it while it reports.
bool goesOnPastHang(Session* s, const ranklens::trace::RecordedCall& rc, std::unique_lock<std::mutex>* lock);

}  // namespace replay
}  // namespace nccl_fake

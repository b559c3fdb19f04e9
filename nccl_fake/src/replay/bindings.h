// SPDX-License-Identifier: Apache-2.0
// Which recorded communicator each replayed one stands for: bound at creation (same lineage, else same size and
// rank) and final at its first call, which may exchange two bindings (bindings.cc). May call the recording, the
// matcher's signature comparison and the runtime's trace writer.
#pragma once

#include <cstdint>
#include <map>

#include "nccl_fake/enqueue.h"
#include "ranklens/events.h"
#include "ranklens/status.h"

namespace nccl_fake {
namespace replay {

struct Session;

struct Bindings {
  struct Binding {
    int64_t recordedId = -1;
    bool called = false;  // it has issued a call: the binding is final (rebindOnFirstCall)
  };
  std::map<uint64_t, Binding> of;  // replayed comm id -> its recorded communicator

  // Whether a replayed communicator is bound to recorded communicator `recordedId` (a few dozen at most).
  bool taken(uint64_t recordedId) const {
    for (const auto& [replayed, b] : of)
      if (b.recordedId == static_cast<int64_t>(recordedId)) return true;
    return false;
  }
  Binding* find(uint64_t replayedId) {
    auto it = of.find(replayedId);
    return it == of.end() ? nullptr : &it->second;
  }
};

// The binding of `info`'s communicator made final at its first call (under the session's lock): rebound when the
// recording says another communicator starts with this call, and the binding written to the replay trace.
void finishBinding(Session* s, Bindings::Binding* binding, const CallInfo& info, const ranklens::events::Call& event,
                   uint64_t position);

}  // namespace replay
}  // namespace nccl_fake

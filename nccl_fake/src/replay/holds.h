// SPDX-License-Identifier: Apache-2.0
// Holds and pacing (holds.cc): the recorded (or estimated) duration of a call or group as a hold on its stream,
// counted from the stream's arrival mark, paced by its peers' recorded pace (peer_pacing: recorded), and the
// recorded host time as a wait of the calling thread (host_time). markArrival(s), settle, holdCall, holdGroup and
// holdHost(Group) (replay.h) are here. May call the stream device, the estimates, the recording and the trace writer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "nccl_fake/enqueue.h"
#include "ranklens/config.h"
#include "ranklens/peer_waits.h"
#include "ranklens/recording.h"
#include "ranklens/status.h"
#include "ranklens/device.h"

namespace nccl_fake {
namespace replay {

struct Session;

struct Holds {
  ranklens::device::StreamDevice::Calibration calibration;
  bool hostTime = true;  // host_time is not ignore
  // host_time: own. The most host time replayed for a call of each operation (groups: kGroupHostKey); absent: no cap.
  std::map<int, int64_t> hostCaps;
  // peer_pacing: recorded. Per recorded call (RecordedCall::order), how its peers paced it (read-only once loaded;
  // each communicator's chain is on the communicator).
  bool pacing = false;
  std::vector<ranklens::timing::PeerPace> paces;
};

// The host-time caps (host_time: own), the peer paces (peer_pacing: recorded) and the device's calibration, for a
// replay at timing or value fidelity. `recorded`: there is a recording. Warns when pacing cannot be had.
void loadHolds(Session* s, const ranklens::config::Settings& st, bool recorded);

// The time to hold the stream for a duration. The hold's calibrated fixed cost is subtracted from an event-timed
// duration, which contains NCCL's launch; a kernel-clock duration leaves that launch out, and the hold's own launch
// stands for it. From an arrival mark the restore's copy runs within the duration; without one (host callbacks,
// hold_from: start) its calibrated cost (`restoreNs`) is subtracted.
inline int64_t holdFor(const Holds& h, int64_t durationNs, int64_t restoreNs, bool marked, bool kernelTime) {
  if (durationNs <= 0) return 0;
  int64_t cost = kernelTime ? 0 : h.calibration.holdFixedNs;
  if (!marked) cost += restoreNs;
  return std::max<int64_t>(0, durationNs - cost);
}

}  // namespace replay
}  // namespace nccl_fake

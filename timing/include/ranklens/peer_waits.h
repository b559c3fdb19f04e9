// SPDX-License-Identifier: Apache-2.0
// Who waited for whom in a recorded job: each collective's duration on a rank less the shortest over the job's ranks
// (the last to arrive waits for nobody) is that rank's wait for its peers. The rank that waits least is the one the
// others wait for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ranklens {
namespace trace {
class Recording;
}
namespace timing {

struct StepWaits {
  int64_t step = -1;   // the number of the marker that starts it
  int64_t stepNs = 0;  // host time to the next marker
  int64_t waitNs = 0;  // this rank's waits in the collectives submitted in the step
};

struct RankWaits {
  std::string directory;
  int rank = -1;
  uint64_t collectives = 0;   // timed collectives of communicators of several ranks, timed by another rank too
  uint64_t lastToArrive = 0;  // of those, the ones this rank waited in least (its duration the shortest)
  int64_t waitNs = 0;         // the sum of its waits in them
  // Between consecutive step markers (events::stepMarkers; none before the first or after the last).
  std::vector<StepWaits> steps;
};

// One entry per rank given, in that order. Collectives are paired across ranks as JobCollectives pairs them
// (job_collectives.h), groups left out.
std::vector<RankWaits> peerWaits(const std::vector<const trace::Recording*>& ranks);

// How rank `me`'s peers paced a collective (peer_pacing). In the real job every rank ends a collective together,
// once the last has arrived: the call took the last arrival's duration (`lastNs`, the shortest over the ranks) after
// the later of this rank's arrival and its peers'. A peer arrived `peerGapNs` after the communicator's previous
// collective ended (Timing.gapNs, the largest over the peers): its own work between the two calls.
struct PeerPace {
  bool known = false;  // every rank timed the call, every peer's gap is known (a collective outside groups)
  int64_t lastNs = -1;
  int64_t peerGapNs = 0;
};

// One entry per call of ranks[me] (RecordedCall::order), paired as peerWaits pairs them.
std::vector<PeerPace> peerPace(const std::vector<const trace::Recording*>& ranks, size_t me);

}  // namespace timing
}  // namespace ranklens

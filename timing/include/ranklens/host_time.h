// SPDX-License-Identifier: Apache-2.0
// host_time: own. How much of a recorded call's host time a replay keeps the calling thread for.
#pragma once

#include <cstdint>
#include <vector>

namespace ranklens {
namespace timing {

// The most host time replayed for a call of one operation (or for a group): twice the 10th percentile of the
// recorded host times of that operation (groups: of all groups), or -1 (no cap) with fewer than 5 of them. In a
// GPU-bound run calls take long on the host (~600 us held per DDP call at micro-batch 32, 30-46 us recorded at
// micro-batch 8), most likely waiting for a full CUDA launch queue inside NCCL; the replayed program meets that
// back-pressure itself, and holding the thread for it again can leave the GPU idle.
int64_t ownHostCapNs(std::vector<int64_t> hostNs);

}  // namespace timing
}  // namespace ranklens

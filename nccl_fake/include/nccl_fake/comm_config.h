// SPDX-License-Identifier: Apache-2.0
// The parts of ncclConfig_t RankLens uses, read the way NCCL reads the struct (shared by replay and record).
#pragma once

#include <string>

#include "nccl_fake/core.h"

namespace nccl_fake {

struct CommConfig {
  int blocking = 1;
  std::string name;  // commName
};

// NCCL's parseCommConfig: versioned read, magic required, NCCL's messages for invalid attributes. NULL: defaults.
ncclResult_t parseCommConfig(const ncclConfig_t* user, CommConfig* out);
// NCCL_COMM_BLOCKING=0|1 overrides ncclConfig_t.blocking, as NCCL's envConfigOverride does.
void applyBlockingEnv(CommConfig* config);

}  // namespace nccl_fake

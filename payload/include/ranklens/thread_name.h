// SPDX-License-Identifier: Apache-2.0
// Names RankLens's background threads (as NCCL names its own) so that top -H, gdb, py-spy, Nsight and
// /proc/PID/task/*/comm tell them from the job's threads: which of them is busy is what bounds a recording or replay.
#pragma once

#include <pthread.h>

namespace ranklens {

// `name` is cut to the kernel's 15 characters; failure is harmless and ignored.
inline void nameThisThread(const char* name) {
  char cut[16] = {};
  for (int i = 0; i < 15 && name[i]; ++i) cut[i] = name[i];
  pthread_setname_np(pthread_self(), cut);
}

}  // namespace ranklens

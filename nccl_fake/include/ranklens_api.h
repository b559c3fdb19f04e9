/* SPDX-License-Identifier: Apache-2.0 */
/* RankLens's own C API, exported by its libnccl.so.2 next to NCCL's: deliberately small, for framework adapters
   (the Python adapter calls it through ctypes). Resolve it with dlsym so code also runs on the real NCCL. */
#ifndef RANKLENS_API_H_
#define RANKLENS_API_H_

#include <stdint.h>

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RANKLENS_API_VERSION 1

/* The version of this C API (RANKLENS_API_VERSION of the library). */
int ranklensApiVersion(void);
/* Marks a stage of the training loop in the event log: name is "step", "forward", "backward", "optimizer" or any
   label; step is the training step or -1. Never blocks on I/O. */
ncclResult_t ranklensMarkStage(const char* name, int64_t step);
/* Writes every event logged so far to disk before returning (not for the hot path). */
ncclResult_t ranklensFlush(void);
/* The rank directory of the trace this process writes ("" when none is configured). */
const char* ranklensEventLogPath(void);

#ifdef __cplusplus
}
#endif

#endif /* RANKLENS_API_H_ */

// SPDX-License-Identifier: Apache-2.0
// The program behind tests/data/flight_recorder/synthetic/replay-2 (a Flight Recorder dump made by
// make_synthetic.py): rank RANK of a 2-rank world making FR_CALLS all-reduces of 256 floats. Replayed against the
// imported dump, its third all-reduce is the one the dump left started: the replay stops it there. FR_REDOP=max
// reduces with max instead of sum. FR_SPLIT=1 (for synthetic/replay-split-2) makes its third all-reduce on a
// communicator split from the world as torch's new_group does (color: the hash of the sorted world ranks {0, 1}, key:
// the rank in the group).
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main() {
  const int rank = getenv("RANK") ? atoi(getenv("RANK")) : 0;
  const int calls = getenv("FR_CALLS") ? atoi(getenv("FR_CALLS")) : 3;
  // A Flight Recorder dump does not say which reduction a call made: any must match the imported trace.
  const ncclRedOp_t redop = getenv("FR_REDOP") && std::string(getenv("FR_REDOP")) == "max" ? ncclMax : ncclSum;
  ncclUniqueId id;
  ncclComm_t world = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&world, 2, id, rank) != ncclSuccess) return 4;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5});
  ncclComm_t tp = nullptr;
  const bool split = getenv("FR_SPLIT") && std::string(getenv("FR_SPLIT")) == "1";
  if (split) {
    const int torchColor = 2130503744;  // torch's _process_group_color([0, 1])
    const ncclResult_t r = ncclCommSplit(world, torchColor, rank, &tp, nullptr);
    if (r != ncclSuccess) {
      printf("fr_replay_scenario: split failed: %s\n", ncclGetErrorString(r));
      return 5;
    }
  }
  std::vector<float> grad(256, 1.0f);
  for (int k = 0; k < calls; ++k) {
    ncclComm_t comm = split && k == 2 ? tp : world;
    const ncclResult_t r = ncclAllReduce(grad.data(), grad.data(), grad.size(), ncclFloat32, redop, comm, stream);
    if (r != ncclSuccess) {
      printf("fr_replay_scenario: all-reduce %d failed: %s\n", k + 1, ncclGetErrorString(r));
      return 3;
    }
  }
  printf("fr_replay_scenario: %d all-reduces done\n", calls);
  if (tp != nullptr) ncclCommDestroy(tp);
  ncclCommDestroy(world);
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// A program that creates its communicators differently from one run to the next, as frameworks do when a rank runs
// alone (torch splits a new group from the default group's communicator only when that one exists). Rank 1 of 4:
//   A_CALLS=0|1  the first communicator (init) makes AllReduce calls (1) or none (0)
//   SPLIT=1      the second communicator is ncclCommSplit of the first; SPLIT=0: ncclCommInitRank of its own
//   SECOND=0     there is no second communicator: its calls go to the first one
//   SAME=1       both communicators' calls are alike (16 floats), the second's issued first in each iteration, and the
//                first ends with one more AllReduce (1 float): only the call order tells the two apart
//   SECOND_FIRST=1  (with SPLIT=0) the second communicator is created before the first
// Each communicator's calls are three AllReduce of a size of its own (first: 8 floats, second: 16 floats).
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {
int flag(const char* name, int fallback) { return getenv(name) ? atoi(getenv(name)) : fallback; }
void check(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fprintf(stderr, "rebind_scenario: %s failed: %s: %s\n", what, ncclGetErrorString(r), ncclGetLastError(nullptr));
  exit(3);
}
}  // namespace

int main() {
  float buffer[16] = {};
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5});
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "GetUniqueId");
  ncclComm_t first = nullptr, second = nullptr;
  if (flag("SECOND_FIRST", 0) == 1) {
    check(ncclCommInitRank(&second, 4, id, 1), "CommInitRank (second)");
    check(ncclGetUniqueId(&id), "GetUniqueId");
  }
  check(ncclCommInitRank(&first, 4, id, 1), "CommInitRank");
  if (second != nullptr) {
    // created above, before the first
  } else if (flag("SECOND", 1) == 0) {
    second = first;
  } else if (flag("SPLIT", 1) == 1) {
    check(ncclCommSplit(first, 1000, 1, &second, nullptr), "CommSplit");  // the fake: the whole parent
  } else {
    check(ncclGetUniqueId(&id), "GetUniqueId");
    check(ncclCommInitRank(&second, 4, id, 1), "CommInitRank (second)");
  }
  const bool same = flag("SAME", 0) == 1;
  for (int i = 0; i < 3; ++i) {
    if (same) check(ncclAllReduce(buffer, buffer, 16, ncclFloat32, ncclSum, second, stream), "AllReduce (second)");
    if (flag("A_CALLS", 1) == 1 && second != first)
      check(ncclAllReduce(buffer, buffer, same ? 16 : 8, ncclFloat32, ncclSum, first, stream), "AllReduce (first)");
    if (!same) check(ncclAllReduce(buffer, buffer, 16, ncclFloat32, ncclSum, second, stream), "AllReduce (second)");
  }
  if (same) check(ncclAllReduce(buffer, buffer, 1, ncclFloat32, ncclSum, first, stream), "AllReduce (first, last)");
  if (second != first) check(ncclCommDestroy(second), "CommDestroy");
  check(ncclCommDestroy(first), "CommDestroy");
  printf("rebind_scenario: done\n");
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// A small "training loop" of NCCL calls, run once recording (RankLens forwarding to the fake real NCCL of
// tests/support) and then replaying that recording (RankLens alone, host device). It writes every received buffer
// to the file named by SCENARIO_OUT, so test_replay.cc can compare what the replay restored with what the real
// library delivered. SCENARIO_VARIANT changes the program the way a local edit would: "count" (step 1's AllReduce
// has another count), "skip" (step 3 skips its Broadcast), "extra" (step 2 makes an extra AllReduce), "simulate"
// (after the last step, ncclGroupSimulateEnd of a step's AllReduce, its estimate written out).
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ranklens_api.h"

namespace {

FILE* out = nullptr;

void dump(const char* what, int step, const void* data, size_t bytes) {
  fprintf(out, "%s step %d:", what, step);
  const auto* b = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) fprintf(out, "%02x", b[i]);
  fprintf(out, "\n");
}

int check(ncclResult_t r, const char* what, int step) {
  if (r == ncclSuccess) return 0;
  fprintf(stderr, "scenario: %s at step %d failed: %s: %s\n", what, step, ncclGetErrorString(r),
          ncclGetLastError(nullptr));
  exit(3);
}

}  // namespace

int main() {
  const char* variant = getenv("SCENARIO_VARIANT") ? getenv("SCENARIO_VARIANT") : "";
  out = fopen(getenv("SCENARIO_OUT") ? getenv("SCENARIO_OUT") : "/dev/null", "w");
  if (out == nullptr) return 4;
  const int steps = 5;
  ncclUniqueId id;
  check(ncclGetUniqueId(&id), "GetUniqueId", -1);
  ncclComm_t world = nullptr, half = nullptr;
  check(ncclCommInitRank(&world, 4, id, 1), "CommInitRank", -1);
  // No split table in the replay's config: the child's size and rank come from the recording.
  check(ncclCommSplit(world, 1, 0, &half, nullptr), "CommSplit", -1);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5}),
               side = reinterpret_cast<cudaStream_t>(uintptr_t{0x6});

  for (int step = 0; step < steps; ++step) {
    check(ranklensMarkStage("step", step), "MarkStage", step);
    std::vector<float> grad(256), reduced(256);
    for (size_t i = 0; i < grad.size(); ++i) grad[i] = static_cast<float>(step * 1000 + i) * 0.5f;
    const size_t count = (step == 1 && strcmp(variant, "count") == 0) ? 255 : 256;
    check(ncclAllReduce(grad.data(), reduced.data(), count, ncclFloat32, ncclSum, world, stream), "AllReduce", step);
    dump("allreduce", step, reduced.data(), reduced.size() * sizeof(float));
    if (step == 2 && strcmp(variant, "extra") == 0) {
      float extra[7] = {};
      check(ncclAllReduce(extra, extra, 7, ncclFloat32, ncclSum, world, stream), "extra AllReduce", step);
    }
    if (!(step == 3 && strcmp(variant, "skip") == 0)) {
      int flags[4] = {step, 0, 0, 0};
      check(ncclBroadcast(flags, flags, 4, ncclInt32, 0, world, stream), "Broadcast", step);
      dump("broadcast", step, flags, sizeof flags);
    }
    std::vector<double> shard(8, step + 0.25), gathered(16);
    check(ncclAllGather(shard.data(), gathered.data(), 8, ncclFloat64, half, side), "AllGather", step);
    dump("allgather", step, gathered.data(), gathered.size() * sizeof(double));
    std::vector<float> act(16, static_cast<float>(step)), from(16);
    check(ncclGroupStart(), "GroupStart", step);
    check(ncclSend(act.data(), 16, ncclFloat32, 2, world, stream), "Send", step);
    check(ncclRecv(from.data(), 16, ncclFloat32, 2, world, stream), "Recv", step);
    check(ncclGroupEnd(), "GroupEnd", step);
    dump("recv", step, from.data(), from.size() * sizeof(float));
  }
  if (strcmp(variant, "simulate") == 0) {  // what NCCL's own estimate says of a step's AllReduce
    std::vector<float> grad(256);
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    check(ncclGroupStart(), "GroupStart", steps);
    check(ncclAllReduce(grad.data(), grad.data(), grad.size(), ncclFloat32, ncclSum, world, stream), "AllReduce",
          steps);
    check(ncclGroupSimulateEnd(&sim), "GroupSimulateEnd", steps);
    fprintf(out, "simulated AllReduce: %.1f us\n", sim.estimatedTime);
  }
  check(ncclCommDestroy(half), "CommDestroy", -1);
  check(ncclCommDestroy(world), "CommDestroy", -1);
  fclose(out);
  return 0;
}

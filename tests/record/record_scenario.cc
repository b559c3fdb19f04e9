// SPDX-License-Identifier: Apache-2.0
// One record-mode scenario per process (the library reads its settings once per process): linked against RankLens's
// libnccl.so.2, which forwards to the fake "real NCCL" named by RANKLENS_REAL_NCCL (tests/support). The scenario
// checks what it can see from the application's side (results, error codes, the fake's call counters) and exits
// non-zero naming the first failure; test_record.cc then checks the trace it left.
#include <dlfcn.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ranklens_api.h"

namespace {

int failures = 0;
#define EXPECT(cond, ...)                                               \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "%s:%d: FAILED %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                     \
      fprintf(stderr, "\n");                                            \
      ++failures;                                                       \
    }                                                                   \
  } while (0)

// The fake's counters, through the handle RankLens's loader already holds (same path, same object).
int calls(const char* name) {
  static void* fake = dlopen(getenv("RANKLENS_REAL_NCCL"), RTLD_NOW | RTLD_NOLOAD);
  if (fake == nullptr) return -100;
  auto fn = reinterpret_cast<int (*)(const char*)>(dlsym(fake, "fakeRealNcclCalls"));
  return fn ? fn(name) : -200;
}

cudaStream_t streamA() { return reinterpret_cast<cudaStream_t>(uintptr_t{0xa}); }
cudaStream_t streamB() { return reinterpret_cast<cudaStream_t>(uintptr_t{0xb}); }

void forward() {
  int version = 0;
  EXPECT(ncclGetVersion(&version) == ncclSuccess && version == 22707, "version %d (the fake reports 22707)", version);
  EXPECT(strcmp(ncclGetErrorString(ncclInvalidUsage), "fake-real: error 5") == 0, "%s",
         ncclGetErrorString(ncclInvalidUsage));
  float x = 1;
  EXPECT(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, nullptr, streamA()) == ncclInvalidArgument, "null comm");
  EXPECT(strstr(ncclGetLastError(nullptr), "fake-real") != nullptr, "last error '%s'", ncclGetLastError(nullptr));

  ncclComm_t comms[2] = {};
  EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "InitAll");
  // The fake's InitAll calls its own exported ncclCommInitRank twice: those calls stay inside the real library.
  EXPECT(calls("ncclCommInitRank") == 2, "internal InitRank calls %d", calls("ncclCommInitRank"));
  int n = 0, r = -1, dev = -1;
  EXPECT(ncclCommCount(comms[1], &n) == ncclSuccess && n == 2, "count %d", n);
  EXPECT(ncclCommUserRank(comms[1], &r) == ncclSuccess && r == 1, "rank %d", r);
  EXPECT(ncclCommCuDevice(comms[1], &dev) == ncclSuccess, "cuDevice");

  float send[4] = {1, 2, 3, 4}, recv[4] = {};
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess, "AllReduce");
  EXPECT(recv[0] == 2 && recv[3] == 8, "AllReduce result %g %g (the fake multiplies by nranks)", recv[0], recv[3]);
  float b[4] = {5, 6, 7, 8};
  EXPECT(ncclBcast(b, 4, ncclFloat32, 0, comms[0], streamA()) == ncclSuccess, "Bcast");
  EXPECT(calls("ncclBcast") == 1 && calls("ncclBroadcast") == 1, "Bcast %d Broadcast %d", calls("ncclBcast"),
         calls("ncclBroadcast"));

  ncclUniqueId id;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess && calls("ncclGetUniqueId") == 1, "GetUniqueId");
  void* mem = nullptr;
  EXPECT(ncclMemAlloc(&mem, 64) == ncclSuccess && mem != nullptr, "MemAlloc");
  EXPECT(ncclMemFree(mem) == ncclSuccess && calls("ncclMemFree") == 1, "MemFree");
  ncclRedOp_t op;
  float scalar = 0.5f;
  EXPECT(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comms[0]) == ncclSuccess,
         "PreMulSum");
  EXPECT(ncclRedOpDestroy(op, comms[0]) == ncclSuccess && calls("ncclRedOpDestroy") == 1, "RedOpDestroy");
  void* handle = nullptr;
  EXPECT(ncclCommRegister(comms[0], send, sizeof(send), &handle) == ncclSuccess, "Register");
  EXPECT(ncclCommDeregister(comms[0], handle) == ncclSuccess && calls("ncclCommDeregister") == 1, "Deregister");
  ncclResult_t async = ncclInternalError;
  EXPECT(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclSuccess, "GetAsyncError");
  EXPECT(ncclGroupStart() == ncclSuccess, "GroupStart");
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess, "in group");
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  EXPECT(ncclGroupSimulateEnd(&sim) == ncclSuccess && calls("ncclGroupSimulateEnd") == 1, "SimulateEnd");
  EXPECT(ncclGroupEnd() == ncclInvalidUsage, "GroupEnd outside a group is the real library's error");
  EXPECT(ncclCommFinalize(comms[0]) == ncclSuccess && calls("ncclCommFinalize") == 1, "Finalize");
  EXPECT(ncclCommDestroy(comms[0]) == ncclSuccess && ncclCommAbort(comms[1]) == ncclSuccess, "Destroy/Abort");
  EXPECT(calls("ncclCommDestroy") == 1 && calls("ncclCommAbort") == 1, "end counters");
}

void capture() {
  ncclComm_t comms[2] = {};
  EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "InitAll");
  EXPECT(ranklensMarkStage("step", 0) == ncclSuccess, "stage");
  float send[4] = {1, 2, 3, 4}, recv[4] = {};
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess, "AllReduce");
  float gathered[8] = {};
  EXPECT(ncclAllGather(send, gathered, 4, ncclFloat32, comms[1], streamA()) == ncclSuccess, "AllGather");
  // A group on two streams: timed per stream, payloads stored after the group ends.
  std::vector<unsigned char> p2p(256, 0), out(256, 7);
  EXPECT(ncclGroupStart() == ncclSuccess, "GroupStart");
  EXPECT(ncclSend(out.data(), 256, ncclUint8, 1, comms[0], streamB()) == ncclSuccess, "Send");
  EXPECT(ncclRecv(p2p.data(), 256, ncclUint8, 1, comms[0], streamB()) == ncclSuccess, "Recv");
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comms[1], streamA()) == ncclSuccess, "AllReduce in group");
  EXPECT(ncclGroupEnd() == ncclSuccess, "GroupEnd");
  EXPECT(p2p[0] == 2, "Recv fill %d (the fake writes peer + 1)", p2p[0]);
  EXPECT(ranklensMarkStage("step", 1) == ncclSuccess, "stage");
  // 128 KiB: above the default 64 KiB payload limit.
  std::vector<float> big(32768, 1.0f), bigOut(32768);
  EXPECT(ncclAllReduce(big.data(), bigOut.data(), big.size(), ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess,
         "big AllReduce");
  // A failed call is not recorded and does not consume a sequence number.
  EXPECT(ncclAllReduce(send, recv, 4, static_cast<ncclDataType_t>(99), ncclSum, comms[0], streamA()) != ncclSuccess,
         "bad datatype");
  ncclComm_t child = nullptr;
  EXPECT(ncclCommSplit(comms[0], 3, 9, &child, nullptr) == ncclSuccess && child != nullptr, "Split");
  ncclComm_t none = reinterpret_cast<ncclComm_t>(1);
  EXPECT(ncclCommSplit(comms[1], NCCL_SPLIT_NOCOLOR, 0, &none, nullptr) == ncclSuccess && none == nullptr, "NOCOLOR");
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, child, streamA()) == ncclSuccess, "child AllReduce");
  EXPECT(ranklensFlush() == ncclSuccess, "flush");
  EXPECT(ncclCommDestroy(child) == ncclSuccess && ncclCommDestroy(comms[0]) == ncclSuccess &&
             ncclCommDestroy(comms[1]) == ncclSuccess,
         "Destroy");
}

void nonblocking() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "nb-world";
  ncclUniqueId id;
  ncclGetUniqueId(&id);
  ncclComm_t comm = nullptr;
  EXPECT(ncclCommInitRankConfig(&comm, 4, id, 2, &config) == ncclInProgress, "non-blocking init");
  ncclResult_t state = ncclInProgress;
  for (int i = 0; i < 10 && state == ncclInProgress; ++i) ncclCommGetAsyncError(comm, &state);
  EXPECT(state == ncclSuccess, "init completes");
  float send[4] = {1, 2, 3, 4}, recv[4] = {};
  EXPECT(ncclGroupStart() == ncclSuccess, "GroupStart");
  EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comm, streamA()) == ncclSuccess, "queued");
  ncclResult_t end = ncclGroupEnd();
  EXPECT(end == ncclInProgress || end == ncclSuccess, "GroupEnd %d", end);
  state = ncclInProgress;
  for (int i = 0; i < 10 && state == ncclInProgress; ++i) ncclCommGetAsyncError(comm, &state);
  EXPECT(state == ncclSuccess, "group completes");
  ncclComm_t child = nullptr;
  ncclResult_t split = ncclCommSplit(comm, 0, 0, &child, nullptr);
  EXPECT(split == ncclInProgress || split == ncclSuccess, "non-blocking split %d", split);
  state = ncclInProgress;
  for (int i = 0; i < 10 && state == ncclInProgress; ++i) ncclCommGetAsyncError(child, &state);
  EXPECT(state == ncclSuccess, "split completes");
  EXPECT(ranklensFlush() == ncclSuccess, "flush");
}

void missingSymbol() {
  int version = 0;
  EXPECT(ncclGetVersion(&version) == ncclSuccess && version == 22304, "version %d", version);
  ncclComm_t comms[2] = {};
  EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "InitAll");
  ncclComm_t child = nullptr;
  int exclude = 1;
  EXPECT(ncclCommShrink(comms[0], &exclude, 1, &child, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidUsage, "Shrink");
  const std::string last = ncclGetLastError(nullptr);
  EXPECT(last.find("ncclCommShrink") != std::string::npos && last.find("22304") != std::string::npos &&
             last.find(getenv("RANKLENS_REAL_NCCL")) != std::string::npos,
         "last error '%s' names the function, the version and the path", last.c_str());
}

void noRealNccl() {
  ncclComm_t comms[1] = {};
  ncclResult_t r = ncclCommInitAll(comms, 1, nullptr);
  EXPECT(r == ncclSystemError, "InitAll without a real NCCL: %d", r);
  const std::string last = ncclGetLastError(nullptr);
  EXPECT(last.find("RANKLENS_REAL_NCCL") != std::string::npos, "last error '%s' names the fix", last.c_str());
  printf("%s\n", last.c_str());
}

void discover() {
  int version = 0;
  ncclGetVersion(&version);
  printf("version %d\n", version);
}

}  // namespace

// A stage marker opens the trace before any communicator exists (FSDP2 creates its communicator lazily, inside the
// first step); the trace must still get record mode's writer settings and the real library's identity.
void stageFirst() {
  EXPECT(ranklensMarkStage("step", 0) == ncclSuccess, "MarkStage");
  ncclComm_t comms[2] = {};
  EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "InitAll");
  std::vector<float> big(1 << 20, 1.0f);
  for (int i = 0; i < 24; ++i)
    EXPECT(ncclAllReduce(big.data(), big.data(), big.size(), ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess,
           "AllReduce %d", i);
  EXPECT(ranklensFlush() == ncclSuccess, "flush");
}

// RANKLENS_TRACE_DIR already holds this rank's trace: every communicator is refused before the real NCCL creates it.
void unwritableTrace() {
  ncclComm_t comms[2] = {};
  const ncclResult_t all = ncclCommInitAll(comms, 2, nullptr);
  EXPECT(all == ncclInvalidUsage, "InitAll returned %d", static_cast<int>(all));
  printf("last error: %s\n", ncclGetLastError(nullptr));
  ncclUniqueId id;
  EXPECT(ncclGetUniqueId(&id) == ncclSuccess, "GetUniqueId");
  ncclComm_t one = nullptr;
  const ncclResult_t rank = ncclCommInitRank(&one, 1, id, 0);
  EXPECT(rank == ncclInvalidUsage, "InitRank returned %d", static_cast<int>(rank));
}

// Steps 0-2, each an AllReduce and a Send/Recv group on comm 0; step 3's marker comes inside step 2's group (after
// its Send), and step 3 is one more AllReduce. Every result is checked.
void steps() {
  ncclComm_t comms[2] = {};
  EXPECT(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess, "InitAll");
  for (int step = 0; step < 3; ++step) {
    EXPECT(ranklensMarkStage("step", step) == ncclSuccess, "stage %d", step);
    float send[4] = {1, 2, 3, 4}, recv[4] = {};
    EXPECT(ncclAllReduce(send, recv, 4, ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess, "AllReduce");
    EXPECT(recv[3] == 8, "AllReduce result %g in step %d", recv[3], step);
    std::vector<unsigned char> in(64, 0), out(64, 7);
    EXPECT(ncclGroupStart() == ncclSuccess, "GroupStart");
    EXPECT(ncclSend(out.data(), 64, ncclUint8, 1, comms[0], streamB()) == ncclSuccess, "Send");
    if (step == 2) EXPECT(ranklensMarkStage("step", 3) == ncclSuccess, "stage 3 inside a group");
    EXPECT(ncclRecv(in.data(), 64, ncclUint8, 1, comms[0], streamB()) == ncclSuccess, "Recv");
    EXPECT(ncclGroupEnd() == ncclSuccess, "GroupEnd");
    EXPECT(in[0] == 2, "Recv result %d in step %d", in[0], step);
  }
  float x[4] = {1, 1, 1, 1};
  EXPECT(ncclAllReduce(x, x, 4, ncclFloat32, ncclSum, comms[0], streamA()) == ncclSuccess && x[0] == 2,
         "AllReduce in step 3");
  EXPECT(ranklensFlush() == ncclSuccess, "flush");
}

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (scenario == "forward")
    forward();
  else if (scenario == "capture")
    capture();
  else if (scenario == "nonblocking")
    nonblocking();
  else if (scenario == "missing-symbol")
    missingSymbol();
  else if (scenario == "no-real-nccl")
    noRealNccl();
  else if (scenario == "discover")
    discover();
  else if (scenario == "stage-first")
    stageFirst();
  else if (scenario == "steps")
    steps();
  else if (scenario == "unwritable-trace")
    unwritableTrace();
  else {
    fprintf(stderr,
            "usage: record_scenario forward|capture|nonblocking|missing-symbol|no-real-nccl|discover|"
            "stage-first|steps|unwritable-trace\n");
    return 2;
  }
  return failures == 0 ? 0 : 1;
}

// SPDX-License-Identifier: Apache-2.0
// RankLens's own host time per replayed call, without a GPU: the library's core in process on the host device
// (copies are memcpy, holds are accounted), replaying a recording it writes first -- rank 1 of 2, N small AllGathers
// (4 KiB received, as ZeRO-3's parameter all-gathers), each timed, each with its received payload when --payloads.
// Every call is timed on the host (steady_clock) and the median, p90 and mean are reported per fidelity; what is left
// beside the CUDA calls that a GPU replay adds (bench/results/frameworks/replay_call_host_time_zero3.txt) is this.
//
// --gap-us spins that long between calls, as the program's own work does (ZeRO-3: 40-80 us between its calls):
// back to back, the workers that decode payloads ahead cannot keep up and the calls wait for them.
//
//   replay_host_overhead [--calls 20000] [--fidelity timing] [--payloads] [--gap-us 0] [--json FILE]
// One fidelity per process: the library reads its settings once.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nccl_fake/core.h"
#include "nccl_fake/runtime.h"
#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace {

constexpr size_t kSendCount = 512;  // floats: 2 KiB sent, 4 KiB received from 2 ranks

bool writeRecording(const std::string& root, int calls, bool payloads, std::string* error) {
  if (system(("rm -rf '" + root + "'").c_str()) != 0) return false;
  ranklens::trace::Manifest m;
  m.mode = "record";
  m.rank = 1;
  m.world_size = 2;
  std::unique_ptr<ranklens::trace::TraceWriter> w;
  *error = ranklens::trace::TraceWriter::create(root + "/rank1", m, {}, &w).message();
  if (!w) return false;
  ranklens::events::CommInit world;
  world.nranks = 2;
  world.rank = 1;
  world.how = "init";
  w->append(ranklens::trace::RecordType::kCommInit, world);
  std::vector<float> received(2 * kSendCount, 0.5f);
  for (int i = 0; i < calls; ++i) {
    ranklens::events::Call c;
    c.seq = static_cast<uint64_t>(i);
    c.op = static_cast<int>(ranklens::events::Op::kAllGather);
    c.count = kSendCount;
    c.datatype = ncclFloat32;
    c.bytes = received.size() * sizeof(float);
    c.nranks = 2;
    c.rootOrPeer = -1;
    w->append(ranklens::trace::RecordType::kCall, c);
    ranklens::trace::Timing t = ranklens::trace::timingOf(c);
    t.durationNs = 20'000;
    w->append(ranklens::trace::RecordType::kTiming, t);
    if (payloads) {
      ranklens::trace::PayloadRef ref;
      ref.seq = c.seq;
      ref.op = c.op;
      ref.datatype = c.datatype;
      ref.count = received.size();
      received[0] = static_cast<float>(i);
      if (!w->appendPayload(ref, received.data(), c.bytes, ranklens::trace::BackPressure::kWait)) {
        *error = "payload not written";
        return false;
      }
    }
  }
  return w->close().isOk();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"RankLens's host time per replayed call on the host device (no GPU)"};
  int calls = 20000;
  std::string fidelity = "timing", json;
  bool payloads = false;
  double gapUs = 0;
  app.add_option("--calls", calls, "AllGathers replayed")->check(CLI::Range(100, 10'000'000));
  app.add_option("--fidelity", fidelity, "structure, timing or value")
      ->check(CLI::IsMember({"structure", "timing", "value"}));
  app.add_flag("--payloads", payloads,
               "record every call's received bytes (restored at timing: 4 KiB is a control "
               "payload; and at value)");
  app.add_option("--gap-us", gapUs, "the program's own time between calls (spun)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--json", json, "also write the result here");
  CLI11_PARSE(app, argc, argv);

  const std::string root = "/tmp/replay_host_overhead-" + std::to_string(getpid());
  std::string error;
  if (!writeRecording(root, calls, payloads, &error)) {
    fprintf(stderr, "replay_host_overhead: writing the recording failed: %s\n", error.c_str());
    return 1;
  }
  setenv("RANKLENS_MODE", "replay", 1);
  setenv("RANKLENS_DEVICE", "host", 1);
  setenv("RANKLENS_FIDELITY", fidelity.c_str(), 1);
  if (fidelity != "structure") setenv("RANKLENS_REPLAY_TRACE", root.c_str(), 1);
  setenv("RANKLENS_TRACE_DIR", (root + "-replayed").c_str(), 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  // The library closes and checks its own event log at exit, after main returns: the directories go after that
  // (exit handlers run in reverse order of registration, and this one is registered before the library's).
  static std::string cleanup;
  cleanup = "rm -rf '" + root + "' '" + root + "-replayed'";
  atexit([] { (void)!system(cleanup.c_str()); });
  if (nccl_fake::Runtime::get().ready("replay_host_overhead") != ncclSuccess) return 1;

  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (nccl_fake::impl::ncclGetUniqueId(&id) != ncclSuccess ||
      nccl_fake::impl::ncclCommInitRank(&comm, 2, id, 1) != ncclSuccess) {
    fprintf(stderr, "replay_host_overhead: communicator creation failed\n");
    return 1;
  }
  std::vector<float> send(kSendCount, 1.0f), recv(2 * kSendCount);
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5});
  std::vector<double> ns;
  ns.reserve(static_cast<size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const ncclResult_t r =
        nccl_fake::impl::ncclAllGather(send.data(), recv.data(), kSendCount, ncclFloat32, comm, stream);
    const auto t1 = std::chrono::steady_clock::now();
    if (r != ncclSuccess) {
      fprintf(stderr, "replay_host_overhead: call %d failed: %s\n", i, nccl_fake::impl::ncclGetLastError(comm));
      return 1;
    }
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    while (std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count() < gapUs) {
    }
  }
  nccl_fake::impl::ncclCommDestroy(comm);
  ns.erase(ns.begin(), ns.begin() + static_cast<long>(ns.size() / 10));  // warm-up
  std::vector<double> sorted = ns;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], p90 = sorted[sorted.size() * 9 / 10];
  double mean = 0;
  for (double v : ns) mean += v / static_cast<double>(ns.size());
  printf(
      "%s fidelity%s, %.0f us between calls: %d AllGathers (4 KiB received), after the first tenth: median %.0f ns, "
      "p90 %.0f ns, mean %.0f ns per call\n",
      fidelity.c_str(), payloads ? ", payloads recorded" : "", gapUs, calls, median, p90, mean);
  if (!json.empty()) {
    std::ofstream out(json);
    out << "{\"fidelity\": \"" << fidelity << "\", \"payloads\": " << (payloads ? "true" : "false")
        << ", \"gap_us\": " << gapUs << ", \"calls\": " << calls << ", \"median_ns\": " << median
        << ", \"p90_ns\": " << p90 << ", \"mean_ns\": " << mean << "}\n";
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// Host time the recorder adds to one NCCL call, measured side by side in one process on one or two GPUs.
//
// The real libnccl.so.2 and RankLens's (in record mode, forwarding to that same real library) are both loaded.
// A communicator of 1 rank (or 2 ranks on 2 GPUs, --ranks 2: every call launches NCCL's kernel) is created through
// RankLens, so it is registered and recorded; since record mode hands the job the real NCCL's own handles, the same
// communicators can also be used through the real library directly. With --ranks 2 one thread drives both GPUs,
// so (as NCCL requires of a thread that drives several devices) each side's two calls form a group, ncclGroupStart,
// rank 0's and rank 1's ncclAllReduce, ncclGroupEnd, and a "call" costs half of that group's host time. Calls
// then alternate, A B A B ..., between ncclAllReduce through RankLens and through the real NCCL, each timed on the
// host with steady_clock (no GPU synchronisation inside a batch; the stream is synchronised between batches, outside
// the timed region). The difference of the medians is the recorder's added host time per call.
//
// --clock kernel takes durations from NCCL's kernel timestamps (RANKLENS_TIMING_CLOCK): NCCL then reports to its
// profiler plugin for every call, through RankLens or not, so the real side pays that too; compare its real median
// with an events run's to see NCCL's own share. A 1-rank communicator launches no kernel and keeps events.
//
// --probe adds two sides that wrap the real NCCL call in what the recorder must do on the GPU, without RankLens:
// a capture query and two event records through the CUDA runtime, and the same through the driver's entry points
// (cuStreamIsCapturing, cuEventRecord). --poller adds a thread that queries those sides' events every 100 us as the
// recorder's background thread once did (one query of the end event, two elapsed times). Together they split the added
// time into CUDA's floor, the background thread's contention and RankLens's own work.
//
// --gpu-bound BYTES measures GPU time instead: every call follows a cudaMemsetAsync of BYTES on its stream (the
// job's compute, long enough that the GPU, not the host, sets the pace), and blocks of --batch such pairs alternate
// between the two sides, each block timed by two events around it. The difference of the sides' median time per pair
// is what the recorder adds on the GPU (its events and payload copies in the stream), beside the host time above.
//
// --contended SHAPE measures GPU time per call too, on a stream held by a gate (cuStreamWaitValue32) until each block
// of --batch calls is enqueued, so that the host's pace does not count, while a thread keeps another stream full of
// kernels whose blocks spin --busy-ns ns on every SM (SHAPE threads: every thread slot taken; shared: one block per
// SM held by its shared memory, room beside it; none: no other stream). A 1-rank all-reduce launches nothing, so the
// real side is the floor and RankLens's side is its events and payload copies: how long the recorder's copy kernel
// waits for an SM when the job's compute fills the GPU (RANKLENS_PAYLOAD_COPY_PRIORITY,
// RANKLENS_PAYLOAD_COPY_KERNEL_BYTES choose how it copies; RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK follows the
// latter unless set, so that these 1-rank calls copy as calls of several ranks do). --nccl-like-ns NS puts a
// one-block kernel of NS ns on the call's stream before each call of both sides, as NCCL's kernel would be for a call
// of several ranks: it waits for an SM first, and the copy kernel after it may take the slot it frees.
//
// --device host runs without a GPU (RANKLENS_DEVICE=host, host buffers, no CUDA calls): with the fake real NCCL of
// tests/support as --real it measures RankLens's own bookkeeping per call, without CUDA events or NCCL's work.
//
//   record_host_overhead --real /path/libnccl.so.2 --ranklens build/release/nccl_fake/libnccl.so.2
//       [--calls 20000] [--batch 200] [--count 1] [--ranks 1|2] [--clock events|kernel] [--device cuda|host]
//       [--payloads none|small|all] [--trace-dir DIR] [--probe [--poller]] [--gpu-bound BYTES]
//       [--contended none|threads|shared [--busy-ns NS] [--nccl-like-ns NS]] [--json]
#include <cuda.h>  // driver types only: the entry points come from cudaGetDriverEntryPointByVersion
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "busy_sms.h"

namespace {

using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using InitAllFn = ncclResult_t (*)(ncclComm_t*, int, const int*);
using DestroyFn = ncclResult_t (*)(ncclComm_t);
using FlushFn = ncclResult_t (*)();
using GroupFn = ncclResult_t (*)();

void* open(const std::string& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    fprintf(stderr, "record_host_overhead: cannot open %s: %s\n", path.c_str(), dlerror());
    exit(2);
  }
  return h;
}

template <typename Fn>
Fn symbol(void* handle, const char* name, const std::string& path) {
  auto fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (fn == nullptr) {
    fprintf(stderr, "record_host_overhead: %s has no %s\n", path.c_str(), name);
    exit(2);
  }
  return fn;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    fprintf(stderr, "record_host_overhead: %s: %s\n", what, cudaGetErrorString(err));
    exit(2);
  }
}

template <typename Fn>
Fn driverEntry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  check(cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found), name);
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    fprintf(stderr, "record_host_overhead: the driver has no %s\n", name);
    exit(2);
  }
  return reinterpret_cast<Fn>(fn);
}

// What the recorder does around one call on the GPU, without RankLens: events taken round-robin from a ring large
// enough that the poller never sees one re-recorded within a pass.
struct EventRing {
  static constexpr size_t kSize = 4096;
  std::vector<cudaEvent_t> events;
  std::atomic<uint64_t> recorded{0};  // pairs recorded so far
  void create() {
    events.resize(kSize);
    for (auto& e : events) check(cudaEventCreate(&e), "cudaEventCreate");
  }
  cudaEvent_t start(uint64_t pair) const { return events[(2 * pair) % kSize]; }
  cudaEvent_t end(uint64_t pair) const { return events[(2 * pair + 1) % kSize]; }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Host time RankLens's recorder adds to one NCCL call (one GPU, real NCCL side by side)."};
  std::string realPath, ranklensPath, payloads = "none", traceDir = "/tmp/ranklens-host-overhead";
  std::string clock = "events", device = "cuda";
  int calls = 20000, batch = 200, ranks = 1;
  size_t count = 1;
  bool json = false, probe = false, poller = false;
  app.add_option("--real", realPath, "the real libnccl.so.2")->required();
  app.add_option("--ranklens", ranklensPath, "RankLens's libnccl.so.2")->required();
  app.add_option("--calls", calls, "calls per side")->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "calls per side between stream synchronisations")->check(CLI::PositiveNumber);
  app.add_option("--count", count, "float32 elements per all-reduce")->check(CLI::PositiveNumber);
  std::string data = "zeros";
  app.add_option("--data", data,
                 "--device host: what the buffers hold: zeros; gradients (normally distributed fp32: zstd cannot "
                 "shrink them, so --payloads all writes every byte); or bf16-gradients (the same rounded to bf16 "
                 "values, their low 16 bits zero, as a bf16-autocast job's fp32 gradients are, e.g. GPT-2 small's)")
      ->check(CLI::IsMember({"zeros", "gradients", "bf16-gradients"}));
  app.add_option("--ranks", ranks, "ranks of the communicator, one GPU each")->check(CLI::Range(1, 2));
  app.add_option("--clock", clock, "RANKLENS_TIMING_CLOCK for the recorder")
      ->check(CLI::IsMember({"events", "kernel"}));
  app.add_option("--device", device, "cuda (the GPU) or host (no GPU: host buffers, RankLens's host record device)")
      ->check(CLI::IsMember({"cuda", "host"}));
  app.add_option("--payloads", payloads, "RANKLENS_PAYLOADS for the recorder")
      ->check(CLI::IsMember({"none", "small", "all"}));
  app.add_option("--trace-dir", traceDir, "where the recorder writes its trace (must not exist)");
  app.add_flag("--probe", probe,
               "also time the real call wrapped in a capture query and two event records, through the CUDA runtime "
               "and through the driver's entry points (one GPU)");
  app.add_flag("--poller", poller,
               "with --probe: a thread queries the probe sides' events every 100 us, as the "
               "recorder's background thread does")
      ->needs("--probe");
  size_t gpuBoundBytes = 0;
  app.add_option("--gpu-bound", gpuBoundBytes,
                 "measure GPU time per call instead: each call follows a memset of this many bytes on its stream, in "
                 "blocks of --batch per side (one GPU)")
      ->excludes("--probe");
  std::string contended;
  unsigned long long busyNs = 20000;
  app.add_option("--contended", contended,
                 "measure GPU time per call on a gated stream while another stream keeps the SMs busy: threads "
                 "(every thread slot), shared (one block per SM by shared memory), none (no other stream)")
      ->check(CLI::IsMember({"none", "threads", "shared"}))
      ->excludes("--probe")
      ->excludes("--gpu-bound");
  app.add_option("--busy-ns", busyNs, "with --contended: how long each busy block spins (ns)")
      ->check(CLI::Range(1000ull, 100000000ull));
  unsigned long long ncclLikeNs = 0;
  app.add_option("--nccl-like-ns", ncclLikeNs,
                 "with --contended: a one-block kernel of this many ns before each call, standing in for NCCL's "
                 "kernel (a 1-rank call launches none)")
      ->needs("--contended");
  app.add_flag("--json", json, "print one JSON object instead of text");
  CLI11_PARSE(app, argc, argv);

  setenv("RANKLENS_MODE", "record", 1);
  setenv("RANKLENS_REAL_NCCL", realPath.c_str(), 1);
  setenv("RANKLENS_PAYLOADS", payloads.c_str(), 1);
  setenv("RANKLENS_TRACE_DIR", traceDir.c_str(), 1);
  setenv("RANKLENS_TIMING_CLOCK", clock.c_str(), 1);
  setenv("RANKLENS_DEVICE", device.c_str(), 1);
  // The calls here are on 1-rank communicators, standing for any call: their payloads are copied as those of calls
  // of several ranks are (as before payload_copy_kernel_bytes_one_rank existed), unless the environment says how.
  const char* kernelBytesEnv = getenv("RANKLENS_PAYLOAD_COPY_KERNEL_BYTES");
  setenv("RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK", kernelBytesEnv ? kernelBytesEnv : "64KiB", 0);
  const bool cuda = device == "cuda";
  if ((gpuBoundBytes > 0 || !contended.empty()) && (!cuda || ranks != 1)) {
    fprintf(stderr, "record_host_overhead: --gpu-bound and --contended need --device cuda and --ranks 1\n");
    return 2;
  }
  if (probe && (!cuda || ranks != 1)) {
    fprintf(stderr, "record_host_overhead: --probe needs --device cuda and --ranks 1\n");
    return 2;
  }

  void* real = open(realPath);
  void* ours = open(ranklensPath);
  auto realAllReduce = symbol<AllReduceFn>(real, "ncclAllReduce", realPath);
  auto oursAllReduce = symbol<AllReduceFn>(ours, "ncclAllReduce", ranklensPath);
  auto oursInitAll = symbol<InitAllFn>(ours, "ncclCommInitAll", ranklensPath);
  auto oursDestroy = symbol<DestroyFn>(ours, "ncclCommDestroy", ranklensPath);
  auto oursFlush = symbol<FlushFn>(ours, "ranklensFlush", ranklensPath);
  GroupFn groupStart[2] = {symbol<GroupFn>(real, "ncclGroupStart", realPath),
                           symbol<GroupFn>(ours, "ncclGroupStart", ranklensPath)};
  GroupFn groupEnd[2] = {symbol<GroupFn>(real, "ncclGroupEnd", realPath),
                         symbol<GroupFn>(ours, "ncclGroupEnd", ranklensPath)};

  cudaStream_t streams[2] = {};
  float* buffers[2] = {};
  int devices[2] = {0, 1};
  for (int r = 0; r < ranks; ++r) {
    if (!cuda) {
      buffers[r] = static_cast<float*>(calloc(count, sizeof(float)));
      if (data != "zeros" && buffers[r] != nullptr) {
        std::mt19937 random(1 + r);
        std::normal_distribution<float> gradient(0.0f, 1e-3f);
        const uint32_t keep = data == "bf16-gradients" ? 0xffff0000u : 0xffffffffu;
        for (size_t i = 0; i < count; ++i) {
          const float value = gradient(random);
          uint32_t bits;
          memcpy(&bits, &value, 4);
          bits &= keep;
          memcpy(&buffers[r][i], &bits, 4);
        }
      }
      continue;
    }
    check(cudaSetDevice(r), "cudaSetDevice");
    check(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking), "cudaStreamCreate");
    check(cudaMalloc(&buffers[r], count * sizeof(float)), "cudaMalloc");
    check(cudaMemset(buffers[r], 0, count * sizeof(float)), "cudaMemset");
  }
  if (cuda) check(cudaSetDevice(0), "cudaSetDevice");
  ncclComm_t comms[2] = {};
  if (oursInitAll(comms, ranks, devices) != ncclSuccess) {
    fprintf(stderr, "record_host_overhead: ncclCommInitAll of %d rank(s) through RankLens failed\n", ranks);
    return 2;
  }
  auto synchronize = [&] {
    for (int r = 0; r < ranks && cuda; ++r) check(cudaStreamSynchronize(streams[r]), "cudaStreamSynchronize");
  };

  // Sides: 0 the real NCCL, 1 RankLens, 2 and 3 (--probe) the real NCCL inside the recorder's CUDA work, through
  // the runtime and through the driver.
  const int sides = probe ? 4 : 2;
  std::vector<double> samples[4];
  for (auto& v : samples) v.reserve(calls);
  using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  using EventRecordFn = CUresult (*)(CUevent, CUstream);
  IsCapturingFn cuIsCapturing = nullptr;
  EventRecordFn cuRecord = nullptr;
  EventRing rings[2];  // sides 2 and 3
  if (probe) {
    cuIsCapturing = driverEntry<IsCapturingFn>("cuStreamIsCapturing");
    cuRecord = driverEntry<EventRecordFn>("cuEventRecord");
    for (auto& ring : rings) ring.create();
  }
  auto realCall = [&](int r) {
    return realAllReduce(buffers[r], buffers[r], count, ncclFloat32, ncclSum, comms[r], streams[r]) == ncclSuccess;
  };
  // One side's share of a step: a call of every rank (grouped when there are several); false on failure.
  auto side = [&](int which) {
    if (which >= 2) {  // --probe: one rank
      EventRing& ring = rings[which - 2];
      const uint64_t pair = ring.recorded.load(std::memory_order_relaxed);
      bool ok;
      if (which == 2) {
        cudaStreamCaptureStatus status;
        ok = cudaStreamIsCapturing(streams[0], &status) == cudaSuccess &&
             cudaEventRecord(ring.start(pair), streams[0]) == cudaSuccess && realCall(0) &&
             cudaEventRecord(ring.end(pair), streams[0]) == cudaSuccess;
      } else {
        CUstreamCaptureStatus status;
        ok = cuIsCapturing(streams[0], &status) == CUDA_SUCCESS &&
             cuRecord(ring.start(pair), streams[0]) == CUDA_SUCCESS && realCall(0) &&
             cuRecord(ring.end(pair), streams[0]) == CUDA_SUCCESS;
      }
      ring.recorded.store(pair + 1, std::memory_order_release);
      return ok;
    }
    const bool useOurs = which == 1;
    const bool grouped = ranks > 1;
    if (grouped && groupStart[useOurs]() != ncclSuccess) return false;
    for (int r = 0; r < ranks; ++r)
      if (!(useOurs ? oursAllReduce(buffers[r], buffers[r], count, ncclFloat32, ncclSum, comms[r], streams[r]) ==
                          ncclSuccess
                    : realCall(r)))
        return false;
    return !grouped || groupEnd[useOurs]() == ncclSuccess;
  };
  std::atomic<bool> stopPoller{false};
  std::thread pollerThread;
  if (poller) {
    pollerThread = std::thread([&] {
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      cudaThreadExchangeStreamCaptureMode(&mode);
      uint64_t seen[2] = {0, 0};
      while (!stopPoller.load(std::memory_order_relaxed)) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        for (int k = 0; k < 2; ++k) {
          const uint64_t upTo = rings[k].recorded.load(std::memory_order_acquire);
          for (; seen[k] < upTo; ++seen[k]) {
            if (cudaEventQuery(rings[k].end(seen[k])) != cudaSuccess) break;  // later pairs are later on the stream
            float ms;
            cudaEventElapsedTime(&ms, rings[k].start(seen[k]), rings[k].end(seen[k]));
            if (seen[k] > 0) cudaEventElapsedTime(&ms, rings[k].end(seen[k] - 1), rings[k].start(seen[k]));
          }
          cudaGetLastError();
        }
      }
    });
  }
  // Warm-up: event pools, lazy module loading, the trace writer.
  for (int i = 0; i < 2 * batch; ++i) {
    for (int which = 0; which < sides; ++which) {
      if (!side(which)) {
        fprintf(stderr, "record_host_overhead: warm-up ncclAllReduce failed\n");
        return 2;
      }
    }
  }
  synchronize();
  if (gpuBoundBytes > 0 || !contended.empty()) {
    void* filler = nullptr;
    if (gpuBoundBytes > 0) check(cudaMalloc(&filler, gpuBoundBytes), "cudaMalloc (filler)");
    // --contended: the gate the stream waits at until a block is enqueued, and the busy stream's feeder.
    using WaitValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    WaitValueFn waitValue = nullptr;
    volatile uint32_t* gate = nullptr;
    void* gateOnGpu = nullptr;
    uint32_t gateValue = 0;
    std::atomic<bool> stopBusy{false};
    std::thread busyThread;
    BusySms busy;
    if (!contended.empty()) {
      check(loadSpin(), "loading the spinning kernel");
      waitValue = driverEntry<WaitValueFn>("cuStreamWaitValue32");
      void* gateHost = nullptr;
      check(cudaHostAlloc(&gateHost, sizeof(uint32_t), cudaHostAllocMapped), "cudaHostAlloc (gate)");
      check(cudaHostGetDevicePointer(&gateOnGpu, gateHost, 0), "cudaHostGetDevicePointer (gate)");
      gate = static_cast<volatile uint32_t*>(gateHost);
      *gate = 0;
      if (contended != "none") {
        check(busy.init(contended == "threads" ? BusySms::Shape::kThreads : BusySms::Shape::kShared, busyNs, 4),
              "busy kernel");
        busyThread = std::thread([&] {
          cudaStream_t busyStream;
          check(cudaStreamCreateWithFlags(&busyStream, cudaStreamNonBlocking), "cudaStreamCreate (busy)");
          constexpr int kAhead = 3;  // kernels queued ahead, so that the SMs never drain between them
          cudaEvent_t queued[kAhead];
          for (auto& e : queued) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
          for (uint64_t k = 0; !stopBusy.load(std::memory_order_relaxed); ++k) {
            if (k >= kAhead) check(cudaEventSynchronize(queued[k % kAhead]), "cudaEventSynchronize (busy)");
            check(busy.launch(busyStream), "busy kernel launch");
            check(cudaEventRecord(queued[k % kAhead], busyStream), "cudaEventRecord (busy)");
          }
          check(cudaStreamSynchronize(busyStream), "cudaStreamSynchronize (busy)");
        });
      }
    }
    // Before any return: a thread left running (not joined) would end the program with std::terminate.
    auto stopBusyThread = [&] {
      stopBusy = true;
      if (busyThread.joinable()) busyThread.join();
    };
    cudaEvent_t blockStart, blockEnd;
    check(cudaEventCreate(&blockStart), "cudaEventCreate");
    check(cudaEventCreate(&blockEnd), "cudaEventCreate");
    std::vector<double> perPair[2];
    for (int block = 0; block < 2 * (calls / batch + 1); ++block) {
      for (int k = 0; k < 2; ++k) {
        const int which = (k + block) % 2;  // alternate which side goes first
        if (waitValue != nullptr && waitValue(streams[0], reinterpret_cast<CUdeviceptr>(gateOnGpu), ++gateValue,
                                              CU_STREAM_WAIT_VALUE_GEQ) != CUDA_SUCCESS) {
          fprintf(stderr, "record_host_overhead: cuStreamWaitValue32 failed\n");
          stopBusyThread();
          return 2;
        }
        check(cudaEventRecord(blockStart, streams[0]), "cudaEventRecord");
        for (int i = 0; i < batch; ++i) {
          if (filler != nullptr)
            check(cudaMemsetAsync(filler, i & 0xff, gpuBoundBytes, streams[0]), "cudaMemsetAsync (filler)");
          if (ncclLikeNs > 0) check(launchSpin(streams[0], ncclLikeNs, 512), "NCCL-like kernel");
          if (!side(which)) {
            fprintf(stderr, "record_host_overhead: ncclAllReduce failed\n");
            stopBusyThread();
            return 2;
          }
        }
        check(cudaEventRecord(blockEnd, streams[0]), "cudaEventRecord");
        if (gate != nullptr) __atomic_store_n(gate, gateValue, __ATOMIC_RELEASE);
        check(cudaEventSynchronize(blockEnd), "cudaEventSynchronize");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, blockStart, blockEnd), "cudaEventElapsedTime");
        if (block >= 2) perPair[which].push_back(ms * 1e6 / batch);  // the first blocks warm up
      }
    }
    stopBusyThread();
    oursFlush();
    oursDestroy(comms[0]);
    const double real = percentile(perPair[0], 0.5), ours = percentile(perPair[1], 0.5);
    const char* priority = getenv("RANKLENS_PAYLOAD_COPY_PRIORITY");
    const char* kernelBytes = getenv("RANKLENS_PAYLOAD_COPY_KERNEL_BYTES");
    const char* kernelBytesOneRank = getenv("RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK");
    if (json)
      printf(
          "{\"device\": \"cuda\", \"payloads\": \"%s\", \"clock\": \"%s\", \"gpu_bound_bytes\": %zu, "
          "\"contended\": \"%s\", \"busy_ns\": %llu, \"busy_blocks_per_sm\": %d, \"nccl_like_ns\": %llu, "
          "\"count\": %zu, "
          "\"payload_copy_priority\": \"%s\", \"payload_copy_kernel_bytes\": \"%s\", "
          "\"payload_copy_kernel_bytes_one_rank\": \"%s\", "
          "\"blocks_per_side\": %zu, \"batch\": %d, \"gpu_ns_per_call_real\": %.1f, "
          "\"gpu_ns_per_call_ranklens\": %.1f, \"gpu_added_ns\": %.1f}\n",
          payloads.c_str(), clock.c_str(), gpuBoundBytes, contended.c_str(), contended.empty() ? 0ull : busyNs,
          busy.blocksPerSm(), ncclLikeNs, count, priority ? priority : "", kernelBytes ? kernelBytes : "",
          kernelBytesOneRank ? kernelBytesOneRank : "", perPair[0].size(), batch, real, ours, ours - real);
    else
      printf(
          "GPU time per %scall (%s), payloads %s: real NCCL %.1f ns, through RankLens %.1f ns, added %.1f ns "
          "(%zu blocks of %d per side)\n",
          filler != nullptr ? "memset + " : "",
          contended.empty() ? "GPU-bound" : ("gated, busy SMs: " + contended).c_str(), payloads.c_str(), real, ours,
          ours - real, perPair[0].size(), batch);
    return 0;
  }
  using Clock = std::chrono::steady_clock;
  for (int done = 0; done < calls; done += batch) {
    for (int i = 0; i < batch; ++i) {
      for (int k = 0; k < sides; ++k) {
        const int which = (k + i) % sides;  // rotate which side goes first
        auto t0 = Clock::now();
        const bool ok = side(which);
        auto t1 = Clock::now();
        if (!ok) {
          fprintf(stderr, "record_host_overhead: ncclAllReduce failed\n");
          return 2;
        }
        samples[which].push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / ranks);
      }
    }
    synchronize();
  }
  if (poller) {
    stopPoller = true;
    pollerThread.join();
  }
  const std::vector<double>& tReal = samples[0];
  const std::vector<double>& tOurs = samples[1];
  // How long the recorder then takes to get what it still holds (staged or queued payloads) into the trace files.
  const auto flushStart = Clock::now();
  oursFlush();
  const double flushMs = std::chrono::duration<double, std::milli>(Clock::now() - flushStart).count();
  for (int r = 0; r < ranks; ++r) oursDestroy(comms[r]);

  // What bounds the recorder's cost: the CUDA calls it must make per call (two event records, one capture query),
  // timed alone with this program's own CUDA runtime.
  std::vector<double> tRecord, tCapturing;
  cudaStream_t stream = streams[0];
  cudaEvent_t event = nullptr;
  if (cuda) check(cudaEventCreate(&event), "cudaEventCreate");
  for (int i = 0; i < calls && cuda; ++i) {
    auto t0 = Clock::now();
    cudaEventRecord(event, stream);
    auto t1 = Clock::now();
    cudaStreamCaptureStatus status;
    cudaStreamIsCapturing(stream, &status);
    auto t2 = Clock::now();
    tRecord.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
    tCapturing.push_back(std::chrono::duration<double, std::nano>(t2 - t1).count());
    if (i % batch == batch - 1) check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  const double medRecord = percentile(tRecord, 0.5), medCapturing = percentile(tCapturing, 0.5);

  const double medReal = percentile(tReal, 0.5), medOurs = percentile(tOurs, 0.5);
  const double p90Real = percentile(tReal, 0.9), p90Ours = percentile(tOurs, 0.9);
  // --probe: the real call inside the recorder's CUDA work alone, added over the real call's median.
  const double addedRuntime = probe ? percentile(samples[2], 0.5) - medReal : 0;
  const double addedDriver = probe ? percentile(samples[3], 0.5) - medReal : 0;
  char probeJson[256] = "";
  if (probe)
    snprintf(probeJson, sizeof(probeJson),
             ", \"probe_poller\": %s, \"added_median_ns_runtime_events\": %.1f, "
             "\"added_median_ns_driver_events\": %.1f",
             poller ? "true" : "false", addedRuntime, addedDriver);
  if (json) {
    printf(
        "{\"device\": \"%s\", \"payloads\": \"%s\", \"clock\": \"%s\", \"ranks\": %d, \"samples_per_side\": %zu, "
        "\"count\": %zu, "
        "\"median_ns_real\": %.1f, "
        "\"median_ns_ranklens\": %.1f, \"added_median_ns\": %.1f, \"p90_ns_real\": %.1f, \"p90_ns_ranklens\": %.1f, "
        "\"added_p90_ns\": %.1f, \"cuda_event_record_median_ns\": %.1f, "
        "\"cuda_stream_is_capturing_median_ns\": %.1f, \"data\": \"%s\", \"flush_ms\": %.1f%s}\n",
        device.c_str(), payloads.c_str(), clock.c_str(), ranks, tReal.size(), count, medReal, medOurs,
        medOurs - medReal, p90Real, p90Ours, p90Ours - p90Real, medRecord, medCapturing, data.c_str(), flushMs,
        probeJson);
  } else {
    printf("payloads %s, clock %s, %d rank(s), %zu calls per side, %zu float32 per all-reduce\n", payloads.c_str(),
           clock.c_str(), ranks, tReal.size(), count);
    printf("  real NCCL          median %8.1f ns   p90 %8.1f ns\n", medReal, p90Real);
    printf("  through RankLens   median %8.1f ns   p90 %8.1f ns\n", medOurs, p90Ours);
    printf("  added by recorder  median %8.1f ns   p90 %8.1f ns\n", medOurs - medReal, p90Ours - p90Real);
    printf("  then %.1f ms until the recorder's flush returned (payloads still staged or queued written out)\n",
           flushMs);
    if (cuda)
      printf("  floor: cudaEventRecord median %.1f ns (x2 per call), cudaStreamIsCapturing median %.1f ns\n", medRecord,
             medCapturing);
    if (probe) {
      printf(
          "  the real call in the recorder's CUDA work alone (%s): added median %.1f ns through the runtime, "
          "%.1f ns through the driver\n",
          poller ? "with a polling thread" : "no polling thread", addedRuntime, addedDriver);
    }
  }
  return 0;
}

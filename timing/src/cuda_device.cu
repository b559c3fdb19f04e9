// SPDX-License-Identifier: Apache-2.0
// CUDA implementation of the stream-side effects. Everything is enqueued on the caller's stream (capturable into
// CUDA graphs); nothing synchronises the calling thread.
#include <cuda_runtime.h>

#include <time.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_util.h"
#include "ranklens/device.h"
#include "reduce_copies.h"

// Hold kernels, one per operation so that profilers (torch.profiler, Nsight) show which call a hold stands for.
// One thread waits on the GPU's global nanosecond timer: a 1-CTA kernel lets concurrent streams overlap, unlike
// host callbacks, which the driver serialises on one thread (bench/hold_completion measures both).
__device__ __forceinline__ unsigned long long ranklensGlobalTimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Device memory a hold moves (hold_traffic): `vectors` 16-byte loads and stores from the first half of `scratch`
// to its second half (`halfVectors`, a power of two, per half), in the last `copyNs` of the hold.
struct HoldTraffic {
  uint4* scratch;
  unsigned long long halfVectors;
  unsigned long long vectors;
  unsigned long long copyNs;
};

using ranklens::device::PaceRequest;

// Small copies a call's one launch makes as it starts (its hold's, or its arrival mark's when it has no hold): a
// restored control payload or a clone fill of a few KiB, instead of a cudaMemcpyAsync of its own (CUDA calls are
// most of a replayed call's host time). Copied by one warp, in batches of loads and then of stores.
struct StartCopies {
  static constexpr int kMax = 4;
  static constexpr unsigned long long kMaxElements = 32 * 16;  // per copy: 16 per lane
  unsigned long long* stamp = nullptr;  // the arrival mark this launch stands for: given its start
  int count = 0;
  struct Copy {
    void* dst;
    const void* src;
    unsigned long long elements;
    int width;  // bytes per element: 1, 2, 4, 8 or 16, as dst, src and the size allow
  } copies[kMax] = {};
};

// Up to 64 bytes of loads per lane in flight, then their stores: few registers, so that the hold kernels that carry
// this (capped at 64 registers by their __launch_bounds__) spill little, and only in the copy.
template <typename T>
__device__ __forceinline__ void ranklensCopyBatch(void* dst, const void* src, unsigned long long elements) {
  constexpr int kBatch = sizeof(T) >= 8 ? static_cast<int>(64 / sizeof(T)) : 8;
  const unsigned n = static_cast<unsigned>(elements);  // at most StartCopies::kMaxElements
  const T* from = static_cast<const T*>(src) + (threadIdx.x & 31);
  T* to = static_cast<T*>(dst) + (threadIdx.x & 31);
  for (unsigned base = threadIdx.x & 31; base < n; base += 32 * kBatch, from += 32 * kBatch, to += 32 * kBatch) {
    T v[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (base + 32 * k < n) v[k] = from[32 * k];
#pragma unroll
    for (int k = 0; k < kBatch; ++k)
      if (base + 32 * k < n) to[32 * k] = v[k];
  }
}

// Run by the first warp of the first block, in order (a later copy may read what an earlier one wrote). Not inlined:
// its registers and spills stay out of the holds' wait loops.
__device__ __noinline__ void ranklensStartCopies(const StartCopies& c, unsigned long long start) {
  if (blockIdx.x != 0 || threadIdx.x >= 32) return;
  if (c.stamp != nullptr && threadIdx.x == 0) *c.stamp = start;
  for (int i = 0; i < c.count; ++i) {
    const auto& k = c.copies[i];  // read in place: the kernels take `c` as a __grid_constant__
    switch (k.width) {
      case 16:
        ranklensCopyBatch<uint4>(k.dst, k.src, k.elements);
        break;
      case 8:
        ranklensCopyBatch<unsigned long long>(k.dst, k.src, k.elements);
        break;
      case 4:
        ranklensCopyBatch<unsigned>(k.dst, k.src, k.elements);
        break;
      case 2:
        ranklensCopyBatch<unsigned short>(k.dst, k.src, k.elements);
        break;
      default:
        ranklensCopyBatch<unsigned char>(k.dst, k.src, k.elements);
        break;
    }
    __syncwarp();
  }
}

// A paced hold's end (pacedDeadline), read from its communicator's chain {end, index}.
__device__ __forceinline__ unsigned long long ranklensPacedEnd(unsigned long long start, unsigned long long ns,
                                                               const PaceRequest& pace) {
  const volatile unsigned long long* chain = reinterpret_cast<unsigned long long*>(pace.chain);
  const unsigned long long index = chain[1];
  __threadfence();  // the end was written before the index
  return ranklens::device::pacedDeadline(start, ns, chain[0], index, pace.index, pace.known, pace.peerGapNs,
                                         pace.lastNs);
}

// Holds until `ns` after `arrival` (the time the stream reached the hold, stamped by ranklens_HoldArrival), or
// after its own start when there is no stamp. A hold of many blocks may wait for SMs before it starts, as NCCL's
// kernels do; the recorded duration already contains that wait, so it is counted from the arrival, not twice.
// A paced hold (peer_pacing) ends where ranklensPacedEnd says instead, and block 0 writes that end to the
// communicator's chain for the next collective. One lane per warp waits, so that every warp of a block stays
// resident as long as the hold, like NCCL's.
__device__ __forceinline__ void ranklensHoldFor(unsigned long long ns, const unsigned long long* arrival,
                                                HoldTraffic traffic, const PaceRequest& pace,
                                                const StartCopies& copies) {
  const unsigned long long start = arrival != nullptr ? *arrival : ranklensGlobalTimer();
  ranklensStartCopies(copies, start);
  const unsigned long long end = pace.chain != 0 ? ranklensPacedEnd(start, ns, pace) : start + ns;
  ns = end > start ? end - start : 0;
  if (traffic.vectors > 0) {  // every thread waits for the copy's start, copies, and waits for the end
    const unsigned long long copyFrom = start + ns - min(ns, traffic.copyNs);
    while (ranklensGlobalTimer() < copyFrom) __nanosleep(1000);
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    const unsigned long long mask = traffic.halfVectors - 1;
    for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x;
         i < traffic.vectors; i += stride)
      traffic.scratch[traffic.halfVectors + (i & mask)] = traffic.scratch[i & mask];
  }
  if ((threadIdx.x & 31) != 0) return;
  while (ranklensGlobalTimer() - start < ns) __nanosleep(500);
  if (pace.chain != 0 && blockIdx.x == 0 && threadIdx.x == 0)
    ranklens::device::advanceChain(reinterpret_cast<unsigned long long*>(pace.chain), end, pace.index);
}

// One warp, no shared memory: starts as soon as the stream reaches it wherever an SM has a warp and a block's
// reserved shared memory to spare (beside nearly any kernel), stamps the time and makes the call's small copies.
extern "C" __global__ void ranklens_HoldArrival(const __grid_constant__ StartCopies copies) {
  ranklensStartCopies(copies, ranklensGlobalTimer());
}

#define RANKLENS_HOLD_KERNELS(X) \
  X(AllReduce)                   \
  X(Broadcast) X(Reduce) X(AllGather) X(ReduceScatter) X(AlltoAll) X(Gather) X(Scatter) X(Send) X(Recv) X(Group) X(Hold)
// __launch_bounds__(1024): the in-hold copies need registers; capped, an NCCL-shaped hold of up to 1024 threads per
// block still launches (at most 64 registers per thread).
#define RANKLENS_DEFINE_HOLD(name)                                                                                     \
  extern "C" __global__ void __launch_bounds__(1024)                                                                   \
      ranklens_##name(unsigned long long ns, const unsigned long long* arrival, HoldTraffic traffic, PaceRequest pace, \
                      const __grid_constant__ StartCopies copies) {                                                    \
    ranklensHoldFor(ns, arrival, traffic, pace, copies);                                                               \
  }
RANKLENS_HOLD_KERNELS(RANKLENS_DEFINE_HOLD)

template <typename T>
__global__ void ranklensFill(T* dst, size_t count, T value) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

// StreamDevice::reduceCopies, one kernel per datatype.
template <int kType>
__global__ void ranklensReduceCopies(void* dst, const void* src, size_t count, ranklens::device::Reduction r) {
  ranklens::device::reduce_copies::reduceRange<kType>(dst, src, count, r,
                                                      blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x,
                                                      static_cast<size_t>(gridDim.x) * blockDim.x);
}

namespace ranklens {
namespace device {
namespace {

using ReduceKernel = void (*)(void*, const void*, size_t, Reduction);
#define RANKLENS_CUDA_REDUCE(type) ranklensReduceCopies<type>,
constexpr ReduceKernel kReduceKernels[] = {RANKLENS_REDUCE_TYPES(RANKLENS_CUDA_REDUCE)};
static_assert(sizeof(kReduceKernels) / sizeof(kReduceKernels[0]) == kReductionTypes, "one kernel per datatype");

void setError(const std::string& text) { const_cast<std::string&>(lastError()) = text; }

int check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return 0;
  setError(std::string("cuda device: ") + what + ": " + cudaGetErrorString(err));
  return static_cast<int>(err);
}

using HoldKernel = void (*)(unsigned long long, const unsigned long long*, HoldTraffic, PaceRequest, StartCopies);

struct NamedHold {
  const char* name;
  HoldKernel kernel;
};
#define RANKLENS_HOLD_ENTRY(name) {#name, ranklens_##name},
constexpr NamedHold kHolds[] = {RANKLENS_HOLD_KERNELS(RANKLENS_HOLD_ENTRY)};

HoldKernel holdKernelFor(const char* label) {
  if (label != nullptr)
    for (const auto& h : kHolds)
      if (std::string(h.name) == label) return h.kernel;
  return ranklens_Hold;
}

// completion: host_callback. The duration travels in the user-data pointer (no allocation per hold). Spinning, not
// sleeping: a sleep overshoots by tens of microseconds; the cost is the driver's callback thread, which this holds.
void CUDART_CB holdOnHost(void* nanosecondsAsPointer) {
  const auto ns = static_cast<int64_t>(reinterpret_cast<uintptr_t>(nanosecondsAsPointer));
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  const int64_t until = t.tv_sec * 1000000000LL + t.tv_nsec + ns;
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while (t.tv_sec * 1000000000LL + t.tv_nsec < until);
}

int64_t median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// Grid-stride kernels over `count` elements (fills, reductions): 256 threads a block, at most 1024 blocks.
constexpr int kElementThreads = 256;
unsigned elementBlocks(size_t count) {
  return static_cast<unsigned>(std::min<size_t>((count + kElementThreads - 1) / kElementThreads, 1024));
}

template <typename T>
int launchFill(void* dst, size_t count, uint64_t pattern, cudaStream_t stream) {
  ranklensFill<T>
      <<<elementBlocks(count), kElementThreads, 0, stream>>>(static_cast<T*>(dst), count, static_cast<T>(pattern));
  return check(cudaGetLastError(), "fill kernel launch");
}

class CudaDevice final : public StreamDevice {
 public:
  CudaDevice(Completion completion, HoldShape shape) : completion_(completion), shape_(shape) {
    // Load every kernel now: with CUDA's lazy module loading, the first launch of a kernel loads it and can
    // synchronise the device, which would serialise concurrent streams in the middle of a training step.
    cudaFuncAttributes attributes;
    for (const auto& h : kHolds) cudaFuncGetAttributes(&attributes, h.kernel);
    cudaFuncGetAttributes(&attributes, ranklens_HoldArrival);
    // Shared memory per hold block. An SM's whole (auto with more than one block, or sm): no other kernel's block
    // fits beside it, as an NCCL channel's block keeps its SM (a persistent GEMM then waits for those SMs, as it
    // does for NCCL). More than the device allows is clamped to its limit.
    int device = 0, optin = 0;
    const bool wholeSm = shape_.sharedBytes == HoldShape::kSharedSm ||
                         (shape_.sharedBytes == HoldShape::kSharedAuto && shape_.blocks > 1);
    const long long wanted = wholeSm ? LLONG_MAX : std::max(0LL, shape_.sharedBytes);
    if (wanted > 0 && cudaGetDevice(&device) == cudaSuccess &&
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) == cudaSuccess) {
      const size_t bytes = static_cast<size_t>(std::min<long long>(wanted, optin));
      bool ok = true;
      for (const auto& h : kHolds)
        ok = ok && cudaFuncSetAttribute(h.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)) == cudaSuccess;
      if (ok) holdSharedBytes_ = bytes;
    }
    cudaFuncGetAttributes(&attributes, ranklensFill<uint16_t>);
    cudaFuncGetAttributes(&attributes, ranklensFill<uint32_t>);
    cudaFuncGetAttributes(&attributes, ranklensFill<unsigned long long>);
    for (ReduceKernel kernel : kReduceKernels) cudaFuncGetAttributes(&attributes, kernel);
    cudaGetLastError();
  }

  const char* name() const override { return "cuda"; }

  int copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) override {
    if (bytes == 0 || dst == src) return 0;
    if (Deferred* d = deferredOn(stream)) {
      if (addStartCopy(&d->copies, dst, src, bytes)) return 0;
      if (int err = flush(d)) return err;
    }
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync");
  }

  int fill(void* dst, size_t count, size_t elemSize, uint64_t pattern, cudaStream_t stream) override {
    if (count == 0) return 0;
    if (Deferred* d = deferredOn(stream))
      if (int err = flush(d)) return err;
    switch (elemSize) {
      case 1:
        return check(cudaMemsetAsync(dst, static_cast<int>(pattern & 0xff), count, stream), "cudaMemsetAsync");
      case 2:
        return launchFill<uint16_t>(dst, count, pattern, stream);
      case 4:
        return launchFill<uint32_t>(dst, count, pattern, stream);
      case 8:
        return launchFill<unsigned long long>(dst, count, pattern, stream);
      default:
        setError("cuda device: fill: bad element size");
        return 1;
    }
  }

  int reduceCopies(void* dst, const void* src, size_t count, const Reduction& reduction, cudaStream_t stream) override {
    if (count == 0) return 0;
    if (reduction.datatype < 0 || reduction.datatype >= kReductionTypes) {
      setError("cuda device: reduceCopies: bad datatype");
      return 1;
    }
    if (Deferred* d = deferredOn(stream))
      if (int err = flush(d)) return err;
    kReduceKernels[reduction.datatype]<<<elementBlocks(count), kElementThreads, 0, stream>>>(dst, src, count,
                                                                                             reduction);
    return check(cudaGetLastError(), "reduction kernel launch");
  }

  using StreamDevice::hold;
  int hold(const HoldRequest& request, cudaStream_t stream) override {
    const uint64_t nanoseconds = request.nanoseconds;
    if (completion_ == Completion::kHostCallback) {
      if (nanoseconds == 0) return 0;
      return check(cudaLaunchHostFunc(stream, holdOnHost, reinterpret_cast<void*>(static_cast<uintptr_t>(nanoseconds))),
                   "cudaLaunchHostFunc");
    }
    const bool held = nanoseconds > 0 || request.pace.chain != 0;  // a paced hold may end later than its duration
    if (!held) return 0;  // nothing to enqueue: a mark deferred on the stream is left to settle()
    // Unmarked, the default hold (one warp) starts when the stream reaches it; a larger one may wait for SMs, so it
    // is marked here.
    uint64_t arrival = request.arrival;
    if (arrival == 0 && !deferrable())
      if (int err = arrive(stream, capturing(stream), &arrival)) return err;
    Deferred* d = deferredOn(stream);
    StartCopies copies;
    if (d != nullptr && reinterpret_cast<uint64_t>(d->copies.stamp) == arrival) {
      // The hold that stands for the call's deferred mark starts where the mark would have, and makes its copies.
      copies = d->copies;
      arrival = 0;
    } else if (d != nullptr) {
      if (int err = flush(d)) return err;
      d = nullptr;
    }
    HoldTraffic traffic{};
    if (shape_.traffic > 0 && request.callBytes > 0)
      if (int err = trafficFor(request, &traffic)) return err;
    holdKernelFor(request.label)<<<static_cast<unsigned>(shape_.blocks), static_cast<unsigned>(shape_.threads),
                                   holdSharedBytes_, stream>>>(
        nanoseconds, reinterpret_cast<const unsigned long long*>(arrival), traffic, request.pace, copies);
    const int err = check(cudaGetLastError(), "hold kernel launch");
    if (d != nullptr) return finish(d, err);
    return err;
  }

  // A ring of device slots: a slot is reused after kArrivalSlots marks, long after its hold ended. A mark captured
  // into a CUDA graph runs again at every launch of the graph, so it gets a slot of its own, never reused; past
  // kCapturedArrivalSlots such marks a captured hold counts from its own start. No marks with host callbacks, nor
  // with hold_from: start (every hold then counts from its own start). With the default hold shape the mark is
  // deferred: the call's hold (or settle()) launches it, with the small copies enqueued after it.
  int arrive(cudaStream_t stream, bool captured, uint64_t* arrival) override {
    *arrival = 0;
    if (completion_ == Completion::kHostCallback || shape_.fromStart) return 0;
    unsigned long long* slots = nullptr;
    if (int err = arrivalSlots(&slots)) return err;
    unsigned long long* slot = nullptr;
    if (captured) {
      const uint64_t n = nextCapturedArrival_.fetch_add(1, std::memory_order_relaxed);
      if (n >= kCapturedArrivalSlots) return 0;
      slot = slots + kArrivalSlots + n;
    } else {
      slot = slots + nextArrival_.fetch_add(1, std::memory_order_relaxed) % kArrivalSlots;
    }
    *arrival = reinterpret_cast<uint64_t>(slot);
    StartCopies mark;
    mark.stamp = slot;
    if (deferrable()) {
      if (Deferred* d = deferredOn(stream))  // an earlier mark on the stream goes first
        if (int err = flush(d)) return err;
      deferred_.push_back(Deferred{this, stream, mark, {}});
      return 0;
    }
    ranklens_HoldArrival<<<1, 32, 0, stream>>>(mark);
    return check(cudaGetLastError(), "hold mark launch");
  }

  bool capturing(cudaStream_t stream) override { return streamCapturing(stream); }

  // A mark still deferred here belongs to a call that held nothing: no hold reads its stamp, so it is launched only
  // for the copies it carries (its fences are recorded either way).
  int settle() override {
    int first = 0;
    for (size_t i = deferred_.size(); i-- > 0;) {
      if (deferred_[i].owner != this) continue;
      const int err = deferred_[i].copies.count > 0 ? flush(&deferred_[i]) : finish(&deferred_[i], 0);
      if (first == 0) first = err;
    }
    return first;
  }

  // Chains are handed out from a per-device block of kPaceChains, zeroed at allocation (no collective yet).
  int paceChain(uint64_t* chain) override {
    *chain = 0;
    if (completion_ == Completion::kHostCallback) return 0;
    int device = 0;
    if (int err = check(cudaGetDevice(&device), "cudaGetDevice")) return err;
    unsigned long long* chains = nullptr;
    if (int err = perDevice(chains_, kPaceChains * 2 * sizeof(unsigned long long), "pace chains", &chains)) return err;
    std::lock_guard<std::mutex> lock(mu_);
    if (chainsUsed_[device] == 0 && cudaMemset(chains, 0, kPaceChains * 2 * sizeof(unsigned long long)) != cudaSuccess)
      return check(cudaGetLastError(), "cudaMemset (pace chains)");
    if (chainsUsed_[device] >= kPaceChains) {
      setError("cuda device: more than " + std::to_string(kPaceChains) + " paced communicators on device " +
               std::to_string(device));
      return 1;
    }
    *chain = reinterpret_cast<uint64_t>(chains + 2 * chainsUsed_[device]++);
    return 0;
  }

  int allocHost(void** ptr, size_t bytes) override { return check(cudaMallocHost(ptr, bytes), "cudaMallocHost"); }
  int freeHost(void* ptr) override { return check(cudaFreeHost(ptr), "cudaFreeHost"); }

  // Fences are events from a pool; the token is the event handle. Behind a deferred mark the event is recorded
  // once the mark's launch is enqueued (its copies are before the fence); until then it has not passed.
  int fence(cudaStream_t stream, uint64_t* token) override {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!freeEvents_.empty()) {
        event = freeEvents_.back();
        freeEvents_.pop_back();
      }
    }
    if (event == nullptr) {
      if (int err = check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate")) return err;
    }
    *token = reinterpret_cast<uint64_t>(event);
    if (Deferred* d = deferredOn(stream)) {
      std::lock_guard<std::mutex> lock(mu_);
      unrecorded_.push_back(event);
      unrecordedCount_.store(unrecorded_.size(), std::memory_order_release);
      d->fences.push_back(event);
      return 0;
    }
    if (int err = check(cudaEventRecord(event, stream), "cudaEventRecord")) {
      release(event);
      *token = 0;
      return err;
    }
    return 0;
  }

  bool passed(uint64_t token) override {
    auto event = reinterpret_cast<cudaEvent_t>(token);
    if (unrecordedCount_.load(std::memory_order_acquire) > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (std::find(unrecorded_.begin(), unrecorded_.end(), event) != unrecorded_.end()) return false;
    }
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaErrorNotReady) return false;
    if (state != cudaSuccess) cudaGetLastError();  // a failed fence is treated as passed: memory must not leak
    release(event);
    return true;
  }

  // One non-blocking stream per device for uploads, created at the first; the worker thread is pointed at the device.
  int upload(void* dst, const void* src, size_t bytes, int ordinal, uint64_t* token) override {
    *token = 0;
    if (ordinal < 0 || ordinal >= kMaxDevices) {
      setError("cuda device: upload to device ordinal " + std::to_string(ordinal) + " out of range");
      return 1;
    }
    if (int err = check(cudaSetDevice(ordinal), "cudaSetDevice")) return err;
    cudaStream_t stream = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (uploadStreams_[ordinal] == nullptr) {
        if (int err = check(cudaStreamCreateWithFlags(&uploadStreams_[ordinal], cudaStreamNonBlocking),
                            "cudaStreamCreate (uploads)"))
          return err;
      }
      stream = uploadStreams_[ordinal];
    }
    if (int err = check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (upload)"))
      return err;
    return fence(stream, token);
  }

  Calibration calibrate() override {
    Calibration c;
    cudaStream_t stream = nullptr;
    cudaEvent_t begin = nullptr, end = nullptr;
    void* pinned = nullptr;
    void* onDevice = nullptr;
    constexpr size_t kLarge = 16u << 20;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&begin) != cudaSuccess || cudaEventCreate(&end) != cudaSuccess ||
        cudaMallocHost(&pinned, kLarge) != cudaSuccess || cudaMalloc(&onDevice, kLarge) != cudaSuccess) {
      cudaGetLastError();
    } else {
      // Median of the event interval around an operation, minus what was asked for.
      auto measure = [&](auto&& enqueue) {
        std::vector<int64_t> samples;
        for (int i = 0; i < 25; ++i) {
          cudaEventRecord(begin, stream);
          enqueue();
          cudaEventRecord(end, stream);
          float ms = 0;
          if (cudaEventSynchronize(end) != cudaSuccess || cudaEventElapsedTime(&ms, begin, end) != cudaSuccess) break;
          if (i >= 5) samples.push_back(static_cast<int64_t>(ms * 1e6));  // the first ones warm up
        }
        return median(samples);
      };
      constexpr uint64_t kHoldNs = 50'000;
      // As replay holds: marked on arrival (unless hold_from: start), then held.
      c.holdFixedNs = std::max<int64_t>(0, measure([&] {
                                             HoldRequest request;
                                             request.nanoseconds = kHoldNs;
                                             arrive(stream, false, &request.arrival);
                                             hold(request, stream);
                                           }) - kHoldNs);
      if (shape_.traffic > 0) {
        // hold_traffic's copy rate with this launch shape: a hold of 1 ns that moves memory (the copy runs in full;
        // the hold ends when it does).
        HoldTraffic traffic{};
        uint4* scratch = nullptr;
        if (scratchMemory(&scratch) == 0) {
          traffic.scratch = scratch;
          traffic.halfVectors = kScratchHalfVectors;
          // 64 KiB per thread, at most 256 MiB: long enough to time, short for a one-warp hold.
          traffic.vectors = std::min<unsigned long long>(
              (256ull << 20) / sizeof(uint4),
              static_cast<unsigned long long>(shape_.blocks) * shape_.threads * ((64u << 10) / sizeof(uint4)));
          const int64_t copyNs = measure([&] {
            holdKernelFor("Hold")<<<static_cast<unsigned>(shape_.blocks), static_cast<unsigned>(shape_.threads),
                                    holdSharedBytes_, stream>>>(1, nullptr, traffic, PaceRequest{}, StartCopies{});
          });
          if (copyNs > 0) trafficNsPerVector_ = static_cast<double>(copyNs) / static_cast<double>(traffic.vectors);
          c.trafficNsPerByte = trafficNsPerVector_ / sizeof(uint4);
        }
      }
      c.copyFixedNs = measure([&] { cudaMemcpyAsync(onDevice, pinned, 4096, cudaMemcpyHostToDevice, stream); });
      const int64_t large = measure([&] { cudaMemcpyAsync(onDevice, pinned, kLarge, cudaMemcpyHostToDevice, stream); });
      c.copyNsPerByte = std::max<double>(0, static_cast<double>(large - c.copyFixedNs) / kLarge);
      // Within device memory (a payload staged by upload()): one half of the buffer into the other.
      char* half = static_cast<char*>(onDevice) + kLarge / 2;
      c.deviceCopyFixedNs = measure([&] { cudaMemcpyAsync(half, onDevice, 4096, cudaMemcpyDeviceToDevice, stream); });
      const int64_t largeOnDevice =
          measure([&] { cudaMemcpyAsync(half, onDevice, kLarge / 2, cudaMemcpyDeviceToDevice, stream); });
      c.deviceCopyNsPerByte =
          std::max<double>(0, static_cast<double>(largeOnDevice - c.deviceCopyFixedNs) / (kLarge / 2));
      cudaGetLastError();
    }
    if (onDevice) cudaFree(onDevice);
    if (pinned) cudaFreeHost(pinned);
    if (begin) cudaEventDestroy(begin);
    if (end) cudaEventDestroy(end);
    if (stream) cudaStreamDestroy(stream);
    return c;
  }

  int alloc(void** ptr, size_t bytes) override { return check(cudaMalloc(ptr, bytes), "cudaMalloc"); }
  int free(void* ptr) override { return check(cudaFree(ptr), "cudaFree"); }
  int currentDevice(int* device) override { return check(cudaGetDevice(device), "cudaGetDevice"); }

  void describe(std::string* name, std::string* uuid) override { describeCurrentCudaDevice(name, uuid); }
  int memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) override {
    size_t free = 0, total = 0;
    if (int err = check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo")) return err;
    *freeBytes = free;
    *totalBytes = total;
    return 0;
  }

 private:
  // What a call on this thread deferred on a stream: its arrival mark (copies.stamp), the small copies enqueued
  // after it, and the fences after those. Taken into the call's hold launch, or launched on their own by flush().
  struct Deferred {
    const CudaDevice* owner;
    cudaStream_t stream;
    StartCopies copies;
    std::vector<cudaEvent_t> fences;
  };
  static thread_local std::vector<Deferred> deferred_;

  // Marks are deferred where the hold starts when its stream reaches it: one warp, nothing to wait for.
  bool deferrable() const {
    return completion_ == Completion::kKernel && !shape_.fromStart && shape_.blocks == 1 && shape_.threads == 32 &&
           holdSharedBytes_ == 0 && shape_.traffic <= 0;
  }

  Deferred* deferredOn(cudaStream_t stream) {
    for (auto& d : deferred_)
      if (d.owner == this && d.stream == stream) return &d;
    return nullptr;
  }

  // A copy small enough for one warp's batch, in the widest element dst, src and the size allow.
  static bool addStartCopy(StartCopies* c, void* dst, const void* src, size_t bytes) {
    if (c->count == StartCopies::kMax) return false;
    const uintptr_t bits = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | bytes;
    int width = 16;
    while (width > 1 && (bits & static_cast<uintptr_t>(width - 1)) != 0) width /= 2;
    if (bytes / width > StartCopies::kMaxElements) return false;
    c->copies[c->count++] = StartCopies::Copy{dst, src, bytes / width, width};
    return true;
  }

  // Launches a deferred mark with its copies, then records its fences.
  int flush(Deferred* d) {
    ranklens_HoldArrival<<<1, 32, 0, d->stream>>>(d->copies);
    return finish(d, check(cudaGetLastError(), "hold mark launch"));
  }

  // After the deferred mark's launch (`err` its result): its fences are recorded and it is forgotten.
  int finish(Deferred* d, int err) {
    for (cudaEvent_t event : d->fences)
      if (err == 0) err = check(cudaEventRecord(event, d->stream), "cudaEventRecord");
    if (!d->fences.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (cudaEvent_t event : d->fences) {
        auto it = std::find(unrecorded_.begin(), unrecorded_.end(), event);
        if (it != unrecorded_.end()) unrecorded_.erase(it);
      }
      unrecordedCount_.store(unrecorded_.size(), std::memory_order_release);
    }
    deferred_.erase(deferred_.begin() + (d - deferred_.data()));
    return err;
  }

  // The memory a hold moves: traffic x its call's bytes, no more than the hold's launch shape copies in its
  // duration (calibrate() measures the rate), so a hold is never lengthened by its traffic.
  int trafficFor(const HoldRequest& request, HoldTraffic* traffic) {
    uint4* scratch = nullptr;
    if (int err = scratchMemory(&scratch)) return err;
    double vectors = shape_.traffic * static_cast<double>(request.callBytes) / sizeof(uint4);
    const double nsPerVector = trafficNsPerVector_ > 0 ? trafficNsPerVector_ : 0.01;  // before calibration
    vectors = std::min(vectors, static_cast<double>(request.nanoseconds) / nsPerVector);
    traffic->scratch = scratch;
    traffic->halfVectors = kScratchHalfVectors;
    traffic->vectors = static_cast<unsigned long long>(vectors);
    traffic->copyNs = static_cast<unsigned long long>(vectors * nsPerVector);
    return 0;
  }

  int scratchMemory(uint4** scratch) {
    return perDevice(scratch_, 2 * kScratchHalfVectors * sizeof(uint4), "hold traffic scratch", scratch);
  }

  // The current device's ring of arrival stamps, then the slots of captured marks.
  int arrivalSlots(unsigned long long** slots) {
    return perDevice(arrivals_, (kArrivalSlots + kCapturedArrivalSlots) * sizeof(unsigned long long), "hold stamps",
                     slots);
  }

  // The current device's entry of `table`, allocated (`bytes`) at its first use: on the device of the caller's
  // stream, which the constructor cannot know. Kept for the process's life.
  template <typename T, size_t N>
  int perDevice(T* (&table)[N], size_t bytes, const char* what, T** out) {
    int device = 0;
    if (int err = check(cudaGetDevice(&device), "cudaGetDevice")) return err;
    if (device < 0 || static_cast<size_t>(device) >= N) {
      setError("cuda device: device ordinal " + std::to_string(device) + " out of range for " + what);
      return 1;
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (table[device] == nullptr) {
      if (int err = check(cudaMalloc(&table[device], bytes), (std::string("cudaMalloc (") + what + ")").c_str()))
        return err;
      // Zeroed, although hold_traffic's scratch is only moved about: compute-sanitizer's initcheck reports reads of
      // memory never written.
      if (int err = check(cudaMemset(table[device], 0, bytes), (std::string("cudaMemset (") + what + ")").c_str()))
        return err;
    }
    *out = table[device];
    return 0;
  }

  void release(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mu_);
    freeEvents_.push_back(event);
  }

  const Completion completion_;
  const HoldShape shape_;
  size_t holdSharedBytes_ = 0;
  static constexpr size_t kArrivalSlots = 1u << 16;
  static constexpr size_t kCapturedArrivalSlots = 1u << 14;
  static constexpr int kMaxDevices = 64;
  unsigned long long* arrivals_[kMaxDevices] = {};  // per device, kept for the process's life
  static constexpr size_t kPaceChains = 4096;
  unsigned long long* chains_[kMaxDevices] = {};  // peer_pacing's chains, per device, kept for the process's life
  size_t chainsUsed_[kMaxDevices] = {};
  static constexpr unsigned long long kScratchHalfVectors = (64ull << 20) / sizeof(uint4);  // 64 MiB per half
  uint4* scratch_[kMaxDevices] = {};  // hold_traffic's memory, 128 MiB per device, allocated at its first use
  cudaStream_t uploadStreams_[kMaxDevices] = {};  // value replay's payload uploads, kept for the process's life
  double trafficNsPerVector_ = 0;                 // measured by calibrate()
  std::atomic<uint64_t> nextArrival_{0};
  std::atomic<uint64_t> nextCapturedArrival_{0};  // over all devices: a bound, not an index per device
  std::mutex mu_;
  std::vector<cudaEvent_t> freeEvents_;
  std::vector<cudaEvent_t> unrecorded_;  // fences behind deferred marks (a few at a time)
  std::atomic<size_t> unrecordedCount_{0};
};

thread_local std::vector<CudaDevice::Deferred> CudaDevice::deferred_;

}  // namespace

std::unique_ptr<StreamDevice> makeCudaDevice(std::string* why, Completion completion, HoldShape shape) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    if (why) *why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device visible";
    cudaGetLastError();  // clear the sticky-free error so the application's own CUDA calls are not confused
    return nullptr;
  }
  shape.blocks = std::max(1, shape.blocks);
  shape.threads = std::clamp(shape.threads / 32 * 32, 32, 1024);
  return std::make_unique<CudaDevice>(completion, shape);
}

}  // namespace device
}  // namespace ranklens

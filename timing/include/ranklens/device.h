// SPDX-License-Identifier: Apache-2.0
// The stream side of RankLens: every effect a replayed call has on the GPU (copy a payload, fill a receive buffer,
// hold the stream for a duration) goes through this small interface. The CUDA implementation enqueues the effect on
// the call's stream and never blocks the caller; the host implementation applies it to host memory at once, so tests
// and machines without a GPU exercise the whole API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ranklens {
namespace device {

// Why the last call on this thread failed (empty after a success).
const std::string& lastError();

// peer_pacing: a collective's hold on a communicator's chain, a device word pair {end of its last collective's
// hold, that collective's index} (StreamDevice::paceChain). Each hold ends at pacedDeadline() and writes its end
// for the next collective, whose peers are then taken to arrive `peerGapNs` after it.
struct PaceRequest {
  uint64_t chain = 0;     // 0: not paced
  uint64_t index = 0;     // the collective's position on its communicator, from 1
  bool known = false;     // peerGapNs and lastNs are known (else the hold keeps its own duration, and chains)
  int64_t peerGapNs = 0;  // the latest peer's recorded work from the previous collective's end to its arrival
  uint64_t lastNs = 0;    // the hold for the last arrival's recorded duration
};

// One hold: how long, under which name, from which arrival mark, and for which call size.
struct HoldRequest {
  uint64_t nanoseconds = 0;
  const char* label = "Hold";  // names the kernel in profilers: ranklens_<label>
  uint64_t arrival = 0;        // a mark from StreamDevice::arrive() enqueued earlier on the stream, 0 none
  uint64_t callBytes = 0;      // the call's buffer size, for holds that move memory as NCCL does (HoldShape)
  PaceRequest pace;
};

// When a paced hold that starts counting at `start` ends (GPU nanoseconds), given the chain's {end, index} as the
// hold reads it. The previous collective has ended (index - 1): the later of `start` and the peers' arrival, plus
// the last arrival's duration. The chain already holds this collective (another block of the same hold wrote it):
// its end. Otherwise (the previous collective's hold has not ended yet, or was not held) the hold's own duration.
inline __host__ __device__ unsigned long long pacedDeadline(unsigned long long start, unsigned long long ownNs,
                                                            unsigned long long chainEnd, unsigned long long chainIndex,
                                                            unsigned long long index, bool known, long long peerGapNs,
                                                            unsigned long long lastNs) {
  if (chainIndex == index) return chainEnd;
  if (!known || chainIndex + 1 != index) return start + ownNs;
  const long long peers = static_cast<long long>(chainEnd) + peerGapNs;
  const unsigned long long from =
      peers > static_cast<long long>(start) ? static_cast<unsigned long long>(peers) : start;
  return from + lastNs;
}

// After a paced hold: its end becomes the chain's, unless a later collective that ran first is there already (it
// keeps its place). The end is written before the index, which is what a reader of the index goes by.
inline __host__ __device__ void advanceChain(volatile unsigned long long* chain, unsigned long long end,
                                             unsigned long long index) {
  if (chain[1] >= index) return;
  chain[0] = end;
#ifdef __CUDA_ARCH__
  __threadfence();
#endif
  chain[1] = index;
}

// A PreMulSum operator's scalar, a value of the reduction's datatype: its bytes when NCCL read it at the operator's
// creation (ncclScalarHostImmediate), or where to read it when the reduction runs (ncclScalarDevice).
struct Scalar {
  uint64_t bits = 0;         // little-endian, in the datatype's width
  const void* at = nullptr;  // when set, read here instead of `bits`
};

// A reduction whose `copies` contributions all equal this rank's (fill: clone, every peer a copy of this rank), or
// NCCL's result on a one-rank communicator (copies 1). Each element x becomes y = x, or y = s*x rounded to the
// datatype for a PreMulSum (each rank multiplies its own contribution), then copies*y (sum, exact in double
// precision and rounded once to the datatype) or y^copies (product, by squaring in double precision); fp8 saturates
// to its largest finite value, as NCCL's fp8 types convert; integers wrap modulo 2^bits; NaN payloads are not kept.
// NCCL's ring adds one contribution at a time and rounds each partial sum, so a real job whose ranks held equal data
// may differ from this in the last bits.
struct Reduction {
  int datatype = 0;      // ncclDataType_t's value, ncclInt8 (0) .. ncclFloat8e5m2 (11)
  bool product = false;  // ncclProd; otherwise a sum (ncclSum, PreMulSum)
  uint64_t copies = 1;
  bool premul = false;  // PreMulSum: multiply each contribution by `scalar` first
  Scalar scalar;
};
constexpr int kReductionTypes = 12;  // datatypes a Reduction takes: ncclNumTypes in NCCL 2.28

class StreamDevice {
 public:
  virtual ~StreamDevice() = default;
  virtual const char* name() const = 0;  // "cuda" or "host"

  // All return 0 on success, else a cudaError_t-like nonzero code with lastError() set.
  virtual int copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) = 0;
  // `copies` copies of src's `bytes` at dst, dst + stride, ... (clone fills: an all-gather's N slots). A slot that is
  // src itself is left alone; no other slot may overlap src. One copy() per slot: the CUDA device takes small ones
  // into the call's one launch (arrive()).
  int replicate(void* dst, const void* src, size_t bytes, size_t copies, size_t stride, cudaStream_t stream) {
    for (size_t i = 0; i < copies; ++i)
      if (int err = copy(static_cast<char*>(dst) + i * stride, src, bytes, stream)) return err;
    return 0;
  }
  // Writes `count` elements of `elemSize` bytes (1, 2, 4 or 8), each equal to the low bytes of `pattern`.
  virtual int fill(void* dst, size_t count, size_t elemSize, uint64_t pattern, cudaStream_t stream) = 0;
  // `count` elements of `src` reduced as `reduction` says into `dst` (which may be `src`, element for element).
  virtual int reduceCopies(void* dst, const void* src, size_t count, const Reduction& reduction,
                           cudaStream_t stream) = 0;
  // Keeps `stream` busy for the request's nanoseconds from its arrival mark, or from the moment the hold starts
  // executing when it has none.
  virtual int hold(const HoldRequest& request, cudaStream_t stream) = 0;
  int hold(uint64_t nanoseconds, const char* label, cudaStream_t stream) {
    HoldRequest request;
    request.nanoseconds = nanoseconds;
    request.label = label;
    return hold(request, stream);
  }
  // Marks the moment `stream` reaches this point. A hold given the mark ends its duration after it, so that what
  // is enqueued in between (a receive buffer's copy or fill) and the hold's own wait for SMs count within the
  // recorded duration, as the real call's did. *arrival is 0 where marks do not exist (host device, host callbacks).
  // The CUDA device may defer the mark: small copies enqueued after it on the stream, and the hold given it, then
  // go into one launch. The caller ends every call that marked with settle(). `captured`: the stream is capturing a
  // CUDA graph (capturing(), which the caller asked once for the call): the mark then runs at every launch of the
  // graph and gets a slot no other mark reuses.
  virtual int arrive(cudaStream_t stream, bool captured, uint64_t* arrival) {
    (void)stream;
    (void)captured;
    *arrival = 0;
    return 0;
  }
  // Enqueues whatever this thread's marks left deferred (a mark whose call held nothing, and the copies and fences
  // after it). Cheap when nothing is deferred.
  virtual int settle() { return 0; }
  // True while `stream` is being captured into a CUDA graph (also when the query fails). The host device has none.
  virtual bool capturing(cudaStream_t stream) {
    (void)stream;
    return false;
  }
  // peer_pacing: a fresh chain (PaceRequest::chain) on the current device for one communicator; 0 where holds are
  // not kernels (host device, host callbacks).
  virtual int paceChain(uint64_t* chain) {
    *chain = 0;
    return 0;
  }
  virtual int alloc(void** ptr, size_t bytes) = 0;
  virtual int free(void* ptr) = 0;
  virtual int currentDevice(int* device) = 0;
  // Name and UUID of the current device, for trace manifests ("" for the host device).
  virtual void describe(std::string* name, std::string* uuid) = 0;
  // Free and total memory of the current device (the host device: the host's available and total memory).
  virtual int memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) = 0;

  // Replay of recorded durations and payloads.
  // Pinned (page-locked) host memory: copies from it run asynchronously on the stream.
  virtual int allocHost(void** ptr, size_t bytes) = 0;
  virtual int freeHost(void* ptr) = 0;
  // A fence after everything enqueued on `stream` so far; passed() says whether the stream got there. Fences are
  // single-use: passed() returning true releases it. The host device's fences have always passed.
  virtual int fence(cudaStream_t stream, uint64_t* token) = 0;
  virtual bool passed(uint64_t token) = 0;
  // Copies pinned host memory into device memory of device `ordinal` on a stream of the device's own (never one of
  // the program's), from any thread, and fences it: value replay's payloads move to the GPU ahead of their calls.
  virtual int upload(void* dst, const void* src, size_t bytes, int ordinal, uint64_t* token) = 0;
  // Measures (synchronously, on a private stream: call at set-up, never mid-step) the fixed cost a hold adds to
  // the time it holds its stream, and the cost of a copy from pinned and from device memory (fixed + per byte), so
  // that replay subtracts them from recorded durations instead of counting the launch twice.
  struct Calibration {
    int64_t holdFixedNs = 0;
    int64_t copyFixedNs = 0;
    double copyNsPerByte = 0;
    int64_t deviceCopyFixedNs = 0;  // the same for a copy within device memory (a payload staged by upload())
    double deviceCopyNsPerByte = 0;
    double trafficNsPerByte = 0;  // hold_traffic: how fast a hold of the configured shape moves memory (0: off)
  };
  virtual Calibration calibrate() = 0;
};

// How holds complete on the CUDA device: a kernel spinning on the GPU's global timer (streams overlap; a constant
// ~7 us added) or a host function enqueued with cudaLaunchHostFunc (the driver runs them on one thread:
// concurrent streams serialise and each adds 20-60 us).
enum class Completion { kKernel, kHostCallback };

// Host memory, effects applied synchronously in call order (a host "stream" is the calling thread); holds are
// not slept (the calling thread must never be blocked): a paced hold only advances its chain.
std::unique_ptr<StreamDevice> makeHostDevice();

// The launch shape of a hold kernel. One block of one warp lets compute use every other SM; NCCL's kernels take one
// block per channel (512-640 threads, their own shared memory), and compute that overlaps them is slowed by the
// SMs they hold: a hold shaped like them slows it alike.
struct HoldShape {
  int blocks = 1;
  int threads = 32;            // a multiple of 32
  long long sharedBytes = -1;  // dynamic shared memory per block; kSharedAuto, kSharedSm, or bytes
  // Device memory each hold reads and writes per byte of its call (0: none), at the end of the hold, as the rank
  // that waited for its peers moves the data last: NCCL's kernels load the memory and draw the power that
  // overlapping compute then lacks, which a hold that only waits does not (an experiment).
  double traffic = 0;
  // hold_from: start. arrive() makes no marks: every hold counts from its own start, even when it waits for SMs.
  bool fromStart = false;
  static constexpr long long kSharedAuto = -1;  // an SM's whole shared memory when blocks > 1, none for one block
  static constexpr long long kSharedSm = -2;    // an SM's whole shared memory (nothing else fits on a held SM)
};

// nullptr (and `why` set) when no usable CUDA device is present.
std::unique_ptr<StreamDevice> makeCudaDevice(std::string* why, Completion completion = Completion::kKernel,
                                             HoldShape shape = {});

}  // namespace device
}  // namespace ranklens

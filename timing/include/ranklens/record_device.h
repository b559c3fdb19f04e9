// SPDX-License-Identifier: Apache-2.0
// The GPU primitives record mode needs to time a call and copy what it received, without synchronising the caller:
// events from a pool recorded around the real call, a copy of the received buffer into pinned memory after it on
// the call's stream, and queries made by a background thread. The CUDA implementation uses the CUDA runtime; the
// host one keeps timestamps and copies at once, so CI (no GPU) runs the whole recorder against a fake NCCL on host
// memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "ranklens/status.h"
#include <memory>
#include <string>
#include <vector>

namespace ranklens {
namespace device {

class RecordDevice {
 public:
  using Event = void*;
  static constexpr int kPending = -1;  // queryEvent: recorded work not finished yet

  virtual ~RecordDevice() = default;
  virtual const char* name() const = 0;  // "cuda" or "host"

  // All int results: 0 on success, else nonzero with device::lastError() set.
  virtual int currentDevice(int* device) = 0;
  virtual void describe(std::string* name, std::string* uuid) = 0;  // current device, for the manifest
  // Timing-enabled events of `device` (created with that device current; the caller's device is restored).
  virtual int createEvents(int device, size_t count, std::vector<Event>* out) = 0;
  virtual void destroyEvent(Event event) = 0;
  virtual int recordEvent(Event event, cudaStream_t stream) = 0;
  // Records `event` as a node of the CUDA graph `stream` is capturing (cudaEventRecordExternal): every launch of the
  // graph records it again, so it must never be reused. The host device has no graphs: nonzero.
  virtual int recordEventInCapture(Event event, cudaStream_t stream) = 0;
  // Records `end`, then `start`, on a stream of RankLens's own on `device` (prepareDevice's), outside the capture the
  // calling thread may be in: until a launch of the graph that holds them as nodes records them again, the time from
  // `start` to `end` is negative, never a duration. As they come from the pool they may hold an earlier call's
  // records, in either order, or none (cudaEventElapsedTime's error, which compute-sanitizer reports).
  virtual int primeCapturedEvents(int device, Event start, Event end) = 0;
  virtual int queryEvent(Event event) = 0;  // 0 complete, kPending, else an error
  // kPending while either event has not completed. The recorder queries the end first (queryEvent): a pending
  // answer here is an API error to CUDA's tools (compute-sanitizer), a pending query is not.
  virtual int elapsedNs(Event start, Event end, int64_t* nanoseconds) = 0;
  // True while `stream` is being captured into a CUDA graph (also when the query itself fails: then nothing may be
  // enqueued on it that the capture would not allow).
  virtual bool capturing(cudaStream_t stream) = 0;
  // The id of the capture `stream` is in (unique per capture in the process); 0 when not capturing or unknown.
  virtual uint64_t captureId(cudaStream_t stream) = 0;
  virtual int allocPinned(void** ptr, size_t bytes) = 0;
  virtual void freePinned(void* ptr) = 0;
  // Loads what copyToHost launches on `device`, and creates primeCapturedEvents' stream (at communicator creation:
  // neither may happen inside a capture, and a first launch could synchronise).
  virtual int prepareDevice(int device) = 0;
  // Enqueues a copy of a received buffer into pinned memory (allocPinned's) on `stream`, the call's own stream, which
  // belongs to `device` (one thread may drive several devices: the current one may be another).
  // `done` (8 bytes of the same memory, not overlapping dst, set to 0 by the caller) is where a device that can -- a
  // copy kernel -- writes `token` (nonzero) once the bytes are in place: it then returns kSignalled, and no event
  // needs to follow the copy. Otherwise 0: the caller orders completion with an event after it. `oneRank`: the call
  // was on a 1-rank communicator (CopyOptions::kernelMaxBytesOneRank applies).
  static constexpr int kSignalled = -2;
  virtual int copyToHost(int device, void* dst, const void* src, size_t bytes, cudaStream_t stream, uint64_t* done,
                         uint64_t token, bool oneRank) = 0;
  // Called once on the background thread that queries events: lets it query while another thread captures a graph.
  virtual void prepareBackgroundThread() = 0;
  // Free and total memory of `device` (as cudaMemGetInfo: every process's allocations count; the host device: the
  // host's available and total memory). Background thread only: the recorder samples it so that a replay knows how
  // much memory the job left free (payload_device_bytes: auto).
  virtual int memoryInfo(int device, uint64_t* freeBytes, uint64_t* totalBytes) = 0;
};

// How copyToHost copies a received buffer (payload_copy_kernel_bytes, payload_copy_priority).
struct CopyOptions {
  // Copies up to this size signal their own completion (a kernel on a GPU: a copy engine's round trip stalled the
  // stream about 10 us whatever the size on H200); larger ones, and every one when 0, are followed by an event. The
  // host device does the same, so that CI runs both of the recorder's ways.
  size_t kernelMaxBytes = 64 << 10;
  // The same for copies after a call on a 1-rank communicator (copyToHost's `oneRank`): NCCL launches no kernel for
  // it, so no SM slot frees just before the copy, and a copy kernel waits for one when the job's compute fills them
  // (+20.8 us with 20 us compute blocks on H200, against +6.3 us for a copy engine; both 6-8 us on an idle GPU).
  size_t kernelMaxBytesOneRank = 0;
  // The threshold for a copy after a call of one rank (`oneRank`) or of several.
  size_t kernelMaxFor(bool oneRank) const { return oneRank ? kernelMaxBytesOneRank : kernelMaxBytes; }
  // The copy kernel is launched at the device's greatest stream priority, whatever its stream's: on a GPU whose SMs
  // are full of the job's compute it takes the first free slot instead of queueing behind pending compute blocks.
  bool highPriority = true;
};

std::unique_ptr<RecordDevice> makeHostRecordDevice(const CopyOptions& copies = {});
// nullptr (and `why` set) when no usable CUDA device is present. Touches no CUDA context until first used.
Status makeCudaRecordDevice(std::unique_ptr<RecordDevice>* out, const CopyOptions& copies = {});

}  // namespace device
}  // namespace ranklens

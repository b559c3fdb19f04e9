// SPDX-License-Identifier: Apache-2.0
// Record-mode primitives on the CUDA runtime (the two made for every call through the driver's entry points).
// Nothing here synchronises the calling thread: events are recorded, copies are enqueued, and only the background
// thread queries.
#include <cuda.h>  // driver types only: the entry points come from cudaGetDriverEntryPointByVersion
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda_util.h"
#include "ranklens/device.h"
#include "ranklens/record_device.h"
#include "record_copy.h"

namespace ranklens {
namespace device {

void describeCurrentCudaDevice(std::string* name, std::string* uuid) {
  int device = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&device) != cudaSuccess || cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  *name = prop.name;
  char text[64];
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
           b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  *uuid = text;
}

bool streamCapturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return true;
  }
  return status != cudaStreamCaptureStatusNone;
}

namespace {

void setError(const std::string& text) { const_cast<std::string&>(lastError()) = text; }

int check(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return 0;
  setError(std::string("cuda record device: ") + what + ": " + cudaGetErrorString(err));
  return static_cast<int>(err);
}

// Runs `body` with `device` current on this thread, then restores the caller's device.
template <typename Body>
int onDevice(int device, Body body) {
  int previous = -1;
  if (int err = check(cudaGetDevice(&previous), "cudaGetDevice")) return err;
  if (previous != device)
    if (int err = check(cudaSetDevice(device), "cudaSetDevice")) return err;
  int result = body();
  if (previous != device) cudaSetDevice(previous);
  return result;
}

// The two CUDA calls record mode makes on the job's thread for every NCCL call, taken from the driver: the runtime's
// wrappers add their own bookkeeping to each (measured by bench/record_host_overhead --probe). Null when this driver
// lacks them; the runtime's calls are used then.
struct DriverCalls {
  using EventRecordFn = CUresult (*)(CUevent, CUstream);
  using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
  using LaunchKernelFn = CUresult (*)(const CUlaunchConfig*, CUfunction, void**, void**);
  EventRecordFn eventRecord = nullptr;
  IsCapturingFn isCapturing = nullptr;
  LaunchKernelFn launchKernel = nullptr;  // the payload copy kernel, cuLaunchKernelEx (null: the runtime's launch)

  static DriverCalls resolve() {
    DriverCalls calls;
    calls.eventRecord = reinterpret_cast<EventRecordFn>(entry("cuEventRecord"));
    calls.isCapturing = reinterpret_cast<IsCapturingFn>(entry("cuStreamIsCapturing"));
    if (calls.eventRecord == nullptr || calls.isCapturing == nullptr) calls = DriverCalls();
    calls.launchKernel = reinterpret_cast<LaunchKernelFn>(entry("cuLaunchKernelEx"));
    return calls;
  }

 private:
  static void* entry(const char* name) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return fn;
  }
};

class CudaRecordDevice final : public RecordDevice {
 public:
  explicit CudaRecordDevice(const CopyOptions& copies) : copies_(copies) {}
  const char* name() const override { return "cuda"; }
  int currentDevice(int* device) override { return check(cudaGetDevice(device), "cudaGetDevice"); }
  void describe(std::string* name, std::string* uuid) override { describeCurrentCudaDevice(name, uuid); }

  int createEvents(int device, size_t count, std::vector<Event>* out) override {
    return onDevice(device, [&] {
      for (size_t i = 0; i < count; ++i) {
        cudaEvent_t event;
        // Timing must stay enabled (these events measure); blocking sync is never used on them.
        if (int err = check(cudaEventCreateWithFlags(&event, cudaEventDefault), "cudaEventCreate")) return err;
        out->push_back(event);
      }
      return 0;
    });
  }
  void destroyEvent(Event event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  int recordEvent(Event event, cudaStream_t stream) override {
    if (driver_.eventRecord == nullptr)
      return check(cudaEventRecord(static_cast<cudaEvent_t>(event), stream), "cudaEventRecord");
    const CUresult err = driver_.eventRecord(static_cast<CUevent>(event), stream);
    if (err == CUDA_SUCCESS) return 0;
    setError("cuda record device: cuEventRecord: CUresult " + std::to_string(static_cast<int>(err)));
    return static_cast<int>(err);
  }
  int recordEventInCapture(Event event, cudaStream_t stream) override {
    return check(cudaEventRecordWithFlags(static_cast<cudaEvent_t>(event), stream, cudaEventRecordExternal),
                 "cudaEventRecordWithFlags (external, in a graph capture)");
  }
  int primeCapturedEvents(int device, Event start, Event end) override {
    cudaStream_t stream =
        device >= 0 && device < kDevices ? primeStreams_[device].load(std::memory_order_acquire) : nullptr;
    if (stream == nullptr) {
      setError("cuda record device: no stream to prime a captured call's events on device " + std::to_string(device) +
               " (prepareDevice was not called for it)");
      return 1;
    }
    if (int err = recordEvent(end, stream)) return err;
    return recordEvent(start, stream);
  }
  int queryEvent(Event event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) return kPending;
    return check(err, "cudaEventQuery");
  }
  int elapsedNs(Event start, Event end, int64_t* nanoseconds) override {
    float ms = 0;
    const cudaError_t state = cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end));
    if (state == cudaErrorNotReady) return kPending;
    if (int err = check(state, "cudaEventElapsedTime")) return err;
    *nanoseconds = static_cast<int64_t>(static_cast<double>(ms) * 1e6 + 0.5);
    return 0;
  }
  bool capturing(cudaStream_t stream) override {
    if (driver_.isCapturing != nullptr) {
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      // An error counts as capturing: the call is then reported as captured rather than timed with events.
      return driver_.isCapturing(stream, &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
    }
    return streamCapturing(stream);
  }
  uint64_t captureId(cudaStream_t stream) override {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    if (cudaStreamGetCaptureInfo(stream, &status, &id) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return status == cudaStreamCaptureStatusActive ? id : 0;
  }
  int allocPinned(void** ptr, size_t bytes) override {
    // Mapped too: a small payload is written into it by a kernel (copyToHost). Where mapping is refused, plain
    // pinned memory: every copy then goes through a copy engine.
    if (cudaHostAlloc(ptr, bytes, cudaHostAllocPortable | cudaHostAllocMapped) != cudaSuccess) {
      cudaGetLastError();
      return check(cudaHostAlloc(ptr, bytes, cudaHostAllocPortable), "cudaHostAlloc (pinned staging)");
    }
    void* onDevice = nullptr;
    if (cudaHostGetDevicePointer(&onDevice, *ptr, 0) != cudaSuccess) {
      cudaGetLastError();
      return 0;  // not addressable from the GPU: every copy goes through a copy engine
    }
    mappedDevice_.store(reinterpret_cast<uintptr_t>(onDevice), std::memory_order_relaxed);
    mappedBytes_.store(bytes, std::memory_order_relaxed);
    mappedHost_.store(reinterpret_cast<uintptr_t>(*ptr), std::memory_order_release);
    return 0;
  }
  void freePinned(void* ptr) override {
    if (reinterpret_cast<uintptr_t>(ptr) == mappedHost_.load(std::memory_order_acquire)) mappedHost_.store(0);
    cudaFreeHost(ptr);
  }
  int prepareDevice(int device) override {
    return onDevice(device, [&] {
      if (device >= 0 && device < kDevices) {
        std::lock_guard<std::mutex> lock(primeMu_);
        if (primeStreams_[device].load(std::memory_order_relaxed) == nullptr) {
          cudaStream_t stream = nullptr;  // the least priority: it only ever records two events at once
          if (int err = check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                              "cudaStreamCreateWithFlags (priming captured calls' events)"))
            return err;
          primeStreams_[device].store(stream, std::memory_order_release);  // kept for the process's life
        }
      }
      cudaFunction_t function = nullptr;
      if (int err = check(loadRecordCopy(&function), "loading the payload copy kernel")) return err;
      int least = 0, greatest = 0;
      if (int err = check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange"))
        return err;
      if (device >= 0 && device < kDevices) {
        copyPriorities_[device].store(greatest, std::memory_order_relaxed);
        copyKernels_[device].store(function, std::memory_order_release);
      }
      return 0;
    });
  }
  int copyToHost(int device, void* dst, const void* src, size_t bytes, cudaStream_t stream, uint64_t* done,
                 uint64_t token, bool oneRank) override {
    if (bytes == 0) {
      *done = token;
      return kSignalled;
    }
    // Up to CopyOptions::kernelMaxBytes (kernelMaxBytesOneRank after a 1-rank call) a kernel writes the bytes into
    // the mapped staging memory and says when they are there; larger copies take the copy engine's bandwidth.
    const uintptr_t host = mappedHost_.load(std::memory_order_acquire);
    const auto at = reinterpret_cast<uintptr_t>(dst), flag = reinterpret_cast<uintptr_t>(done);
    const uintptr_t end = host + mappedBytes_.load(std::memory_order_relaxed);
    if (bytes <= copies_.kernelMaxFor(oneRank) && host != 0 && at >= host && at + bytes <= end && flag >= host &&
        flag + sizeof(uint64_t) <= end) {
      const uintptr_t mapped = mappedDevice_.load(std::memory_order_relaxed);
      void* onGpu = reinterpret_cast<void*>(mapped + (at - host));
      auto* flagOnGpu = reinterpret_cast<uint64_t*>(mapped + (flag - host));
      // A kernel goes to the current device's context: the stream's device must be current (a memcpy need not).
      const int launched = onDevice(device, [&] {
        // Through the driver where the kernel's handle is known (prepareDevice): the runtime's launch adds its own
        // bookkeeping on the job's thread.
        cudaFunction_t function =
            device >= 0 && device < kDevices ? copyKernels_[device].load(std::memory_order_acquire) : nullptr;
        if (function != nullptr && driver_.launchKernel != nullptr) {
          unsigned long long tokenArg = token;
          void* args[] = {&onGpu, const_cast<void**>(&src), &bytes, &flagOnGpu, &tokenArg};
          CUlaunchAttribute priority = {};
          priority.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
          priority.value.priority = copyPriorities_[device].load(std::memory_order_relaxed);
          CUlaunchConfig config = {};
          config.gridDimX = config.gridDimY = config.gridDimZ = 1;
          config.blockDimX = kCopyThreads;
          config.blockDimY = config.blockDimZ = 1;
          config.hStream = stream;
          config.attrs = &priority;
          config.numAttrs = copies_.highPriority ? 1 : 0;
          const CUresult err = driver_.launchKernel(&config, reinterpret_cast<CUfunction>(function), args, nullptr);
          if (err == CUDA_SUCCESS) return 0;
          setError("cuda record device: payload copy kernel: cuLaunchKernelEx: CUresult " +
                   std::to_string(static_cast<int>(err)));
          return static_cast<int>(err);
        }
        return check(launchRecordCopy(onGpu, src, bytes, flagOnGpu, token, stream, kCopyThreads),
                     "payload copy kernel");
      });
      return launched != 0 ? launched : kSignalled;
    }
    return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync (payload)");
  }
  void prepareBackgroundThread() override {
    // Relaxed: this thread's event queries stay legal while a training thread captures a CUDA graph in the default
    // (global) capture mode, and they do not invalidate that capture.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
  }
  int memoryInfo(int device, uint64_t* freeBytes, uint64_t* totalBytes) override {
    return onDevice(device, [&] {
      size_t free = 0, total = 0;
      if (int err = check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo")) return err;
      *freeBytes = free;
      *totalBytes = total;
      return 0;
    });
  }

 private:
  static constexpr int kDevices = 64;
  static constexpr unsigned kCopyThreads = 512;
  const CopyOptions copies_;
  std::atomic<cudaFunction_t> copyKernels_[kDevices] = {};  // by device, from prepareDevice
  std::atomic<int> copyPriorities_[kDevices] = {};          // the device's greatest stream priority
  std::mutex primeMu_;                                      // creates primeStreams_
  std::atomic<cudaStream_t> primeStreams_[kDevices] = {};   // primeCapturedEvents' stream, by device
  const DriverCalls driver_ = DriverCalls::resolve();
  // The staging memory's mapping (one allocation per recorder, made before its first call).
  std::atomic<uintptr_t> mappedHost_{0}, mappedDevice_{0};
  std::atomic<size_t> mappedBytes_{0};
};

}  // namespace

Status makeCudaRecordDevice(std::unique_ptr<RecordDevice>* out, const CopyOptions& copies) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::string why = err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device visible";
    cudaGetLastError();
    return Status::cudaError(std::move(why));
  }
  *out = std::make_unique<CudaRecordDevice>(copies);
  return Status::ok();
}

}  // namespace device
}  // namespace ranklens

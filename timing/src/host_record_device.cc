// SPDX-License-Identifier: Apache-2.0
// Record-mode primitives on the host: an event is a CLOCK_MONOTONIC timestamp taken when it is recorded, a copy
// happens at once (a host "stream" is the calling thread, so the received data is final when the call returns).
#include <time.h>

#include <cstdlib>
#include <cstring>

#include "ranklens/device.h"
#include "ranklens/trace.h"
#include "ranklens/record_device.h"

namespace ranklens {
namespace device {
namespace {

void setError(const std::string& text) { const_cast<std::string&>(lastError()) = text; }

struct HostEvent {
  int64_t ns = 0;
  bool recorded = false;
};

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class HostRecordDevice final : public RecordDevice {
 public:
  explicit HostRecordDevice(const CopyOptions& copies) : copies_(copies) {}
  const char* name() const override { return "host"; }
  int currentDevice(int* device) override {
    *device = 0;
    return 0;
  }
  void describe(std::string*, std::string*) override {}

  int createEvents(int, size_t count, std::vector<Event>* out) override {
    for (size_t i = 0; i < count; ++i) out->push_back(new HostEvent());
    return 0;
  }
  void destroyEvent(Event event) override { delete static_cast<HostEvent*>(event); }
  int recordEvent(Event event, cudaStream_t) override {
    auto* e = static_cast<HostEvent*>(event);
    e->ns = nowNs();
    e->recorded = true;
    return 0;
  }
  int recordEventInCapture(Event, cudaStream_t) override {
    setError("host record device: no CUDA graphs on the host");
    return 1;
  }
  int primeCapturedEvents(int, Event start, Event end) override {
    recordEvent(end, nullptr);
    return recordEvent(start, nullptr);
  }
  int queryEvent(Event) override { return 0; }
  int elapsedNs(Event start, Event end, int64_t* nanoseconds) override {
    auto* s = static_cast<HostEvent*>(start);
    auto* e = static_cast<HostEvent*>(end);
    if (!s->recorded || !e->recorded) {
      setError("host record device: elapsed time of an event that was never recorded");
      return 1;
    }
    *nanoseconds = e->ns - s->ns;
    return 0;
  }
  bool capturing(cudaStream_t) override { return false; }
  uint64_t captureId(cudaStream_t) override { return 0; }
  int allocPinned(void** ptr, size_t bytes) override {
    *ptr = malloc(bytes);
    if (*ptr == nullptr) {
      setError("host record device: out of memory");
      return 1;
    }
    return 0;
  }
  void freePinned(void* ptr) override { free(ptr); }
  int prepareDevice(int) override { return 0; }
  // As the CUDA device (CopyOptions::kernelMaxBytes): small copies signal their completion, larger ones are followed
  // by an event.
  int copyToHost(int, void* dst, const void* src, size_t bytes, cudaStream_t, uint64_t* done, uint64_t token,
                 bool oneRank) override {
    if (bytes > 0 && (dst == nullptr || src == nullptr)) {
      setError("host record device: copy with a null pointer");
      return 1;
    }
    if (bytes > 0) memcpy(dst, src, bytes);
    if (bytes > copies_.kernelMaxFor(oneRank)) return 0;
    __atomic_store_n(done, token, __ATOMIC_RELEASE);
    return kSignalled;
  }
  void prepareBackgroundThread() override {}
  int memoryInfo(int, uint64_t* freeBytes, uint64_t* totalBytes) override {
    if (trace::hostMemoryInfo(freeBytes, totalBytes)) return 0;
    setError("host record device: /proc/meminfo unreadable");
    return 1;
  }

 private:
  const CopyOptions copies_;
};

}  // namespace

std::unique_ptr<RecordDevice> makeHostRecordDevice(const CopyOptions& copies) {
  return std::make_unique<HostRecordDevice>(copies);
}

}  // namespace device
}  // namespace ranklens

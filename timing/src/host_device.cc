// SPDX-License-Identifier: Apache-2.0
#include <time.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>

#include "ranklens/device.h"
#include "ranklens/trace.h"
#include "reduce_copies.h"

namespace ranklens {
namespace device {

const std::string& lastError() {
  static thread_local std::string text;
  return text;
}

namespace {

void setError(const std::string& text) { const_cast<std::string&>(lastError()) = text; }

using ReduceRange = void (*)(void*, const void*, size_t, const Reduction&, size_t, size_t);
#define RANKLENS_HOST_REDUCE(type) reduce_copies::reduceRange<type>,
constexpr ReduceRange kReduceRanges[] = {RANKLENS_REDUCE_TYPES(RANKLENS_HOST_REDUCE)};
static_assert(sizeof(kReduceRanges) / sizeof(kReduceRanges[0]) == kReductionTypes, "one function per datatype");

class HostDevice final : public StreamDevice {
 public:
  const char* name() const override { return "host"; }

  int copy(void* dst, const void* src, size_t bytes, cudaStream_t) override {
    if (bytes == 0) return 0;
    if (dst == nullptr || src == nullptr) return fail("copy: null pointer");
    memmove(dst, src, bytes);
    return 0;
  }

  int fill(void* dst, size_t count, size_t elemSize, uint64_t pattern, cudaStream_t) override {
    if (count == 0) return 0;
    if (dst == nullptr) return fail("fill: null pointer");
    if (elemSize != 1 && elemSize != 2 && elemSize != 4 && elemSize != 8) return fail("fill: bad element size");
    auto* out = static_cast<unsigned char*>(dst);
    if (elemSize == 1) {
      memset(out, static_cast<int>(pattern & 0xff), count);
    } else {
      for (size_t i = 0; i < count; ++i) memcpy(out + i * elemSize, &pattern, elemSize);  // little-endian low bytes
    }
    return 0;
  }

  int reduceCopies(void* dst, const void* src, size_t count, const Reduction& reduction, cudaStream_t) override {
    if (count == 0) return 0;
    if (dst == nullptr || src == nullptr) return fail("reduceCopies: null pointer");
    if (reduction.datatype < 0 || reduction.datatype >= kReductionTypes) return fail("reduceCopies: bad datatype");
    kReduceRanges[reduction.datatype](dst, src, count, reduction, 0, 1);
    return 0;
  }

  // A paced hold is accounted as the CUDA device's kernel would end it, counting from now on the host's clock.
  int hold(const HoldRequest& request, cudaStream_t) override {
    if (const PaceRequest& p = request.pace; p.chain != 0) {
      std::lock_guard<std::mutex> lock(mu_);  // the chain is shared by the streams of one communicator
      auto* chain = reinterpret_cast<unsigned long long*>(p.chain);
      timespec t;
      clock_gettime(CLOCK_MONOTONIC, &t);
      const unsigned long long start = static_cast<unsigned long long>(t.tv_sec) * 1'000'000'000ull + t.tv_nsec;
      const unsigned long long end =
          pacedDeadline(start, request.nanoseconds, chain[0], chain[1], p.index, p.known, p.peerGapNs, p.lastNs);
      advanceChain(chain, end, p.index);
    }
    return 0;
  }

  int paceChain(uint64_t* chain) override {
    std::lock_guard<std::mutex> lock(mu_);
    chains_.emplace_back();
    *chain = reinterpret_cast<uint64_t>(chains_.back().data());
    return 0;
  }

  int alloc(void** ptr, size_t bytes) override {
    // 4 KiB alignment, as cuMem allocations are at least page aligned (window registration checks this).
    *ptr = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    return *ptr ? 0 : fail("alloc: out of host memory");
  }

  int free(void* ptr) override {
    ::free(ptr);
    return 0;
  }

  int currentDevice(int* device) override {
    *device = 0;
    return 0;
  }

  void describe(std::string* name, std::string* uuid) override {
    name->clear();
    uuid->clear();
  }

  int memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) override {
    return trace::hostMemoryInfo(freeBytes, totalBytes) ? 0 : fail("memoryInfo: /proc/meminfo unreadable");
  }
  int allocHost(void** ptr, size_t bytes) override { return alloc(ptr, bytes); }
  int freeHost(void* ptr) override { return free(ptr); }
  int fence(cudaStream_t, uint64_t* token) override {
    *token = 0;
    return 0;
  }
  bool passed(uint64_t) override { return true; }
  int upload(void* dst, const void* src, size_t bytes, int, uint64_t* token) override {
    *token = 0;
    if (bytes > 0 && dst != src) memcpy(dst, src, bytes);
    return 0;
  }
  Calibration calibrate() override { return {}; }  // holds are accounted exactly; copies take no stream time

 private:
  int fail(const char* what) {
    setError(std::string("host device: ") + what);
    return 1;
  }
  std::mutex mu_;
  std::deque<std::array<unsigned long long, 2>> chains_;  // peer_pacing: {end, index}, stable addresses
};

}  // namespace

std::unique_ptr<StreamDevice> makeHostDevice() { return std::make_unique<HostDevice>(); }

}  // namespace device
}  // namespace ranklens

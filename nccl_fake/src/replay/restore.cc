// SPDX-License-Identifier: Apache-2.0
// Payload restore: the prefetcher started with the session, and each call's recorded payload copied into its receive
// buffer (value fidelity: every payload; timing: the control values up to payload_max_bytes).
#include "restore.h"

#include <algorithm>
#include <functional>
#include <string>

#include "nccl_fake/debug.h"
#include "nccl_fake/replay.h"
#include "nccl_fake/runtime.h"
#include "session.h"

// The breakpoint target of docs/debugging.md: called with the call and the bytes about to be restored.
extern "C" __attribute__((noinline, used)) void ranklens_restore_payload(uint64_t comm, uint64_t seq, const char* op,
                                                                         void* recvbuff, const void* data,
                                                                         size_t bytes) {
  asm volatile("" : : "r"(comm), "r"(seq), "r"(op), "r"(recvbuff), "r"(data), "r"(bytes) : "memory");
}

namespace nccl_fake {
namespace replay {

using ranklens::Status;
using ranklens::config::Fidelity;
using ranklens::trace::PayloadPrefetcher;
using ranklens::trace::RecordedCall;

namespace {

// payload_device_bytes: the setting, or for auto what the recorded job left of its GPU's memory (its manifest's
// device_memory_* counters) and this GPU has (ranklens::trace::autoDeviceStageBytes), logged with its basis. Never
// more than `arenaBytes`, the pinned memory the payloads come from.
uint64_t deviceStageBytes(const ranklens::trace::Recording& recording, uint64_t largestStepBytes,
                          const ranklens::config::Settings& st, ranklens::device::StreamDevice& device,
                          uint64_t arenaBytes) {
  if (st.payload_device_bytes != ranklens::config::Settings::kAutoDeviceBytes)
    return std::min<uint64_t>(st.payload_device_bytes, arenaBytes);
  ranklens::trace::DeviceStageSizing in;
  in.largestStepBytes = largestStepBytes;
  in.arenaBytes = arenaBytes;
  ranklens::trace::setRecordedDeviceMemory(recording.manifest(), &in);
  if (device.memoryInfo(&in.freeBytes, &in.totalBytes) != 0) in.freeBytes = in.totalBytes = 0;
  std::string basis;
  const uint64_t bytes = ranklens::trace::autoDeviceStageBytes(in, &basis);
  INFO(kSubRanklens, "replay: payload_device_bytes auto: %.0f MiB of device memory (%s)", bytes / 1048576.0,
       basis.c_str());
  return bytes;
}

// The prefetcher's pinned arena and threads: prefetch_bytes (auto: from the recording's largest step), and at timing
// fidelity only the control payloads in no more than the arena they need.
PayloadPrefetcher::Options prefetchOptions(Restore* r, Fidelity fidelity, const ranklens::config::Settings& st) {
  PayloadPrefetcher::Options options;
  options.arenaBytes = st.prefetch_bytes;
  if (st.prefetch_bytes == 0) {
    options.arenaBytes =
        ranklens::trace::autoArenaBytes(r->largestStepPayloadBytes, ranklens::trace::hostMemoryBytes());
    if (fidelity == Fidelity::kValue)
      INFO(kSubRanklens,
           "replay: prefetch_bytes auto: %.0f MiB of pinned memory (the recording's largest step "
           "holds %.0f MiB of payloads)",
           options.arenaBytes / 1048576.0, r->largestStepPayloadBytes / 1048576.0);
  }
  if (fidelity == Fidelity::kTiming) {
    options.maxPayloadBytes = r->controlPayloadBytes;
    options.arenaBytes =
        std::min<uint64_t>(options.arenaBytes, std::max<uint64_t>(16ull << 20, 4 * r->controlPayloadBytes));
  }
  options.threads = st.prefetch_threads > 0 ? st.prefetch_threads : workerThreads();
  return options;
}

// Device memory the payloads move on into (on the device current now, the replayed rank's); none (arenaBytes 0)
// when there is no current device or `bytes` is 0.
PayloadPrefetcher::DeviceStage deviceStage(ranklens::device::StreamDevice& device, uint64_t bytes) {
  PayloadPrefetcher::DeviceStage stage;
  int ordinal = 0;
  if (bytes == 0 || device.currentDevice(&ordinal) != 0) return stage;
  stage.arenaBytes = bytes;
  stage.alloc = [&device](size_t n) -> void* {
    void* p = nullptr;
    return device.alloc(&p, n) == 0 ? p : nullptr;
  };
  stage.free = [&device](void* p) { device.free(p); };
  stage.upload = [&device, ordinal](void* dst, const void* src, size_t n, uint64_t* token) {
    return device.upload(dst, src, n, ordinal, token) == 0;
  };
  stage.passed = [&device](uint64_t token) { return device.passed(token); };
  return stage;
}

// Whether this fidelity restores the call's recorded payload (see Restore::controlPayloadBytes).
bool restores(const Session& s, const RecordedCall* rc) {
  if (rc == nullptr || !rc->payload) return false;
  return s.fidelity == Fidelity::kValue ||
         (s.fidelity == Fidelity::kTiming && rc->payload->rawBytes <= s.restore.controlPayloadBytes);
}

// A copy captured into a graph would put this one recording's bytes into the buffer at every launch of the graph
// (and its fence would be an event of the capture): the recorded run did not capture this call, so its payload is
// dropped and the call gets the fill semantics.
void skipCaptured(Session* s, const CallInfo& info) {
  static std::once_flag warned;
  std::call_once(warned, [&] {
    WARN(
        "replay: %s comm %lu seq %lu is captured into a CUDA graph, but the recording has its payload (the "
        "recorded run did not capture it): not restored, the receive buffer gets the fill semantics "
        "(replay_payloads_skipped_captured counts such calls)",
        info.opName, static_cast<unsigned long>(info.comm->id), static_cast<unsigned long>(info.seq));
  });
  PayloadPrefetcher::Staged staged;
  std::string error;
  if ((error = s->restore.prefetcher->acquire(info.recorded, &staged).message()).empty() || staged.data)
    s->restore.prefetcher->release(info.recorded, nullptr);
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.payloadsSkippedCaptured++;
  s->counters.filledWithoutPayload++;
}

// The edge of a failed restore: said as it must be (an unreadable payload whatever NCCL_DEBUG is, a failed copy as
// a WARN), and NCCL's code. The per-call path builds a Status only on failure, so a restore costs no Status.
ncclResult_t restoreFailed(const Status& status) {
  if (status.code() == Status::Code::kSystemError)
    SAY_ERROR("%s", status.message().c_str());
  else
    WARN("%s", status.message().c_str());
  return ncclCode(status.code());
}

// A recorded payload that cannot be read is a wrong answer, not a detail: the receive buffer would get the fill and
// every value computed from it would be another run's. Said on stderr whatever NCCL_DEBUG is, because a replay that
// reports success with a filled call is the failure on_payload_error exists to prevent. Fails under
// on_payload_error: error; else the call is filled.
Status payloadUnreadable(Session* s, const CallInfo& info, const std::string& error) {
  const bool stop = s->restore.onError == ranklens::config::OnPayloadError::kError;
  const std::string what = "replay: " + std::string(info.opName) + " comm " + std::to_string(info.comm->id) + " seq " +
                           std::to_string(info.seq) + ": the recorded payload cannot be restored: " + error;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->counters.payloadFailures++;
    if (!stop) s->counters.filledWithoutPayload++;
  }
  if (stop)
    return Status::systemError(what +
                               "; the call fails with ncclSystemError (check the trace with rlpayload "
                               "verify; RANKLENS_ON_PAYLOAD_ERROR=warn fills the call and goes on)");
  SAY_WARNING(
      "%s; the receive buffer gets the fill semantics: this rank's values are not the recorded run's from "
      "this call on (on_payload_error: warn)",
      what.c_str());
  return Status::ok();
}

// Copies the staged payload into the receive buffer on the call's stream and releases it once the copy has passed.
ncclResult_t copyStaged(Session* s, const CallInfo& info, const PayloadPrefetcher::Staged& staged) {
  ranklens_restore_payload(info.comm->id, info.seq, info.opName, info.recvbuff, staged.data, staged.bytes);
  info.restoredBytes = staged.bytes;
  info.restoredFromDevice = staged.onDevice;
  auto& device = Runtime::get().device();
  uint64_t fence = 0;
  const int copyErr = device.copy(info.recvbuff, staged.data, staged.bytes, info.stream);
  const int fenceErr = copyErr == 0 ? device.fence(info.stream, &fence) : 0;
  if (copyErr != 0 || fenceErr != 0) {
    // Without a fence the copy's completion is unknown: wait for the stream's work to settle by never reusing it.
    s->restore.prefetcher->release(info.recorded, copyErr == 0 ? std::function<bool()>([] { return false; }) : nullptr);
    return restoreFailed(Status::cudaError(
        "replay: " + std::string(info.opName) + " comm " + std::to_string(info.comm->id) + " seq " +
        std::to_string(info.seq) + ": restoring the recorded payload failed: " + ranklens::device::lastError()));
  }
  s->restore.prefetcher->release(info.recorded, [&device, fence] { return device.passed(fence); });
  std::lock_guard<std::mutex> lock(s->mu);
  s->counters.payloadsRestored++;
  s->counters.payloadBytesRestored += staged.bytes;
  return ncclSuccess;
}

// restorePayload with the session loaded.
bool restoreInto(Session* s, const CallInfo& info, ncclResult_t* result) {
  const uint64_t bytes = bytesOf(info);
  if (bytes == 0 || info.op == ranklens::events::Op::kSend) return false;
  if (!restores(*s, info.recorded) || !s->restore.prefetcher) {
    if (s->fidelity == Fidelity::kValue) {  // at timing only control payloads are restored: the rest is expected
      std::lock_guard<std::mutex> lock(s->mu);
      s->counters.filledWithoutPayload++;
    }
    return false;
  }
  if (info.captured) {
    skipCaptured(s, info);
    return false;
  }
  PayloadPrefetcher::Staged staged;
  std::string error;
  if (!(error = s->restore.prefetcher->acquire(info.recorded, &staged).message()).empty() || staged.bytes != bytes) {
    if (error.empty())
      error = "recorded " + std::to_string(staged.bytes) + " bytes, the call receives " + std::to_string(bytes);
    if (staged.data) s->restore.prefetcher->release(info.recorded, nullptr);
    const Status failure = payloadUnreadable(s, info, error);
    if (failure.isOk()) return false;  // on_payload_error: warn: filled
    *result = restoreFailed(failure);
    return true;
  }
  *result = copyStaged(s, info, staged);
  return true;
}

}  // namespace

void startPrefetcher(Session* s, const ranklens::config::Settings& st) {
  if (!s->recording || s->fidelity == Fidelity::kStructure || s->recording->payloadOrder().empty()) return;
  Restore& r = s->restore;
  r.largestStepPayloadBytes = s->recording->largestStepPayloadBytes();
  const PayloadPrefetcher::Options options = prefetchOptions(&r, s->fidelity, st);
  r.prefetchArenaBytes = options.arenaBytes;
  auto& device = Runtime::get().device();
  const uint64_t deviceBytes =
      deviceStageBytes(*s->recording, r.largestStepPayloadBytes, st, device, options.arenaBytes);
  r.prefetcher = std::make_unique<PayloadPrefetcher>(
      *s->recording, options,
      [&device](size_t bytes) -> void* {
        void* p = nullptr;
        return device.allocHost(&p, bytes) == 0 ? p : nullptr;
      },
      [&device](void* p) { device.freeHost(p); }, deviceStage(device, deviceBytes));
  if (!r.prefetcher->arenaReady())
    WARN("replay: cannot allocate %llu bytes of pinned memory (prefetch_bytes); payloads are decoded when needed",
         static_cast<unsigned long long>(options.arenaBytes));
  else if (deviceBytes > 0 && !r.prefetcher->deviceReady())
    WARN(
        "replay: cannot allocate %llu bytes of device memory (payload_device_bytes); payloads are copied from "
        "pinned host memory",
        static_cast<unsigned long long>(deviceBytes));
}

bool restorePayload(const CallInfo& info, ncclResult_t* result) {
  *result = ncclSuccess;
  Session* s = loaded;
  if (s == nullptr || s->fidelity == Fidelity::kStructure) return false;
  return restoreInto(s, info, result);
}

}  // namespace replay
}  // namespace nccl_fake

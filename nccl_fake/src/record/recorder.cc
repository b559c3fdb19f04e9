// SPDX-License-Identifier: Apache-2.0
// Record mode's recorder and writer hand-off: the record device and the CallRecorder (GPU durations, pinned
// staging for payloads) built from the settings, the kernel clock (timing_clock: kernel), the trace writer's
// options, and flush with the recorder's counters. The training thread only enqueues; the recorder's background
// thread and the writer's threads do the waiting.
#include <cstdlib>

#include "nccl_fake/profiler_plugin.h"
#include "record_state.h"

namespace nccl_fake {
namespace record {

using ranklens::timing::CallRecorder;
using ranklens::timing::KernelClock;
using ranklens::trace::RecordType;
namespace config = ranklens::config;

const real::Library& library() { return real::library(Runtime::get().settings().real_nccl); }

State& state() {
  static State* s = new State();  // never destroyed: NCCL is called from atexit handlers and static destructors
  return *s;
}

// Ranks sharing this host, as the launcher says (torchrun, Open MPI, MPICH/Hydra); 1 when none does.
int localRanks() { return ranklens::config::readContext().local_ranks; }

namespace {

std::string describeWriter(const config::Settings& s, const real::Library& lib) {
  std::string payloads = config::toString(s.payloads);
  if (s.payloads == config::Payloads::kSmall) payloads += " (<= " + std::to_string(s.payload_max_bytes) + " B)";
  return "ranklens libnccl.so.2 record: real NCCL " + lib.path + " (" + std::to_string(lib.version) + "), payloads " +
         payloads;
}

ranklens::device::CopyOptions copyOptions(const config::Settings& s) {
  ranklens::device::CopyOptions copies;
  copies.kernelMaxBytes = s.payload_copy_kernel_bytes;
  copies.kernelMaxBytesOneRank = s.payload_copy_kernel_bytes_one_rank;
  copies.highPriority = s.payload_copy_priority == config::CopyPriority::kHigh;
  return copies;
}

std::unique_ptr<ranklens::device::RecordDevice> makeDevice(const config::Settings& s) {
  std::unique_ptr<ranklens::device::RecordDevice> device;
  if (s.device == config::DeviceKind::kHost) return ranklens::device::makeHostRecordDevice(copyOptions(s));
  const ranklens::Status made = ranklens::device::makeCudaRecordDevice(&device, copyOptions(s));
  if (made.isOk()) return device;
  if (s.device == config::DeviceKind::kCuda)
    WARN("record: device 'cuda' requested but no usable GPU (%s); timing uses host clocks", made.message().c_str());
  return ranklens::device::makeHostRecordDevice(copyOptions(s));
}

CallRecorder::Options recorderOptions(const config::Settings& s) {
  CallRecorder::Options options;
  options.payloads = s.payloads != config::Payloads::kNone;
  const bool autoStaging = s.staging_bytes == config::Settings::kAutoStagingBytes;
  options.stagingBytes = autoStaging
                             ? ranklens::timing::autoStagingBytes(s.payloads == config::Payloads::kAll,
                                                                  ranklens::trace::hostMemoryBytes(), localRanks())
                             : s.staging_bytes;
  options.stagingLeastBytes = autoStaging ? 64u << 20 : 0;  // auto takes less where the host will not pin that much
  options.waitWhenFull = s.staging_full == config::StagingFull::kWait;
  if (s.payloads == config::Payloads::kAll) {
    // Every payload stored: keep room for the control values a timing replay restores (staging full of gradients
    // would otherwise skip them under skip, or hold them up under wait).
    options.controlBytes = s.payload_max_bytes;
    options.controlReserveBytes = ranklens::timing::kControlReserveBytes;
  }
  options.timeCaptured = s.captured_timing == config::CapturedTiming::kEvents;
  options.pollMicros = s.timing_poll_us;
  return options;
}

void prepareStaging(CallRecorder& rec, size_t wanted) {
  if (const ranklens::Status staged = rec.prepareStaging(); !staged.isOk())
    WARN(
        "record: cannot allocate %llu bytes of pinned staging memory (%s); payloads are skipped and counted. "
        "Lower RANKLENS_STAGING_BYTES",
        static_cast<unsigned long long>(wanted), staged.message().c_str());
  else if (rec.stagingBytes() < wanted)
    WARN("record: %llu MiB of pinned staging memory could not be allocated; using %llu MiB (staging_bytes: auto)",
         static_cast<unsigned long long>(wanted >> 20), static_cast<unsigned long long>(rec.stagingBytes() >> 20));
}

void createRecorder(State& st) {
  Runtime& rt = Runtime::get();
  const auto& s = rt.settings();
  st.device = makeDevice(s);
  preparePolicy();
  const CallRecorder::Options options = recorderOptions(s);
  // The trace may have been opened before this first communicator (a stage marker came first): name the GPU now.
  if (auto* writer = rt.existingWriter()) {
    std::string gpuName, gpuUuid;
    st.device->describe(&gpuName, &gpuUuid);
    writer->updateManifest([&](ranklens::trace::Manifest* m) {
      m->gpu_name = gpuName;
      m->gpu_uuid = gpuUuid;
    });
  }
  st.recorder = std::make_unique<CallRecorder>(
      *st.device, options, [](const ranklens::trace::Timing& t) { Runtime::get().emit(RecordType::kTiming, t); },
      [](const ranklens::trace::PayloadRef& ref, const void* data, size_t bytes, std::function<void()> release) {
        Runtime::get().emitPayload(ref, data, bytes, std::move(release));
      });
  prepareStaging(*st.recorder, options.stagingBytes);
  rt.setBeforeClose([] { flush(); });
  INFO(kSubInit | kSubRanklens, "record: recorder ready on the %s device, payloads %s, staging %llu bytes%s",
       st.device->name(), config::toString(s.payloads), static_cast<unsigned long long>(st.recorder->stagingBytes()),
       s.staging_bytes == config::Settings::kAutoStagingBytes ? " (auto)" : "");
}

}  // namespace

CallRecorder* recorder() {
  State& st = state();
  std::call_once(st.recorderOnce, [&st] { createRecorder(st); });
  return st.recorder.get();
}

// Set before any record can be written: a stage marker may open the trace before the first communicator exists,
// and a writer opened without these options would drop call records behind a stalled payload stream.
void installWriterSetup() {
  Runtime& rt = Runtime::get();
  const auto& s = rt.settings();
  rt.setWriterSetup([&s](ranklens::trace::Manifest* manifest, ranklens::trace::WriterOptions* writer) {
    const real::Library& lib = library();
    manifest->nccl_version = lib.version;
    if (auto* device = state().device.get()) device->describe(&manifest->gpu_name, &manifest->gpu_uuid);
    manifest->writer = describeWriter(s, lib);
    if (s.payloads == config::Payloads::kNone) return;
    // Full capture spends these threads compressing and writing (payload_threads and payload_zstd_level); a
    // recording of control values only needs few.
    const bool controlValuesOnly = s.payloads == config::Payloads::kSmall && s.payload_max_bytes <= (1u << 20);
    writer->compressionThreads = s.payload_threads > 0 ? s.payload_threads
                                                       : ranklens::trace::autoCompressionThreads(
                                                             manifest->cpus, localRanks(), controlValuesOnly);
    writer->zstdLevel = s.payload_zstd_level;
    using WriterShuffle = ranklens::trace::WriterOptions::Shuffle;
    writer->shuffle = s.payload_shuffle == config::PayloadShuffle::kOff  ? WriterShuffle::kOff
                      : s.payload_shuffle == config::PayloadShuffle::kOn ? WriterShuffle::kAlways
                                                                         : WriterShuffle::kAuto;
    writer->queueBytes = std::max<size_t>(writer->queueBytes, s.payload_queue_bytes);
    writer->recordReserveBytes = 16u << 20;  // a stalled payload stream never crowds out call records
  });
}

// Before the real NCCL creates its first communicator, which is when it loads its profiler plugin: this library,
// through NCCL_PROFILER_PLUGIN.
void installKernelClock() {
  if (Runtime::get().settings().timing_clock != config::TimingClock::kKernel) return;
  if (const ranklens::Status installed = profiler::install(); !installed.isOk()) {
    WARN("record: timing_clock kernel is unavailable (%s); durations come from CUDA events",
         installed.message().c_str());
    return;
  }
  State& st = state();
  st.kernelClock = std::make_unique<KernelClock>(
      [](const ranklens::trace::Timing& t) { Runtime::get().emit(RecordType::kTiming, t); });
  profiler::attach(st.kernelClock.get());
  INFO(kSubInit | kSubRanklens, "record: durations from NCCL's kernel timestamps (profiler plugin %s)",
       getenv("NCCL_PROFILER_PLUGIN"));
}

namespace {

// Payloads lost to a full or too small staging area, or a job held back by it, are said at the end (and again only
// when more were lost since): the counters alone would leave a recording that silently lacks some of its payloads.
void warnOfStaging(const ranklens::timing::RecorderStats& s, size_t stagingBytes, size_t controlReserveBytes) {
  static std::mutex mu;
  static uint64_t skippedSaid = 0, tooLargeSaid = 0, waitedSaid = 0;
  std::lock_guard<std::mutex> lock(mu);
  auto sizeText = [](size_t bytes) {
    return bytes >= (1u << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
  };
  const std::string staging = sizeText(stagingBytes);
  if (s.payloadsSkippedFull > skippedSaid) {
    skippedSaid = s.payloadsSkippedFull;
    WARN("record: %llu of %llu payloads were skipped because staging (staging_bytes, %s) was full: %s",
         static_cast<unsigned long long>(s.payloadsSkippedFull),
         static_cast<unsigned long long>(s.payloadsSkippedFull + s.payloadsStaged), staging.c_str(),
         ranklens::trace::advice::kStagingFull);
  }
  if (s.payloadsSkippedTooLarge > tooLargeSaid) {
    tooLargeSaid = s.payloadsSkippedTooLarge;
    // With payloads: all a larger payload may not take the room kept for control values: say so where it is kept.
    const std::string kept = controlReserveBytes == 0 ? std::string()
                                                      : ", less the " + sizeText(controlReserveBytes) +
                                                            " kept for payloads up to payload_max_bytes";
    WARN("record: %llu payloads larger than all of staging (staging_bytes, %s%s) were skipped: %s",
         static_cast<unsigned long long>(s.payloadsSkippedTooLarge), staging.c_str(), kept.c_str(),
         ranklens::trace::advice::kStagingTooSmall);
  }
  if (s.waitsForStaging > waitedSaid) {
    waitedSaid = s.waitsForStaging;
    INFO(kSubInit | kSubRanklens,
         "record: the job waited %.1f ms in all for room in staging (%llu times; staging_bytes %s)",
         s.stagingWaitNs / 1e6, static_cast<unsigned long long>(s.waitsForStaging), staging.c_str());
  }
}

void drainKernelClock(KernelClock& clock) {
  if (!clock.drain(2'000'000'000))
    WARN(
        "record: %llu kernel-clock durations still pending after 2 s (NCCL has not reported all their kernel "
        "channels)",
        static_cast<unsigned long long>(clock.stats().pending));
  auto* writer = Runtime::get().writer();
  if (writer == nullptr) return;
  const ranklens::timing::KernelClockStats k = clock.stats();
  const std::pair<const char*, uint64_t> values[] = {{"kernel_clock_timed", k.timed},
                                                     {ranklens::trace::counter::kKernelClockUnmatched, k.unmatched},
                                                     {ranklens::trace::counter::kKernelClockIncomplete, k.incomplete},
                                                     {"kernel_clock_foreign_tasks", k.foreignTasks}};
  for (const auto& [name, value] : values) writer->setCounter(name, value);
}

void writeRecorderCounters(CallRecorder& rec, ranklens::trace::TraceWriter& writer) {
  const ranklens::timing::RecorderStats s = rec.stats();
  const std::pair<const char*, uint64_t> values[] = {
      {"timings_measured", s.timed},
      {"timings_captured_in_graph", s.captured},
      {"timings_captured_measured", s.capturedTimed},
      {ranklens::trace::counter::kTimingErrors, s.timingErrors},
      {"payloads_staged", s.payloadsStaged},
      {"payload_bytes_staged", s.payloadBytesStaged},
      {ranklens::trace::counter::kPayloadsSkippedStagingFull, s.payloadsSkippedFull},
      {ranklens::trace::counter::kPayloadsSkippedTooLarge, s.payloadsSkippedTooLarge},
      {ranklens::trace::counter::kPayloadsSkippedCaptured, s.payloadsSkippedCaptured},
      {ranklens::trace::counter::kPayloadCopyFailures, s.payloadsFailed},
      {"payloads_copy_engine", s.payloadsByCopyEngine},
      {ranklens::trace::counter::kStagingWaits, s.waitsForStaging},
      {ranklens::trace::counter::kStagingWaitNs, s.stagingWaitNs},
  };
  for (const auto& [name, value] : values) writer.setCounter(name, value);
  warnOfStaging(s, rec.stagingBytes(), rec.controlReserveBytes());
  if (s.deviceMemoryTotal > 0) {
    writer.setCounter(ranklens::trace::counter::kDeviceMemoryTotal, s.deviceMemoryTotal);
    writer.setCounter(ranklens::trace::counter::kDeviceMemoryLeastFree, s.deviceMemoryLeastFree);
  }
}

}  // namespace

void flush() {
  CallRecorder* rec = state().recorder.get();
  if (rec == nullptr) {  // no communicator yet: stage markers may still be queued
    Runtime::get().flushEvents();
    return;
  }
  if (!rec->drain(2'000'000'000) && rec->stats().pending > 0)
    WARN("record: GPU durations still pending after 2 s; they are not in the trace");
  if (KernelClock* clock = state().kernelClock.get()) drainKernelClock(*clock);
  rec->sampleDeviceMemory();
  if (auto* writer = Runtime::get().writer()) writeRecorderCounters(*rec, *writer);
  Runtime::get().flushEvents();
}

}  // namespace record
}  // namespace nccl_fake

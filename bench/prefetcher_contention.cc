// SPDX-License-Identifier: Apache-2.0
// How long a replayed call waits in the payload prefetcher (acquire + release on the calling thread) while its
// workers keep thousands of small payloads decoded and uploaded ahead: the shape of a DeepSpeed ZeRO-3 timing replay
// (2829 parameter all-gathers of 1.5-6 KiB restored per run, 8 worker threads on a 32-core host, a call every
// ~80 us). No GPU: uploads and copies are fakes that complete a fixed time after they were enqueued, as a CUDA event
// would pass; what is measured is the prefetcher's own locking and bookkeeping.
//
// --payload-mib N instead gives every call a payload of N MiB of fp32 gradient-like values (zstd --level, -1 as
// recorded by default), all of them restored (a value replay of large buckets), no device stage: how many GB/s the
// workers decode (read, zstd, CRC-32, and restoring byte planes) into the pinned arena, and how long the calls wait
// for them, by --threads. --pool takes the values from real payload bytes (rlpayload export -f raw) instead of
// normally distributed ones; --shuffle off stores them as they are instead of as byte planes (format 1.8).
//
//   prefetcher_contention [--payloads 4000] [--threads 8] [--gap-us 80] [--upload-us 30] [--copy-us 20] [--json]
//   prefetcher_contention --payload-mib 25 --payloads 40 --threads 4 --gap-us 0 [--level -1] [--shuffle on|off]
//                         [--pool grad1.raw grad2.raw ...] [--json]
//
// bench/results/replay/prefetcher_contention.json and prefetcher_throughput.jsonl hold the latest runs with their
// commit, machine, command and date (bench/README.md).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <nccl.h>

#include "ranklens/events.h"
#include "ranklens/payload_prefetcher.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"

namespace {

using Clock = std::chrono::steady_clock;
using ranklens::trace::PayloadPrefetcher;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A rank whose every call received one small payload (1.5, 4.5 or 6 KiB, as ZeRO-3's parameter all-gathers), or
// one of `largeBytes` of fp32 values drawn like gradients (a slice of one 64 MiB pool per call, at another offset).
std::string writeRecording(const std::string& dir, int payloads, size_t largeBytes, int level, bool shuffle,
                           const std::vector<std::string>& poolFiles) {
  if (system(("rm -rf '" + dir + "'").c_str()) != 0) return "cannot clear " + dir;
  ranklens::trace::Manifest m;
  m.mode = "record";
  std::string error;
  ranklens::trace::WriterOptions options;
  if (largeBytes > 0) options.zstdLevel = level;
  options.shuffle =
      shuffle ? ranklens::trace::WriterOptions::Shuffle::kAlways : ranklens::trace::WriterOptions::Shuffle::kOff;
  std::unique_ptr<ranklens::trace::TraceWriter> w;
  error = ranklens::trace::TraceWriter::create(dir, m, options, &w).message();
  if (!w) return error;
  std::vector<uint8_t> pool;
  for (const std::string& file : poolFiles) {  // real payload bytes (rlpayload export -f raw), one after another
    std::ifstream in(file, std::ios::binary);
    pool.insert(pool.end(), std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!poolFiles.empty() && pool.size() < 4096)
    return "--pool: the files hold " + std::to_string(pool.size()) + " bytes";
  if (largeBytes > 0 && pool.size() < 4096) {
    std::vector<float> values((64u << 20) / sizeof(float));
    std::mt19937 random(1);
    std::normal_distribution<float> gradient(0.0f, 1e-3f);
    for (float& v : values) v = gradient(random);
    pool.assign(reinterpret_cast<const uint8_t*>(values.data()),
                reinterpret_cast<const uint8_t*>(values.data() + values.size()));
  }
  std::vector<uint8_t> data;
  for (int i = 0; i < payloads; ++i) {
    static const size_t kSizes[] = {1536, 1536, 4608, 6144};
    if (largeBytes > 0) {
      data.resize(largeBytes);
      for (size_t at = 0, from = (static_cast<size_t>(i) * 4096 * 1021) % pool.size(); at < largeBytes;) {
        const size_t n = std::min(largeBytes - at, pool.size() - from);
        memcpy(data.data() + at, pool.data() + from, n);
        at += n;
        from = 0;
      }
    } else {
      data.assign(kSizes[i % 4], static_cast<uint8_t>(i));
    }
    ranklens::events::Call c;
    c.seq = static_cast<uint64_t>(i);
    c.op = static_cast<int>(ranklens::events::Op::kAllGather);
    c.datatype =
        largeBytes > 0 ? ncclFloat32 : ncclInt8;  // fp32 values (stored as byte planes with --shuffle on), or bytes
    c.bytes = data.size();
    c.count = data.size() / ranklens::events::datatypeBytes(c.datatype);
    w->append(ranklens::trace::RecordType::kCall, c);
    ranklens::trace::PayloadRef ref;
    ref.seq = c.seq;
    ref.op = c.op;
    ref.datatype = c.datatype;
    ref.count = c.count;
    if (!w->appendPayload(ref, data.data(), data.size(), ranklens::trace::BackPressure::kWait))
      return "appendPayload failed";
  }
  return w->close().isOk() ? "" : "close failed";
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Calling-thread time in the payload prefetcher with thousands of small payloads in flight"};
  int payloads = 4000, threads = 8, gapUs = 80, uploadUs = 30, copyUs = 20, level = -1;
  double payloadMib = 0;
  bool json = false;
  std::string shuffle = "on";
  std::vector<std::string> poolFiles;
  app.add_option("--payloads", payloads, "calls, one payload each")->check(CLI::Range(10, 1000000));
  app.add_option("--threads", threads, "prefetcher worker threads (replay: hardware threads / 4, 2..8)")
      ->check(CLI::Range(1, 64));
  app.add_option("--gap-us", gapUs, "the program's time between two calls")->check(CLI::Range(0, 100000));
  app.add_option("--upload-us", uploadUs, "an upload completes this long after it was enqueued")
      ->check(CLI::Range(0, 100000));
  app.add_option("--copy-us", copyUs, "a restored payload's copy completes this long after its call")
      ->check(CLI::Range(0, 100000));
  app.add_option("--payload-mib", payloadMib,
                 "every payload this many MiB of fp32 gradient-like values, all restored, no device stage "
                 "(decoding throughput); 0: ZeRO-3's small control payloads")
      ->check(CLI::Range(0.0, 1024.0));
  app.add_option("--level", level, "with --payload-mib: zstd level of the recorded payloads (recording's default -1)")
      ->check(CLI::Range(-100, 19));
  app.add_option("--shuffle", shuffle, "with --payload-mib: store the values as byte planes (recording's default)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--pool", poolFiles, "with --payload-mib: take the values from these raw payload files")
      ->check(CLI::ExistingFile);
  app.add_flag("--json", json, "print one JSON object instead of text");
  CLI11_PARSE(app, argc, argv);
  const size_t largeBytes = static_cast<size_t>(payloadMib * (1 << 20)) / 4 * 4;

  const char* tmp = getenv("TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/prefetcher-contention-" + std::to_string(getpid());
  if (std::string error = writeRecording(dir + "/rank0", payloads, largeBytes, level, shuffle == "on", poolFiles);
      !error.empty()) {
    fprintf(stderr, "prefetcher_contention: writing the recording in %s failed: %s\n", dir.c_str(), error.c_str());
    return 1;
  }
  std::string error;
  std::unique_ptr<ranklens::trace::Recording> recording;
  error = ranklens::trace::Recording::open(dir + "/rank0", -1, &recording).message();
  if (!recording) {
    fprintf(stderr, "prefetcher_contention: %s\n", error.c_str());
    return 1;
  }

  // Uploads: a token passes uploadUs after it was enqueued (the device stage copies at once: the bytes are right).
  std::mutex mu;
  std::map<uint64_t, int64_t> due;
  uint64_t nextToken = 1;
  std::atomic<uint64_t> polls{0};
  PayloadPrefetcher::DeviceStage stage;
  stage.arenaBytes = 16u << 20;  // a timing replay's: min(payload_device_bytes, its 16 MiB pinned arena)
  stage.alloc = [](size_t bytes) { return malloc(bytes); };
  stage.free = [](void* p) { free(p); };
  stage.upload = [&](void* dst, const void* src, size_t bytes, uint64_t* token) {
    memcpy(dst, src, bytes);
    std::lock_guard<std::mutex> lock(mu);
    *token = nextToken++;
    due[*token] = nowNs() + int64_t{uploadUs} * 1000;
    return true;
  };
  stage.passed = [&](uint64_t token) {
    polls++;
    std::lock_guard<std::mutex> lock(mu);
    auto it = due.find(token);
    if (it == due.end() || nowNs() < it->second) return it == due.end();
    due.erase(it);
    return true;
  };
  PayloadPrefetcher::Options options;
  options.arenaBytes = 16u << 20;
  options.maxPayloadBytes = 64u << 10;
  options.threads = threads;
  if (largeBytes > 0) {  // a value replay: every payload, prefetch_bytes' default arena, nothing moved to a device
    options.arenaBytes = 512u << 20;
    options.maxPayloadBytes = 0;
    stage = PayloadPrefetcher::DeviceStage();
  }
  std::vector<double> waitNs;
  int fromDevice = 0;
  double loopSeconds = 0;
  ranklens::trace::PrefetchStats stats;
  {
    PayloadPrefetcher prefetcher(
        *recording, options, [](size_t b) { return malloc(b); }, [](void* p) { free(p); }, stage);
    // As a replay's first step: the workers run ahead. (Not for throughput: the calls would take what they decoded.)
    if (largeBytes == 0) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto& order = recording->payloadOrder();
    waitNs.reserve(order.size());
    const int64_t loopStart = nowNs();
    for (const auto* call : order) {
      const int64_t t0 = nowNs();
      PayloadPrefetcher::Staged staged;
      if (!(error = prefetcher.acquire(call, &staged).message()).empty()) {
        fprintf(stderr, "prefetcher_contention: acquire failed: %s\n", error.c_str());
        return 1;
      }
      fromDevice += staged.onDevice;
      const int64_t copied = nowNs() + int64_t{copyUs} * 1000;
      prefetcher.release(call, [copied] { return nowNs() >= copied; });
      waitNs.push_back(static_cast<double>(nowNs() - t0));
      const int64_t next = nowNs() + int64_t{gapUs} * 1000;  // the program's own work between two calls
      while (nowNs() < next) {
      }
    }
    loopSeconds = static_cast<double>(nowNs() - loopStart) / 1e9;
    stats = prefetcher.stats();
  }
  if (system(("rm -rf '" + dir + "'").c_str()) != 0) fprintf(stderr, "prefetcher_contention: %s left\n", dir.c_str());
  const double med = percentile(waitNs, 0.5), p90 = percentile(waitNs, 0.9), p99 = percentile(waitNs, 0.99);
  const double gbPerSecond = loopSeconds > 0 ? static_cast<double>(stats.bytesDecoded) / loopSeconds / 1e9 : 0;
  if (json) {
    printf(
        "{\"payloads\": %d, \"payload_mib\": %g, \"level\": %d, \"shuffle\": \"%s\", \"pool\": \"%s\", "
        "\"threads\": %d, \"gap_us\": %d, "
        "\"upload_us\": %d, \"copy_us\": %d, "
        "\"hardware_threads\": %u, \"median_ns\": %.0f, \"p90_ns\": %.0f, \"p99_ns\": %.0f, \"from_device\": %d, "
        "\"fence_polls\": %llu, \"decoded\": %llu, \"waits\": %llu, \"loop_s\": %.3f, \"decoded_gb_per_s\": %.2f}\n",
        payloads, payloadMib, largeBytes > 0 ? level : 0, shuffle.c_str(),
        poolFiles.empty() ? "normal values" : "payload files", threads, gapUs, uploadUs, copyUs,
        std::thread::hardware_concurrency(), med, p90, p99, fromDevice, static_cast<unsigned long long>(polls.load()),
        static_cast<unsigned long long>(stats.decoded), static_cast<unsigned long long>(stats.waits), loopSeconds,
        gbPerSecond);
  } else if (largeBytes > 0) {
    printf("%d calls of %g MiB (zstd level %d), %d workers, a call every %d us\n", payloads, payloadMib, level, threads,
           gapUs);
    printf(
        "  decoded %.2f GB/s (%llu payloads in %.3f s, %llu waits); acquire + release median %.1f us, p90 %.1f "
        "us\n",
        gbPerSecond, static_cast<unsigned long long>(stats.decoded), loopSeconds,
        static_cast<unsigned long long>(stats.waits), med / 1e3, p90 / 1e3);
  } else {
    printf("%d calls, %d workers, a call every %d us; uploads pass after %d us, copies after %d us\n", payloads,
           threads, gapUs, uploadUs, copyUs);
    printf("  acquire + release on the calling thread: median %.1f us, p90 %.1f us, p99 %.1f us\n", med / 1e3,
           p90 / 1e3, p99 / 1e3);
    printf("  %d of %d from device memory; %llu fence polls\n", fromDevice, payloads,
           static_cast<unsigned long long>(polls.load()));
  }
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// How well a replay hold keeps a stream busy for a requested duration, for the two completion mechanisms of the
// CUDA device side by side in one process on one GPU: a 1-CTA kernel spinning on %globaltimer
// (Completion::kKernel) and a host function enqueued with cudaLaunchHostFunc (Completion::kHostCallback).
//
// For every requested duration d, interleaved kernel, callback, kernel, callback ... so that drift affects both:
//   single/idle      CUDA-event interval around one hold on an idle stream (how calibrate() measures)
//   single/queued    the same, but the stream is first held busy by a gate (a kernel hold of --gate-us), so the
//                    begin event, the hold and the end event are all enqueued before the stream reaches them: the
//                    case of a replayed call enqueued behind the rank's own compute
//   calibrated/*     both again with the request lowered by that mechanism's calibrate().holdFixedNs (floor 0)
//   concurrent       two non-blocking streams each get a hold of d after a common start event (recorded on a
//                    third stream behind a gate); total = start to the later of both ends (joined on the third
//                    stream with cudaStreamWaitEvent). total/d is 1.0 when the holds overlap, 2.0 when serialised;
//                    total/single-queued divides out the fixed cost of one hold.
//   enqueue          host time of the hold() call itself (the caller's cost), from the two single raw holds
// Every measurement waits for its end event before the next one starts.
//
//   hold_completion [--reps 50] [--warmup 5] [--durations 2,5,10,...] [--gate-us 300] [--json FILE]
// Exit codes: 0 done, 1 a CUDA call failed, 2 bad usage, 77 no usable GPU (skip).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "ranklens/device.h"

namespace {

namespace rd = ranklens::device;
using Clock = std::chrono::steady_clock;

constexpr int kSkip = 77;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    fprintf(stderr, "hold_completion: %s: %s\n", what, cudaGetErrorString(err));
    exit(1);
  }
}

void checkDev(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "hold_completion: %s: %s\n", what, rd::lastError().c_str());
    exit(1);
  }
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string jsonNumber(double v, int decimals = 3) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// RANKLENS_COMMIT first (a carried tree on the GPU machine has no .git), then `git rev-parse HEAD` in the working
// directory, else "unknown".
std::string commit(std::string* source) {
  if (const char* env = getenv("RANKLENS_COMMIT"); env != nullptr && *env != '\0') {
    *source = "env RANKLENS_COMMIT";
    return env;
  }
  if (FILE* p = popen("git rev-parse HEAD 2>/dev/null", "r")) {
    char buf[128] = {0};
    const bool got = fgets(buf, sizeof buf, p) != nullptr;
    const int rc = pclose(p);
    if (got && rc == 0 && trim(buf).size() >= 7) {
      *source = "git rev-parse HEAD";
      return trim(buf);
    }
  }
  *source = "none";
  return "unknown";
}

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Samples of one measurement, in nanoseconds (or a plain ratio for the concurrency factors).
struct Series {
  std::vector<double> v;
  double median() const { return percentile(v, 0.5); }
  double p90() const { return percentile(v, 0.9); }
};

// One mechanism at one requested duration.
struct Cell {
  Series idle, queued, calIdle, calQueued;  // event interval, ns
  Series concurrentTotal;                   // ns
  Series concurrentOverD;                   // total / d per rep
  Series enqueue;                           // host ns per hold() call
  uint64_t calibratedRequestNs = 0;
};

struct Mechanism {
  const char* key;    // JSON key
  const char* label;  // table label
  std::unique_ptr<rd::StreamDevice> device;
  rd::StreamDevice::Calibration calibration;
};

// The GPU work used to measure: three streams and their events, and the kernel device for gates.
class Bench {
 public:
  Bench(rd::StreamDevice* gateDevice, uint64_t gateNs) : gate_(gateDevice), gateNs_(gateNs) {
    for (auto* s : {&s1_, &s2_, &s3_}) check(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking), "cudaStreamCreate");
    for (auto* e : {&begin_, &end_, &end1_, &end2_}) check(cudaEventCreate(e), "cudaEventCreate");
  }
  ~Bench() {
    for (auto e : {begin_, end_, end1_, end2_}) cudaEventDestroy(e);
    for (auto s : {s1_, s2_, s3_}) cudaStreamDestroy(s);
  }

  // Event interval (ns) around one hold on s1; *enqueueNs gets the host time of the hold() call.
  double single(rd::StreamDevice* dev, uint64_t ns, bool queued, double* enqueueNs) {
    const auto g0 = Clock::now();
    if (queued) checkDev(gate_->hold(gateNs_, "Hold", s1_), "gate hold");
    check(cudaEventRecord(begin_, s1_), "cudaEventRecord");
    const auto t0 = Clock::now();
    checkDev(dev->hold(ns, "Hold", s1_), "hold");
    const auto t1 = Clock::now();
    check(cudaEventRecord(end_, s1_), "cudaEventRecord");
    if (queued) noteGate(g0);
    if (enqueueNs) *enqueueNs = std::chrono::duration<double, std::nano>(t1 - t0).count();
    return elapsedNs(begin_, end_);
  }

  // Two holds of ns on s1 and s2, released together by a start event on s3; ns from start to the later end.
  double concurrent(rd::StreamDevice* dev, uint64_t ns) {
    const auto g0 = Clock::now();
    checkDev(gate_->hold(gateNs_, "Hold", s3_), "gate hold");
    check(cudaEventRecord(begin_, s3_), "cudaEventRecord");
    check(cudaStreamWaitEvent(s1_, begin_, 0), "cudaStreamWaitEvent");
    check(cudaStreamWaitEvent(s2_, begin_, 0), "cudaStreamWaitEvent");
    checkDev(dev->hold(ns, "Hold", s1_), "hold");
    checkDev(dev->hold(ns, "Hold", s2_), "hold");
    check(cudaEventRecord(end1_, s1_), "cudaEventRecord");
    check(cudaEventRecord(end2_, s2_), "cudaEventRecord");
    check(cudaStreamWaitEvent(s3_, end1_, 0), "cudaStreamWaitEvent");
    check(cudaStreamWaitEvent(s3_, end2_, 0), "cudaStreamWaitEvent");
    check(cudaEventRecord(end_, s3_), "cudaEventRecord");
    noteGate(g0);
    const double total = elapsedNs(begin_, end_);
    check(cudaStreamSynchronize(s1_), "cudaStreamSynchronize");
    check(cudaStreamSynchronize(s2_), "cudaStreamSynchronize");
    return total;
  }

  int gateOverruns() const { return gateOverruns_; }
  int gated() const { return gated_; }
  double maxGatedEnqueueNs() const { return maxGatedEnqueueNs_; }

 private:
  double elapsedNs(cudaEvent_t a, cudaEvent_t b) {
    check(cudaEventSynchronize(b), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
    return static_cast<double>(ms) * 1e6;
  }

  // The gate must still be running when the host has enqueued everything behind it; count the times it may not.
  void noteGate(Clock::time_point g0) {
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - g0).count();
    ++gated_;
    maxGatedEnqueueNs_ = std::max(maxGatedEnqueueNs_, ns);
    if (ns > 0.8 * static_cast<double>(gateNs_)) ++gateOverruns_;
  }

  rd::StreamDevice* gate_;
  uint64_t gateNs_;
  cudaStream_t s1_ = nullptr, s2_ = nullptr, s3_ = nullptr;
  cudaEvent_t begin_ = nullptr, end_ = nullptr, end1_ = nullptr, end2_ = nullptr;
  int gateOverruns_ = 0, gated_ = 0;
  double maxGatedEnqueueNs_ = 0;
};

std::string joinArgs(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += argv[i];
  }
  return s;
}

// Median interval in us, and its error against the request: absolute us and relative (%).
struct ErrorView {
  double medUs, p90Us, errUs, errRel;
};
ErrorView errorOf(const Series& s, double requestedNs) {
  ErrorView e;
  e.medUs = s.median() / 1e3;
  e.p90Us = s.p90() / 1e3;
  e.errUs = e.medUs - requestedNs / 1e3;
  e.errRel = requestedNs > 0 ? (s.median() - requestedNs) / requestedNs : NAN;
  return e;
}

std::string seriesJson(const Series& s, double requestedNs) {
  const ErrorView e = errorOf(s, requestedNs);
  return "{\"median_us\": " + jsonNumber(e.medUs) + ", \"p90_us\": " + jsonNumber(e.p90Us) +
         ", \"error_us\": " + jsonNumber(e.errUs) + ", \"error_rel\": " + jsonNumber(e.errRel, 4) +
         ", \"p90_error_us\": " + jsonNumber(e.p90Us - requestedNs / 1e3) + "}";
}

double ratio(double a, double b) { return (b > 0 && std::isfinite(a) && std::isfinite(b)) ? a / b : NAN; }

void printErrorTable(const char* title, const std::vector<double>& durationsUs, const std::vector<Cell>& k,
                     const std::vector<Cell>& c, Series Cell::*member) {
  printf("\n%s\n", title);
  printf("%9s | %-36s | %-36s | %6s\n", "", "kernel", "callback", "cb/k");
  printf("%9s | %9s %8s %8s %8s | %9s %8s %8s %8s | %6s\n", "d (us)", "median", "p90", "err us", "err %", "median",
         "p90", "err us", "err %", "median");
  for (size_t i = 0; i < durationsUs.size(); ++i) {
    const double req = durationsUs[i] * 1e3;
    const ErrorView a = errorOf(k[i].*member, req), b = errorOf(c[i].*member, req);
    printf("%9.1f | %9.2f %8.2f %+8.2f %+7.1f%% | %9.2f %8.2f %+8.2f %+7.1f%% | %6.2f\n", durationsUs[i], a.medUs,
           a.p90Us, a.errUs, 100 * a.errRel, b.medUs, b.p90Us, b.errUs, 100 * b.errRel, ratio(b.medUs, a.medUs));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Replay hold accuracy: kernel vs host-callback completion, side by side on one GPU (single stream, after "
      "calibration, two concurrent streams, host enqueue cost)."};
  app.footer(
      "Example (on the GPU machine):\n"
      "  hold_completion --reps 50 --json bench/results/replay/hold_completion.json\n"
      "  hold_completion --durations 10,100,1000 --reps 200\n"
      "Exit codes: 0 done, 1 a CUDA call failed, 2 bad usage, 77 no usable GPU (skip).\n"
      "The commit recorded is $RANKLENS_COMMIT, else `git rev-parse HEAD` in the working directory, else unknown.");
  int reps = 50, warmup = 5;
  double gateUs = 300;
  std::vector<double> durationsUs = {2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
  std::string jsonPath;
  app.add_option("--reps", reps, "measured repetitions per duration, mechanism and measurement")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", warmup, "unrecorded repetitions before them")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000));
  app.add_option("--durations", durationsUs, "requested hold durations in microseconds, comma separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(0.001, 1e7));
  app.add_option("--gate-us", gateUs,
                 "length of the kernel hold that keeps a stream busy while a queued or concurrent measurement is "
                 "enqueued behind it")
      ->capture_default_str()
      ->check(CLI::Range(1.0, 1e6));
  app.add_option("--json", jsonPath, "also write the results as JSON to FILE")->type_name("FILE");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is a success; every other parse error is bad usage
  }

  int count = 0;
  const cudaError_t countErr = cudaGetDeviceCount(&count);
  if (countErr != cudaSuccess || count == 0) {
    fprintf(stderr, "hold_completion: no usable GPU (%s); skipping (exit %d)\n",
            countErr != cudaSuccess ? cudaGetErrorString(countErr) : "no CUDA device visible", kSkip);
    return kSkip;
  }
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");

  Mechanism mech[2] = {{"kernel", "kernel", nullptr, {}}, {"host_callback", "callback", nullptr, {}}};
  const rd::Completion completions[2] = {rd::Completion::kKernel, rd::Completion::kHostCallback};
  for (int m = 0; m < 2; ++m) {
    std::string why;
    mech[m].device = rd::makeCudaDevice(&why, completions[m]);
    if (!mech[m].device) {
      fprintf(stderr, "hold_completion: no usable GPU (%s); skipping (exit %d)\n", why.c_str(), kSkip);
      return kSkip;
    }
  }
  std::string uuid, name;
  mech[0].device->describe(&name, &uuid);
  for (auto& m : mech) m.calibration = m.device->calibrate();

  const uint64_t gateNs = static_cast<uint64_t>(gateUs * 1e3);
  Bench bench(mech[0].device.get(), gateNs);
  std::vector<Cell> cells[2];
  cells[0].resize(durationsUs.size());
  cells[1].resize(durationsUs.size());

  const auto started = Clock::now();
  for (size_t i = 0; i < durationsUs.size(); ++i) {
    const uint64_t req = static_cast<uint64_t>(std::llround(durationsUs[i] * 1e3));
    uint64_t cal[2];
    for (int m = 0; m < 2; ++m) {
      const int64_t lowered = static_cast<int64_t>(req) - mech[m].calibration.holdFixedNs;
      cal[m] = lowered > 0 ? static_cast<uint64_t>(lowered) : 0;
      cells[m][i].calibratedRequestNs = cal[m];
    }
    for (int rep = 0; rep < warmup + reps; ++rep) {
      const bool keep = rep >= warmup;
      // Measurement by measurement, kernel then callback, so that both see the same drift.
      for (int m = 0; m < 2; ++m) {
        double enq = 0;
        const double v = bench.single(mech[m].device.get(), req, false, &enq);
        if (keep) cells[m][i].idle.v.push_back(v), cells[m][i].enqueue.v.push_back(enq);
      }
      for (int m = 0; m < 2; ++m) {
        double enq = 0;
        const double v = bench.single(mech[m].device.get(), req, true, &enq);
        if (keep) cells[m][i].queued.v.push_back(v), cells[m][i].enqueue.v.push_back(enq);
      }
      for (int m = 0; m < 2; ++m) {
        const double v = bench.single(mech[m].device.get(), cal[m], false, nullptr);
        if (keep) cells[m][i].calIdle.v.push_back(v);
      }
      for (int m = 0; m < 2; ++m) {
        const double v = bench.single(mech[m].device.get(), cal[m], true, nullptr);
        if (keep) cells[m][i].calQueued.v.push_back(v);
      }
      for (int m = 0; m < 2; ++m) {
        const double v = bench.concurrent(mech[m].device.get(), req);
        if (keep) cells[m][i].concurrentTotal.v.push_back(v), cells[m][i].concurrentOverD.v.push_back(v / req);
      }
    }
  }
  const double runSeconds = std::chrono::duration<double>(Clock::now() - started).count();

  std::string commitSource;
  const std::string sha = commit(&commitSource);
  const std::string date = utcNow();
  const std::string command = joinArgs(argc, argv);

  // Human table.
  printf("hold_completion: %s, commit %s, %s\n", prop.name, sha.c_str(), date.c_str());
  printf(
      "%d reps after %d warm-up per duration, mechanism and measurement; interleaved kernel/callback; "
      "gate %.0f us; run %.1f s\n",
      reps, warmup, gateUs, runSeconds);
  printf(
      "calibrate(): kernel holdFixedNs %lld, callback holdFixedNs %lld (copyFixedNs %lld / %lld, "
      "copyNsPerByte %.5f / %.5f)\n",
      static_cast<long long>(mech[0].calibration.holdFixedNs), static_cast<long long>(mech[1].calibration.holdFixedNs),
      static_cast<long long>(mech[0].calibration.copyFixedNs), static_cast<long long>(mech[1].calibration.copyFixedNs),
      mech[0].calibration.copyNsPerByte, mech[1].calibration.copyNsPerByte);
  if (bench.gateOverruns() > 0)
    printf(
        "WARNING: %d of %d gated measurements took longer than 80%% of the gate to enqueue (max %.1f us): the "
        "stream may have reached them before they were all enqueued; raise --gate-us\n",
        bench.gateOverruns(), bench.gated(), bench.maxGatedEnqueueNs() / 1e3);
  printErrorTable("(a) single stream, idle: event interval around one hold of d (us); error = measured - d",
                  durationsUs, cells[0], cells[1], &Cell::idle);
  printErrorTable("(a') single stream, queued behind a gate: the hold is enqueued before the stream reaches it",
                  durationsUs, cells[0], cells[1], &Cell::queued);
  printErrorTable("(b) calibrated, idle: request d - holdFixedNs (floor 0); error still against d", durationsUs,
                  cells[0], cells[1], &Cell::calIdle);
  printErrorTable("(b') calibrated, queued behind a gate", durationsUs, cells[0], cells[1], &Cell::calQueued);

  printf(
      "\n(c) two concurrent streams, each a hold of d from a common start: total/d (1.0 overlap, 2.0 serialised); "
      "total/single = total / median single queued hold\n");
  printf("%9s | %9s %7s %7s %7s | %9s %7s %7s %7s\n", "d (us)", "k total", "t/d", "t/d p90", "t/single", "cb total",
         "t/d", "t/d p90", "t/single");
  for (size_t i = 0; i < durationsUs.size(); ++i) {
    const Cell &a = cells[0][i], &b = cells[1][i];
    printf("%9.1f | %9.2f %7.3f %7.3f %7.3f | %9.2f %7.3f %7.3f %7.3f\n", durationsUs[i],
           a.concurrentTotal.median() / 1e3, a.concurrentOverD.median(), a.concurrentOverD.p90(),
           ratio(a.concurrentTotal.median(), a.queued.median()), b.concurrentTotal.median() / 1e3,
           b.concurrentOverD.median(), b.concurrentOverD.p90(), ratio(b.concurrentTotal.median(), b.queued.median()));
  }

  printf("\n(d) host time per hold() call (us; the caller's cost), from the idle and queued single holds\n");
  printf("%9s | %9s %8s | %9s %8s | %6s\n", "d (us)", "k median", "k p90", "cb median", "cb p90", "cb/k");
  for (size_t i = 0; i < durationsUs.size(); ++i) {
    const Cell &a = cells[0][i], &b = cells[1][i];
    printf("%9.1f | %9.3f %8.3f | %9.3f %8.3f | %6.2f\n", durationsUs[i], a.enqueue.median() / 1e3,
           a.enqueue.p90() / 1e3, b.enqueue.median() / 1e3, b.enqueue.p90() / 1e3,
           ratio(b.enqueue.median(), a.enqueue.median()));
  }

  if (!jsonPath.empty()) {
    std::string j = "{\n";
    j += " \"benchmark\": \"hold_completion\",\n";
    j += " \"what\": " +
         jsonString(
             "CUDA-event interval of a replay hold of a requested duration, completion by a globaltimer "
             "kernel vs a cudaLaunchHostFunc callback, interleaved in one process: single stream (idle, and "
             "queued behind a gate kernel), the same with the request lowered by calibrate().holdFixedNs, two "
             "concurrent streams (total from a common start to the later end), and host time per hold() call") +
         ",\n";
    j += " \"commit\": " + jsonString(sha) + ",\n";
    j += " \"commit_source\": " + jsonString(commitSource) + ",\n";
    j += " \"device\": " + jsonString(prop.name) + ",\n";
    j += " \"device_uuid\": " + jsonString(uuid) + ",\n";
    j += " \"command\": " + jsonString(command) + ",\n";
    j += " \"date\": " + jsonString(date) + ",\n";
    j += " \"reps\": " + std::to_string(reps) + ",\n";
    j += " \"warmup\": " + std::to_string(warmup) + ",\n";
    j += " \"gate_us\": " + jsonNumber(gateUs, 1) + ",\n";
    j += " \"gate_overruns\": " + std::to_string(bench.gateOverruns()) + ",\n";
    j += " \"max_gated_enqueue_us\": " + jsonNumber(bench.maxGatedEnqueueNs() / 1e3) + ",\n";
    j += " \"run_seconds\": " + jsonNumber(runSeconds, 2) + ",\n";
    j += " \"calibration\": {";
    for (int m = 0; m < 2; ++m) {
      const auto& c = mech[m].calibration;
      j += std::string(m ? ", " : "") + "\"" + mech[m].key +
           "\": {\"hold_fixed_ns\": " + std::to_string(c.holdFixedNs) +
           ", \"copy_fixed_ns\": " + std::to_string(c.copyFixedNs) +
           ", \"copy_ns_per_byte\": " + jsonNumber(c.copyNsPerByte, 6) + "}";
    }
    j += "},\n";
    j += " \"results\": [\n";
    for (size_t i = 0; i < durationsUs.size(); ++i) {
      const double req = durationsUs[i] * 1e3;
      j += "  {\"duration_us\": " + jsonNumber(durationsUs[i]);
      for (int m = 0; m < 2; ++m) {
        const Cell& c = cells[m][i];
        j += std::string(",\n   \"") + mech[m].key + "\": {";
        j += "\"single_idle\": " + seriesJson(c.idle, req);
        j += ",\n    \"single_queued\": " + seriesJson(c.queued, req);
        j += ",\n    \"calibrated_request_us\": " + jsonNumber(static_cast<double>(c.calibratedRequestNs) / 1e3);
        j += ",\n    \"calibrated_idle\": " + seriesJson(c.calIdle, req);
        j += ",\n    \"calibrated_queued\": " + seriesJson(c.calQueued, req);
        j += ",\n    \"concurrent\": {\"total_median_us\": " + jsonNumber(c.concurrentTotal.median() / 1e3) +
             ", \"total_p90_us\": " + jsonNumber(c.concurrentTotal.p90() / 1e3) +
             ", \"total_over_d_median\": " + jsonNumber(c.concurrentOverD.median(), 4) +
             ", \"total_over_d_p90\": " + jsonNumber(c.concurrentOverD.p90(), 4) +
             ", \"total_over_single_queued\": " + jsonNumber(ratio(c.concurrentTotal.median(), c.queued.median()), 4) +
             "}";
        j += ",\n    \"enqueue_host\": {\"median_us\": " + jsonNumber(c.enqueue.median() / 1e3) +
             ", \"p90_us\": " + jsonNumber(c.enqueue.p90() / 1e3) +
             ", \"samples\": " + std::to_string(c.enqueue.v.size()) + "}}";
      }
      const Cell &a = cells[0][i], &b = cells[1][i];
      j += ",\n   \"callback_over_kernel\": {\"single_idle\": " +
           jsonNumber(ratio(b.idle.median(), a.idle.median()), 4) +
           ", \"single_queued\": " + jsonNumber(ratio(b.queued.median(), a.queued.median()), 4) +
           ", \"calibrated_idle\": " + jsonNumber(ratio(b.calIdle.median(), a.calIdle.median()), 4) +
           ", \"calibrated_queued\": " + jsonNumber(ratio(b.calQueued.median(), a.calQueued.median()), 4) +
           ", \"concurrent_total\": " + jsonNumber(ratio(b.concurrentTotal.median(), a.concurrentTotal.median()), 4) +
           ", \"enqueue_host\": " + jsonNumber(ratio(b.enqueue.median(), a.enqueue.median()), 4) + "}}";
      j += i + 1 < durationsUs.size() ? ",\n" : "\n";
    }
    j += " ]\n}\n";
    FILE* f = fopen(jsonPath.c_str(), "w");
    if (f == nullptr || fwrite(j.data(), 1, j.size(), f) != j.size() || fclose(f) != 0) {
      fprintf(stderr, "hold_completion: cannot write %s\n", jsonPath.c_str());
      return 1;
    }
    printf("\nJSON: %s\n", jsonPath.c_str());
  }
  return 0;
}

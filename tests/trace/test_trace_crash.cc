// SPDX-License-Identifier: Apache-2.0
// SIGKILL of a writing process (trace.h: "Everything accepted before a completed flush() is in the files and
// survives SIGKILL of the process"; docs/trace-format.md: a killed writer leaves intact frames, possibly followed by
// the start of one, which readers report as a truncation). Each iteration starts crash_writer, kills it after a
// random delay, then reads the trace: every record up to the last count the writer printed (after a completed
// flush) is there, in order, with the right content; nothing else is invented; referenced payloads read back
// exactly; the only acceptable problem is a truncation at the end of the last segment; the manifest says
// closed=false.
//
// RANKLENS_CRASH_SEED and RANKLENS_CRASH_ITERATIONS override the fixed seed and the iteration count (40); the seed
// is printed, and every failure names seed, iteration, delay and flush interval.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "crash_writer.h"
#include "trace_io.h"  // kPayloadFrameBytes
#include "trace_test_util.h"

#ifndef RANKLENS_CRASH_WRITER
#error "RANKLENS_CRASH_WRITER must name the crash_writer executable"
#endif

namespace {

using namespace tracetest;
using Clock = std::chrono::steady_clock;

// ThreadSanitizer slows the writer's byte-plane and CRC passes over the lent payloads about tenfold: the kills wait
// as much longer, so that they still land after hundreds of records.
#if defined(__SANITIZE_THREAD__)
constexpr uint64_t kSanitizerSlowdown = 10;
#else
constexpr uint64_t kSanitizerSlowdown = 1;
#endif

uint64_t envOr(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v && *v ? strtoull(v, nullptr, 0) : fallback;
}

struct WriterRun {
  std::string output;  // everything the writer printed
  bool killed = false;
  int status = 0;
};

// Starts crash_writer on `dir`; kills it `delay` after it started (fromFirstLine: after its first flushed line).
WriterRun runAndKill(const std::string& dir, uint64_t flushEvery, std::chrono::microseconds delay, bool fromFirstLine) {
  WriterRun run;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    ADD_FAILURE() << "pipe: " << strerror(errno);
    return run;
  }
  const std::string every = std::to_string(flushEvery);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    execl(RANKLENS_CRASH_WRITER, RANKLENS_CRASH_WRITER, dir.c_str(), every.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  if (pid < 0) {
    ADD_FAILURE() << "fork: " << strerror(errno);
    close(fds[0]);
    return run;
  }
  // Drain the pipe while waiting so the writer never blocks on a full pipe.
  auto drainUntil = [&](Clock::time_point deadline, bool stopAtLine) {
    char buffer[4096];
    for (;;) {
      if (stopAtLine && run.output.find('\n') != std::string::npos) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
      timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
      pollfd p{fds[0], POLLIN, 0};
      const int ready = ppoll(&p, 1, &ts, nullptr);
      if (ready > 0) {
        const ssize_t n = read(fds[0], buffer, sizeof(buffer));
        if (n <= 0) return false;  // the writer exited on its own
        run.output.append(buffer, static_cast<size_t>(n));
      }
    }
  };
  Clock::time_point start = Clock::now();
  if (fromFirstLine) {
    drainUntil(start + std::chrono::seconds(20), true);
    start = Clock::now();
  }
  drainUntil(start + delay, false);
  kill(pid, SIGKILL);
  char buffer[4096];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) run.output.append(buffer, static_cast<size_t>(n));
  close(fds[0]);
  waitpid(pid, &run.status, 0);
  run.killed = WIFSIGNALED(run.status) && WTERMSIG(run.status) == SIGKILL;
  return run;
}

// The last complete line of the writer's output: the records flushed before the kill (0 if none). Checks that
// the lines are consecutive multiples of flushEvery.
uint64_t flushedCount(const std::string& output, uint64_t flushEvery) {
  uint64_t last = 0;
  size_t at = 0;
  for (size_t nl; (nl = output.find('\n', at)) != std::string::npos; at = nl + 1) {
    const uint64_t value = strtoull(output.substr(at, nl - at).c_str(), nullptr, 10);
    EXPECT_EQ(value, last + flushEvery) << "writer output: " << output.substr(at, nl - at);
    last = value;
  }
  return last;
}

struct Summary {
  uint64_t withManifest = 0, maxFlushed = 0, maxRecords = 0, truncations = 0, segmentsSeen = 0;
  uint64_t largePayloads = 0, unreferencedTails = 0;
};

// A lent payload (crash_writer's every 50th record) reads back exactly, from a blob of one zstd frame per MiB of its
// byte planes, and random access finds it.
void verifyLargePayload(TraceReader& reader, const std::string& dir, const PayloadRef& ref) {
  ASSERT_TRUE(crashtest::carriesLargePayload(ref.seq)) << "a large payload for record " << ref.seq;
  const PayloadRef want = crashtest::largeRefFor(ref.seq);
  EXPECT_EQ(ref.op, want.op);
  EXPECT_EQ(ref.datatype, want.datatype);
  ASSERT_EQ(ref.count, want.count);
  EXPECT_EQ(ref.shuffle, 4);
  const std::vector<size_t> frameEnds = payloadFrameEnds(dir, ref);
  ASSERT_FALSE(frameEnds.empty());
  EXPECT_EQ(frameEnds.back(), ref.compressedBytes) << ref.seq;
  EXPECT_EQ(frameEnds.size(), (ref.rawBytes + kPayloadFrameBytes - 1) / kPayloadFrameBytes) << ref.seq;
  std::vector<uint8_t> bytes;
  Problem problem;
  ASSERT_TRUE(reader.readPayload(ref, &bytes, &problem)) << problem.describe();
  const std::vector<float> values = crashtest::largePayload(ref.seq);
  ASSERT_EQ(bytes.size(), values.size() * sizeof(float));
  ASSERT_EQ(memcmp(bytes.data(), values.data(), bytes.size()), 0) << "large payload " << ref.seq;
  auto found = reader.payload(1, want.op, -1, ref.seq);
  ASSERT_TRUE(found.has_value()) << ref.seq;
  EXPECT_EQ(found->offset, ref.offset);
}

void verify(const std::string& dir, uint64_t flushed, Summary* summary) {
  if (!exists(dir + "/manifest.msgpack")) {
    // Killed before the writer finished creating the directory: nothing can have been flushed.
    EXPECT_EQ(flushed, 0u) << "no manifest, yet " << flushed << " records were flushed";
    return;
  }
  summary->withManifest++;
  std::string error;
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(dir, Limits{}, &reader).message();
  ASSERT_NE(reader, nullptr) << error;
  EXPECT_FALSE(reader->manifest().closed);
  EXPECT_EQ(reader->manifest().writer, "crash_writer");
  EXPECT_FALSE(exists(dir + "/index.msgpack"));  // written only by close()
  EXPECT_TRUE(reader->indexRebuilt());

  uint64_t next = 0;  // the next Stage index expected
  std::vector<uint64_t> payloadSeqs, largeSeqs;
  std::map<uint32_t, uint64_t> referencedEnd;  // payload file -> end of the last blob a reference points into
  std::vector<uint64_t> lastFrameEnd(reader->segmentCount(), kFileHeaderBytes);
  const std::vector<Rec> recs = scanAll(*reader);
  for (const Rec& rec : recs) {
    const std::string seg = dir + "/" + segmentName(rec.where.segment);
    const std::string header = readRange(seg, rec.where.offset, kFrameHeaderBytes);
    ASSERT_EQ(header.size(), kFrameHeaderBytes);
    lastFrameEnd[rec.where.segment] = rec.where.offset + kFrameHeaderBytes + getU32(header, 0);
    if (rec.type == RecordType::kStage) {
      const auto stage = rec.as<events::Stage>();
      ASSERT_EQ(stage, crashtest::stageFor(next)) << "record " << next << " is wrong or out of order";
      ++next;
      continue;
    }
    ASSERT_EQ(rec.type, RecordType::kPayloadRef) << "unexpected record type " << static_cast<int>(rec.type);
    const PayloadRef ref = rec.as<PayloadRef>();
    ASSERT_GT(next, 0u);
    ASSERT_EQ(ref.seq, next - 1) << "a payload reference not right after its record";
    if (ref.commId == 1) {
      ASSERT_NO_FATAL_FAILURE(verifyLargePayload(*reader, dir, ref));
      largeSeqs.push_back(ref.seq);
      referencedEnd[ref.file] = std::max(referencedEnd[ref.file], ref.offset + ref.compressedBytes);
      continue;
    }
    ASSERT_EQ(ref.seq % 7, 0u);
    const PayloadRef want = crashtest::refFor(ref.seq);
    EXPECT_EQ(ref.commId, want.commId);
    EXPECT_EQ(ref.op, want.op);
    EXPECT_EQ(ref.datatype, want.datatype);
    EXPECT_EQ(ref.count, want.count);
    EXPECT_EQ(ref.peer, want.peer);
    EXPECT_EQ(ref.rawBytes, want.count);
    EXPECT_EQ(ref.zstdLevel, 1);
    std::vector<uint8_t> bytes;
    Problem problem;
    ASSERT_TRUE(reader->readPayload(ref, &bytes, &problem)) << problem.describe();
    ASSERT_TRUE(std::string(bytes.begin(), bytes.end()) == crashtest::payloadBytes(ref.seq)) << "payload " << ref.seq;
    payloadSeqs.push_back(ref.seq);
    referencedEnd[ref.file] = std::max(referencedEnd[ref.file], ref.offset + ref.compressedBytes);
  }
  EXPECT_GE(next, flushed) << "records flushed before the kill are missing";
  for (uint64_t i = 0; i < flushed; i += 7)
    EXPECT_TRUE(std::binary_search(payloadSeqs.begin(), payloadSeqs.end(), i)) << "flushed payload " << i << " missing";
  for (uint64_t i = 0; i < flushed; ++i)
    if (crashtest::carriesLargePayload(i))
      EXPECT_TRUE(std::binary_search(largeSeqs.begin(), largeSeqs.end(), i))
          << "flushed large payload " << i << " missing";
  // Random access agrees with the scan.
  for (uint64_t seq : payloadSeqs) {
    auto ref = reader->payload(0, static_cast<int>(events::Op::kAllReduce), -1, seq);
    ASSERT_TRUE(ref.has_value()) << seq;
    EXPECT_EQ(ref->seq, seq);
  }
  // The only acceptable damage: the end of the last segment.
  ASSERT_GT(reader->segmentCount(), 0u);
  const uint32_t lastSeg = reader->segmentCount() - 1;
  for (const Problem& p : reader->problems()) {
    EXPECT_TRUE(p.truncated) << p.describe();
    EXPECT_EQ(p.file, dir + "/" + segmentName(lastSeg)) << p.describe();
    const uint64_t size = fileSize(p.file);
    const uint64_t expected = size < kFileHeaderBytes ? 0 : lastFrameEnd[lastSeg];
    EXPECT_EQ(p.offset, expected) << p.describe();
  }
  EXPECT_LE(reader->problems().size(), 1u) << problemsText(reader->problems());
  summary->truncations += !reader->problems().empty();
  summary->largePayloads += largeSeqs.size();
  summary->maxFlushed = std::max(summary->maxFlushed, flushed);
  summary->maxRecords = std::max(summary->maxRecords, next);
  summary->segmentsSeen = std::max<uint64_t>(summary->segmentsSeen, reader->segmentCount());
  // Blobs the kill left without a reference (cut, or whole with their PayloadRef not yet written): the readers never
  // see them. Counted to show that kills landed there.
  for (const std::string& name : listDir(dir))
    if (name.rfind("pay-", 0) == 0) {
      const uint32_t file = static_cast<uint32_t>(strtoul(name.c_str() + 4, nullptr, 10));
      const auto end = referencedEnd.find(file);
      summary->unreferencedTails += fileSize(dir + "/" + name) > (end == referencedEnd.end() ? 0 : end->second);
    }
}

TEST(TraceCrash, SigkillLosesNothingFlushedAndInventsNothing) {
  const uint64_t seed = envOr("RANKLENS_CRASH_SEED", 0x5EED2024);
  const uint64_t iterations = envOr("RANKLENS_CRASH_ITERATIONS", 40);
  printf("TraceCrash seed %llu (RANKLENS_CRASH_SEED=%llu reproduces), %llu iterations\n",
         static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
         static_cast<unsigned long long>(iterations));
  std::mt19937_64 rng(seed);
  TempDir tmp;
  Summary summary;
  const auto begin = Clock::now();
  for (uint64_t it = 0; it < iterations; ++it) {
    const uint64_t flushEvery = std::vector<uint64_t>{1, 3, 16, 64}[rng() % 4];
    const auto delay = std::chrono::microseconds((1000 + rng() % 49001) * kSanitizerSlowdown);  // 1..50 ms
    const bool fromFirstLine = it % 2 == 1;
    SCOPED_TRACE("seed " + std::to_string(seed) + " iteration " + std::to_string(it) + " delay " +
                 std::to_string(delay.count()) + " us" + (fromFirstLine ? " after the first flush" : " after start") +
                 " flush every " + std::to_string(flushEvery));
    const std::string dir = tmp / ("it" + std::to_string(it)) + "/rank0";
    const WriterRun run = runAndKill(dir, flushEvery, delay, fromFirstLine);
    ASSERT_TRUE(run.killed) << "crash_writer ended by itself, status " << run.status;
    const uint64_t flushed = flushedCount(run.output, flushEvery);
    ASSERT_NO_FATAL_FAILURE(verify(dir, flushed, &summary));
    if (HasFailure()) break;
    nftw((tmp / ("it" + std::to_string(it))).c_str(),
         [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16, FTW_DEPTH | FTW_PHYS);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
  printf(
      "TraceCrash: %llu iterations in %.1f s; %llu had a manifest, %llu ended in a truncated frame; up to %llu "
      "records flushed, %llu read, %llu segments; %llu lent payloads of 1-3 MiB read back, %llu payload files "
      "ending in bytes no reference reaches\n",
      static_cast<unsigned long long>(iterations), seconds, static_cast<unsigned long long>(summary.withManifest),
      static_cast<unsigned long long>(summary.truncations), static_cast<unsigned long long>(summary.maxFlushed),
      static_cast<unsigned long long>(summary.maxRecords), static_cast<unsigned long long>(summary.segmentsSeen),
      static_cast<unsigned long long>(summary.largePayloads),
      static_cast<unsigned long long>(summary.unreferencedTails));
  // The test must have exercised something: most runs got far enough to flush.
  EXPECT_GT(summary.withManifest, iterations / 2);
  EXPECT_GT(summary.maxFlushed, 100u);
  EXPECT_GT(summary.largePayloads, 0u);
}

}  // namespace

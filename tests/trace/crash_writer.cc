// SPDX-License-Identifier: Apache-2.0
// crash_writer DIR [FLUSH_EVERY]: writes a trace whose every record is derived from its index i, forever, for
// test_trace_crash to SIGKILL at a random moment. Record i is a Stage {name "r<i>", step i, timeNs 3i+1}; after
// every 7th (i % 7 == 0) comes a payload for (comm 0, AllReduce, seq i) of payloadBytes(i), and after every 50th
// (carriesLargePayload) a lent fp32 payload of 1-3 MiB for (comm 1, AllReduce, seq i). Every FLUSH_EVERY
// records it calls flush() and, once flush() has returned, prints the number of records accepted so far (one line,
// one write(2), unbuffered): everything up to that count must survive the kill.
// Small segment and payload files so the kill also lands on rollovers.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "crash_writer.h"
#include "ranklens/trace.h"

int main(int argc, char** argv) {
  using namespace ranklens::trace;
  if (argc < 2) {
    fprintf(stderr, "usage: %s DIR [FLUSH_EVERY]\n", argv[0]);
    return 2;
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test that started us
  const uint64_t flushEvery = argc > 2 ? strtoull(argv[2], nullptr, 10) : 16;
  Manifest manifest;
  manifest.mode = "record";
  manifest.writer = "crash_writer";
  manifest.pid = getpid();
  WriterOptions options;
  options.policy = BackPressure::kWait;  // nothing may be dropped: the test checks every index
  options.queueBytes = 1u << 20;
  options.compressionThreads = 3;  // payload files written by several threads at once, as in record mode
  options.zstdLevel = 1;
  options.segmentBytes = 16u << 10;
  options.payloadFileBytes = 8u << 10;
  options.shuffle = WriterOptions::Shuffle::kAlways;  // lent payloads compressed out of the lender's memory
  std::string error;
  std::unique_ptr<TraceWriter> writer;
  error = TraceWriter::create(argv[1], manifest, options, &writer).message();
  if (!writer) {
    fprintf(stderr, "crash_writer: %s\n", error.c_str());
    return 1;
  }
  for (uint64_t i = 0;; ++i) {
    if (!writer->append(RecordType::kStage, crashtest::stageFor(i))) {
      fprintf(stderr, "crash_writer: record %llu refused\n", static_cast<unsigned long long>(i));
      return 1;
    }
    if (i % 7 == 0) {
      const std::string bytes = crashtest::payloadBytes(i);
      if (!writer->appendPayload(crashtest::refFor(i), bytes.data(), bytes.size())) {
        fprintf(stderr, "crash_writer: payload %llu refused\n", static_cast<unsigned long long>(i));
        return 1;
      }
    }
    if (crashtest::carriesLargePayload(i)) {
      auto* lent = new std::vector<float>(crashtest::largePayload(i));
      if (!writer->appendPayloadBorrowed(crashtest::largeRefFor(i), lent->data(), lent->size() * sizeof(float),
                                         BackPressure::kWait, [lent] { delete lent; })) {
        fprintf(stderr, "crash_writer: large payload %llu refused\n", static_cast<unsigned long long>(i));
        return 1;
      }
    }
    const uint64_t accepted = i + 1;
    if (accepted % flushEvery == 0) {
      if (!writer->flush().isOk()) {
        fprintf(stderr, "crash_writer: flush failed: %s\n", writer->lastError().c_str());
        return 1;
      }
      char line[32];
      const int n = snprintf(line, sizeof(line), "%llu\n", static_cast<unsigned long long>(accepted));
      if (write(STDOUT_FILENO, line, static_cast<size_t>(n)) != n) return 1;
    }
  }
}

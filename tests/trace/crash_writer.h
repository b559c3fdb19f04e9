// SPDX-License-Identifier: Apache-2.0
// The deterministic content crash_writer writes and test_trace_crash checks: everything derives from the index i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace crashtest {

inline ranklens::events::Stage stageFor(uint64_t i) {
  ranklens::events::Stage s;
  s.name = "r" + std::to_string(i);
  s.step = static_cast<int64_t>(i);
  s.timeNs = static_cast<int64_t>(3 * i + 1);
  return s;
}

inline std::string payloadBytes(uint64_t i) {
  std::string out(1 + (i * 13) % 300, '\0');
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<char>((i * 31 + j * 7 + (j * j) % 11) & 0xff);
  return out;
}

// An all-reduce's payload reference: record i's on communicator `comm`.
inline ranklens::trace::PayloadRef allReduceRef(uint64_t comm, uint64_t i, int datatype, uint64_t count) {
  ranklens::trace::PayloadRef ref;
  ref.commId = comm;
  ref.seq = i;
  ref.op = static_cast<int>(ranklens::events::Op::kAllReduce);
  ref.datatype = datatype;
  ref.count = count;
  ref.peer = -1;
  return ref;
}

inline ranklens::trace::PayloadRef refFor(uint64_t i) {
  return allReduceRef(0, i, 1 /* uint8 */, payloadBytes(i).size());
}

// Every 50th record (i % 50 == 25) also carries a large fp32 payload, lent to the writer (appendPayloadBorrowed), as
// record mode hands over its staging: 1 to 3 MiB, so that it is compressed straight out of the lender's memory into a
// blob of one zstd frame per MiB (format 1.10), and a kill can land in the middle of such a blob. Communicator 1 keeps
// its (comm, op, peer, seq) apart from the small payloads'.
inline bool carriesLargePayload(uint64_t i) { return i % 50 == 25; }

inline size_t largePayloadCount(uint64_t i) { return ((1u << 20) * (1 + (i / 50) % 3) + (i * 13) % 1000 * 4) / 4; }

inline std::vector<float> largePayload(uint64_t i) {
  std::vector<float> out(largePayloadCount(i));
  for (size_t j = 0; j < out.size(); ++j) out[j] = static_cast<float>((i * 31 + j * 7) & 4095) * 0.25f;
  return out;
}

inline ranklens::trace::PayloadRef largeRefFor(uint64_t i) {
  return allReduceRef(1, i, 7 /* float32 */, largePayloadCount(i));
}

}  // namespace crashtest

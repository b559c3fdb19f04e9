// SPDX-License-Identifier: Apache-2.0
// The deterministic content crash_writer writes and test_trace_crash checks: everything derives from the index i.
#pragma once

#include <cstdint>
#include <string>

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

inline ranklens::trace::PayloadRef refFor(uint64_t i) {
  ranklens::trace::PayloadRef ref;
  ref.commId = 0;
  ref.seq = i;
  ref.op = static_cast<int>(ranklens::events::Op::kAllReduce);
  ref.datatype = 1;  // uint8
  ref.count = payloadBytes(i).size();
  ref.peer = -1;
  return ref;
}

}  // namespace crashtest

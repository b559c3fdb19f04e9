// SPDX-License-Identifier: Apache-2.0
// For unit tests that write small recorded traces: a fresh rank directory with a record-mode manifest and the job's
// world communicator (id 0) already created in it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "ranklens/events.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace test {

inline std::unique_ptr<trace::TraceWriter> recordedRank(const std::string& dir, int rank, int worldSize) {
  EXPECT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  trace::Manifest m;
  m.mode = "record";
  m.rank = rank;
  m.world_size = worldSize;
  std::string error;
  std::unique_ptr<trace::TraceWriter> w;
  error = trace::TraceWriter::create(dir, m, {}, &w).message();
  if (!w) {
    ADD_FAILURE() << error;
    return nullptr;
  }
  events::CommInit world;
  world.commId = 0;
  world.nranks = worldSize;
  world.rank = rank;
  world.how = "init";
  w->append(trace::RecordType::kCommInit, world);
  return w;
}

// Appends a call and its Timing record: the call's identity, `durationNs` and `gapNs`.
inline void appendTimedCall(trace::TraceWriter& w, const events::Call& c, int64_t durationNs, int64_t gapNs = -1) {
  w.append(trace::RecordType::kCall, c);
  trace::Timing t = trace::timingOf(c);
  t.durationNs = durationNs;
  t.gapNs = gapNs;
  w.append(trace::RecordType::kTiming, t);
}

}  // namespace test
}  // namespace ranklens

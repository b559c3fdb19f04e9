// SPDX-License-Identifier: Apache-2.0
// The events libnccl.so.2 writes to its trace, black-box: NCCL calls through the public API, then the rank directory
// read back with ranklens::trace::TraceReader. CTest runs this with RANKLENS_DEVICE=host, RANK=5 and
// RANKLENS_TRACE_DIR set, so the trace is <RANKLENS_TRACE_DIR>/rank5 (removed before the run). Damaged traces are
// covered by tests/trace.
#include <gtest/gtest.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/trace.h"
#include "trace_test_support.h"
#include "ranklens_api.h"

namespace {

using ranklens::events::Call;
using ranklens::events::Op;
using ranklens::trace::RecordType;

std::string env(const char* name) {
  const char* value = getenv(name);
  return value ? value : "";
}

// Everything one rank directory holds, in file order (tests/support/trace_test_support.h).
using EventLog = trace_test::Trace;

// The trace directory of a previous run would make the library refuse to write (it never overwrites a trace).
class FreshTraceDir : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string dir = std::string(getenv("RANKLENS_TRACE_DIR") ? getenv("RANKLENS_TRACE_DIR") : "") + "/rank5";
    if (dir != "/rank5") ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  }
};
const auto* const kFreshTraceDir = ::testing::AddGlobalTestEnvironment(new FreshTraceDir);

// The calls the log must show. Comm A: rank 1 of 4 (ncclCommInitRank), comm B: rank 0 of 2 named "tp".
struct Scenario {
  std::string path;  // ranklensEventLogPath() after the calls
  bool ok = false;
};

const Scenario& scenario() {
  static const Scenario result = [] {
    Scenario s;
    ncclUniqueId id;
    EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    ncclComm_t a = nullptr, b = nullptr;
    EXPECT_EQ(ncclCommInitRank(&a, 4, id, 1), ncclSuccess);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.commName = "tp";
    EXPECT_EQ(ncclCommInitRankConfig(&b, 2, id, 0, &config), ncclSuccess);
    if (a == nullptr || b == nullptr) return s;

    std::vector<float> send(16, 1.0f), recv(16, 0.0f);
    // Collectives outside any group, interleaved across the two communicators.
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclFloat32, ncclSum, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 4, ncclFloat32, ncclMax, b, nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclFloat32, ncclSum, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 4, ncclFloat32, ncclMax, b, nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 2, ncclFloat32, ncclSum, a, nullptr), ncclSuccess);
    // A group of P2P calls to two peers, plus a collective.
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclSend(send.data(), 8, ncclFloat32, 0, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclSend(send.data(), 8, ncclFloat32, 0, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclRecv(recv.data(), 8, ncclFloat32, 0, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclSend(send.data(), 8, ncclFloat32, 2, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclRecv(recv.data(), 8, ncclFloat32, 2, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclRecv(recv.data(), 8, ncclFloat32, 2, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 8, ncclFloat32, ncclSum, a, nullptr), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
    // A simulated group: logged like any other.
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(send.data(), recv.data(), 4, ncclFloat32, ncclMax, b, nullptr), ncclSuccess);
    EXPECT_EQ(ncclSend(send.data(), 4, ncclFloat32, 1, b, nullptr), ncclSuccess);
    EXPECT_EQ(ncclGroupSimulateEnd(&sim), ncclSuccess);
    // P2P outside a group continues the per-(peer, direction) sequence.
    EXPECT_EQ(ncclRecv(recv.data(), 8, ncclFloat32, 0, a, nullptr), ncclSuccess);
    EXPECT_EQ(ranklensMarkStage("step", 3), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(a), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(b), ncclSuccess);
    EXPECT_EQ(ranklensFlush(), ncclSuccess);
    s.path = ranklensEventLogPath();
    s.ok = true;
    return s;
  }();
  return result;
}

struct ExpectedCall {
  uint64_t comm;
  Op op;
  uint64_t seq;
  int rootOrPeer;
  int group;  // 0: outside groups; 1: the ncclGroupEnd group; 2: the simulated group
  uint64_t count;
  int redop;
};

const std::vector<ExpectedCall>& expectedCalls() {
  static const std::vector<ExpectedCall> calls = {
      {0, Op::kAllReduce, 0, -1, 0, 8, ncclSum},
      {1, Op::kAllReduce, 0, -1, 0, 4, ncclMax},
      {0, Op::kAllReduce, 1, -1, 0, 8, ncclSum},
      {1, Op::kAllReduce, 1, -1, 0, 4, ncclMax},
      {0, Op::kAllReduce, 2, -1, 0, 2, ncclSum},
      {0, Op::kSend, 0, 0, 1, 8, -1},
      {0, Op::kSend, 1, 0, 1, 8, -1},
      {0, Op::kRecv, 0, 0, 1, 8, -1},
      {0, Op::kSend, 0, 2, 1, 8, -1},
      {0, Op::kRecv, 0, 2, 1, 8, -1},
      {0, Op::kRecv, 1, 2, 1, 8, -1},
      {0, Op::kAllReduce, 3, -1, 1, 8, ncclSum},
      {1, Op::kAllReduce, 2, -1, 2, 4, ncclMax},
      {1, Op::kSend, 0, 1, 2, 4, -1},
      {0, Op::kRecv, 1, 0, 0, 8, -1},
  };
  return calls;
}

std::string expectedLogPath() { return env("RANKLENS_TRACE_DIR") + "/rank" + env("RANK"); }

class EventLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(env("RANK"), "5") << "run through CTest (RANK=5, RANKLENS_TRACE_DIR=..., RANKLENS_DEVICE=host)";
    ASSERT_FALSE(env("RANKLENS_TRACE_DIR").empty()) << "run through CTest: RANKLENS_TRACE_DIR is not set";
    ASSERT_TRUE(scenario().ok);
  }
};

TEST_F(EventLogTest, PathIsUnderTraceDirByRank) { EXPECT_EQ(scenario().path, expectedLogPath()); }

TEST_F(EventLogTest, Header) {
  EventLog log = trace_test::readTrace(scenario().path);
  EXPECT_EQ(log.manifest.format, "ranklens-trace");
  EXPECT_EQ(log.manifest.version_major, ranklens::trace::kFormatMajor);
  EXPECT_EQ(log.manifest.rank, 5);
  EXPECT_EQ(log.manifest.mode, "replay");
  EXPECT_NE(log.manifest.writer.find("structure"), std::string::npos) << log.manifest.writer;
  EXPECT_NE(log.manifest.writer.find(env("RANKLENS_FILL").empty() ? "clone" : env("RANKLENS_FILL")), std::string::npos);
  EXPECT_EQ(log.manifest.pid, static_cast<int64_t>(getpid()));
  EXPECT_FALSE(log.manifest.host.empty());
  EXPECT_GT(log.manifest.start_time_ns, 0);
  EXPECT_EQ(log.manifest.env.at("RANK"), "5");
  EXPECT_FALSE(log.manifest.closed);  // the process is still running
}

TEST_F(EventLogTest, CommInitAndCommEnd) {
  EventLog log = trace_test::readTrace(scenario().path);
  ASSERT_EQ(log.comms.size(), 2u);
  const auto& a = log.comms[0];
  EXPECT_EQ(a.commId, 0u);
  EXPECT_EQ(a.nranks, 4);
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.parentId, -1);
  EXPECT_EQ(a.color, -1);
  EXPECT_EQ(a.key, -1);
  EXPECT_EQ(a.how, "init");
  EXPECT_EQ(a.name, "");
  EXPECT_EQ(a.worldRanks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(a.blocking);
  const auto& b = log.comms[1];
  EXPECT_EQ(b.commId, 1u);
  EXPECT_EQ(b.nranks, 2);
  EXPECT_EQ(b.rank, 0);
  EXPECT_EQ(b.parentId, -1);
  EXPECT_EQ(b.how, "init");
  EXPECT_EQ(b.name, "tp");
  EXPECT_EQ(b.worldRanks, (std::vector<int>{0, 1}));
  EXPECT_TRUE(b.blocking);
  EXPECT_LE(a.timeNs, b.timeNs);

  ASSERT_EQ(log.ends.size(), 2u);
  EXPECT_EQ(log.ends[0].commId, 0u);
  EXPECT_EQ(log.ends[0].how, "destroy");
  EXPECT_EQ(log.ends[1].commId, 1u);
  EXPECT_EQ(log.ends[1].how, "destroy");
  EXPECT_GE(log.ends[0].timeNs, b.timeNs);
}

TEST_F(EventLogTest, CallsInOrderWithSequencesAndGroups) {
  EventLog log = trace_test::readTrace(scenario().path);
  const auto& expected = expectedCalls();
  ASSERT_EQ(log.calls.size(), expected.size());

  std::map<int, uint64_t> groupIds;  // scenario group number -> logged groupId
  int64_t lastTime = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE("call " + std::to_string(i));
    const Call& call = log.calls[i];
    const ExpectedCall& want = expected[i];
    EXPECT_EQ(call.commId, want.comm);
    EXPECT_EQ(call.op, static_cast<int>(want.op)) << ranklens::events::opName(static_cast<Op>(call.op));
    EXPECT_EQ(call.seq, want.seq);
    EXPECT_EQ(call.rootOrPeer, want.rootOrPeer);
    EXPECT_EQ(call.datatype, static_cast<int>(ncclFloat32));
    EXPECT_EQ(call.count, want.count);
    EXPECT_EQ(call.redop, want.redop);
    EXPECT_EQ(call.stream, 0u);
    EXPECT_EQ(call.nranks, want.comm == 0 ? 4 : 2);
    EXPECT_EQ(call.rank, want.comm == 0 ? 1 : 0);
    if (want.op != Op::kSend) EXPECT_EQ(call.bytes, want.count * sizeof(float));
    EXPECT_GE(call.timeNs, lastTime);
    lastTime = call.timeNs;
    if (want.group == 0) {
      EXPECT_EQ(call.groupId, 0u);
    } else {
      EXPECT_NE(call.groupId, 0u);
      auto [it, inserted] = groupIds.emplace(want.group, call.groupId);
      EXPECT_EQ(call.groupId, it->second) << "calls of one group share its id";
    }
  }
  ASSERT_EQ(groupIds.size(), 2u);
  EXPECT_NE(groupIds[1], groupIds[2]) << "two groups, two ids";

  // The same invariants, derived from the log alone: per-comm collective sequences and per-(comm, peer, direction)
  // P2P sequences count 0, 1, 2, ... in file order.
  std::map<uint64_t, uint64_t> collNext;
  std::map<std::tuple<uint64_t, int, int>, uint64_t> p2pNext;
  for (const Call& call : log.calls) {
    const auto op = static_cast<Op>(call.op);
    if (ranklens::events::isP2p(op))
      EXPECT_EQ(call.seq, p2pNext[std::make_tuple(call.commId, call.rootOrPeer, call.op)]++);
    else
      EXPECT_EQ(call.seq, collNext[call.commId]++);
  }
  EXPECT_EQ(collNext[0], 4u);
  EXPECT_EQ(collNext[1], 3u);

  // One GroupBegin/GroupEnd pair per outermost group, with its call count and result; the simulated group included.
  ASSERT_EQ(log.groupBegins.size(), 2u);
  EXPECT_EQ(log.groupBegins[0].groupId, groupIds[1]);
  EXPECT_EQ(log.groupBegins[1].groupId, groupIds[2]);
  ASSERT_EQ(log.groups.size(), 2u);
  EXPECT_EQ(log.groups[0].groupId, groupIds[1]);
  EXPECT_EQ(log.groups[0].calls, 7u);
  EXPECT_EQ(log.groups[0].result, ncclSuccess);
  EXPECT_EQ(log.groups[1].groupId, groupIds[2]);
  EXPECT_EQ(log.groups[1].calls, 2u);
  EXPECT_EQ(log.groups[1].result, ncclSuccess);
  EXPECT_GE(log.groups[0].timeNs, log.calls[11].timeNs);
  EXPECT_LE(log.groups[0].timeNs, log.calls[12].timeNs);
}

TEST_F(EventLogTest, Stage) {
  EventLog log = trace_test::readTrace(scenario().path);
  ASSERT_EQ(log.stages.size(), 1u);
  EXPECT_EQ(log.stages[0].name, "step");
  EXPECT_EQ(log.stages[0].step, 3);
  EXPECT_GE(log.stages[0].timeNs, log.calls.back().timeNs);
  ASSERT_FALSE(log.ends.empty());
  EXPECT_LE(log.stages[0].timeNs, log.ends[0].timeNs);
}

}  // namespace

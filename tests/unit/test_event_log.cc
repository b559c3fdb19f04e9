// SPDX-License-Identifier: Apache-2.0
// The per-rank event log, black-box: NCCL calls through the public API of libnccl.so.2, then the file read back with
// ranklens::events::readEventLog. CTest runs this with RANKLENS_DEVICE=host, RANK=5 and RANKLENS_TRACE_DIR set, so
// the log is <RANKLENS_TRACE_DIR>/rank5/events.msgpack. Also: damaged copies of that file (truncated, bad magic, wrong
// major version, a corrupt byte) are rejected with "<path>: offset <n>: <reason>".
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
#include "ranklens_api.h"

namespace {

using ranklens::events::Call;
using ranklens::events::EventLog;
using ranklens::events::Op;
using ranklens::events::readEventLog;
using ranklens::events::RecordType;

std::string env(const char* name) {
  const char* value = getenv(name);
  return value ? value : "";
}

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
      {0, Op::kAllReduce, 0, -1, 0, 8, ncclSum}, {1, Op::kAllReduce, 0, -1, 0, 4, ncclMax},
      {0, Op::kAllReduce, 1, -1, 0, 8, ncclSum}, {1, Op::kAllReduce, 1, -1, 0, 4, ncclMax},
      {0, Op::kAllReduce, 2, -1, 0, 2, ncclSum}, {0, Op::kSend, 0, 0, 1, 8, -1},
      {0, Op::kSend, 1, 0, 1, 8, -1},            {0, Op::kRecv, 0, 0, 1, 8, -1},
      {0, Op::kSend, 0, 2, 1, 8, -1},            {0, Op::kRecv, 0, 2, 1, 8, -1},
      {0, Op::kRecv, 1, 2, 1, 8, -1},            {0, Op::kAllReduce, 3, -1, 1, 8, ncclSum},
      {1, Op::kAllReduce, 2, -1, 2, 4, ncclMax}, {1, Op::kSend, 0, 1, 2, 4, -1},
      {0, Op::kRecv, 1, 0, 0, 8, -1},
  };
  return calls;
}

std::string expectedLogPath() { return env("RANKLENS_TRACE_DIR") + "/rank" + env("RANK") + "/events.msgpack"; }

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
  EventLog log;
  std::string error;
  ASSERT_TRUE(readEventLog(scenario().path, &log, &error)) << error;
  EXPECT_EQ(log.header.magic, "ranklens-events");
  EXPECT_EQ(log.header.versionMajor, ranklens::events::kEventLogVersionMajor);
  EXPECT_EQ(log.header.versionMinor, ranklens::events::kEventLogVersionMinor);
  EXPECT_EQ(log.header.rankLabel, "5");
  EXPECT_EQ(log.header.mode, "replay");
  EXPECT_EQ(log.header.fidelity, "structure");
  EXPECT_EQ(log.header.fill, env("RANKLENS_FILL").empty() ? "clone" : env("RANKLENS_FILL"));
  EXPECT_EQ(log.header.pid, static_cast<int64_t>(getpid()));
  EXPECT_FALSE(log.header.host.empty());
  EXPECT_GT(log.header.startTimeNs, 0);
}

TEST_F(EventLogTest, CommInitAndCommEnd) {
  EventLog log;
  std::string error;
  ASSERT_TRUE(readEventLog(scenario().path, &log, &error)) << error;
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
  EventLog log;
  std::string error;
  ASSERT_TRUE(readEventLog(scenario().path, &log, &error)) << error;
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

  // One GroupEnd record per non-empty group, with its call count and result; the simulated group included.
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
  EventLog log;
  std::string error;
  ASSERT_TRUE(readEventLog(scenario().path, &log, &error)) << error;
  ASSERT_EQ(log.stages.size(), 1u);
  EXPECT_EQ(log.stages[0].name, "step");
  EXPECT_EQ(log.stages[0].step, 3);
  EXPECT_GE(log.stages[0].timeNs, log.calls.back().timeNs);
  ASSERT_FALSE(log.ends.empty());
  EXPECT_LE(log.stages[0].timeNs, log.ends[0].timeNs);
}

// ------------------------------------------------------------------------------------------- damaged files

std::string readBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string writeCopy(const std::string& name, const std::string& bytes) {
  const std::string dir = env("RANKLENS_TRACE_DIR") + "/damaged";
  if (mkdir(dir.c_str(), 0777) != 0 && errno != EEXIST) ADD_FAILURE() << "mkdir " << dir << ": " << strerror(errno);
  const std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// Record boundaries and types, parsed independently of readEventLog.
struct Record {
  size_t start, size;
  int type;
};
std::vector<Record> splitRecords(const std::string& data) {
  std::vector<Record> records;
  size_t offset = 0;
  while (offset < data.size()) {
    const size_t start = offset;
    msgpack::object_handle handle = msgpack::unpack(data.data(), data.size(), offset);
    records.push_back({start, offset - start, handle.get().via.array.ptr[0].as<int>()});
  }
  return records;
}

::testing::AssertionResult rejected(const std::string& path, EventLog* log, size_t offset, const std::string& reason) {
  std::string error;
  if (readEventLog(path, log, &error)) return ::testing::AssertionFailure() << path << " was accepted";
  for (const std::string& part : {path + ": ", "offset " + std::to_string(offset) + ": ", reason})
    if (error.find(part) == std::string::npos)
      return ::testing::AssertionFailure() << "error \"" << error << "\" lacks \"" << part << "\"";
  return ::testing::AssertionSuccess() << error;
}

class DamagedEventLogTest : public EventLogTest {
 protected:
  void SetUp() override {
    EventLogTest::SetUp();
    if (HasFatalFailure()) return;
    bytes_ = readBytes(scenario().path);
    records_ = splitRecords(bytes_);
    ASSERT_GT(records_.size(), 10u);
    ASSERT_EQ(records_[0].type, static_cast<int>(RecordType::kHeader));
    magic_ = bytes_.find("ranklens-events");
    ASSERT_NE(magic_, std::string::npos);
    ASSERT_LT(magic_, records_[0].size);
  }
  std::string bytes_;
  std::vector<Record> records_;
  size_t magic_ = 0;
};

TEST_F(DamagedEventLogTest, TruncatedMidRecordKeepsEverythingBefore) {
  EventLog full;
  std::string error;
  ASSERT_TRUE(readEventLog(scenario().path, &full, &error)) << error;

  // Cut every record after the header in the middle, one file each.
  for (size_t k = 1; k < records_.size(); ++k) {
    SCOPED_TRACE("truncated in record " + std::to_string(k));
    const Record& cut = records_[k];
    ASSERT_GE(cut.size, 2u);
    const std::string path = writeCopy("truncated.msgpack", bytes_.substr(0, cut.start + cut.size / 2));
    EventLog log;
    ASSERT_TRUE(rejected(path, &log, cut.start, "truncated record"));

    std::map<int, size_t> before;
    for (size_t i = 0; i < k; ++i) before[records_[i].type]++;
    EXPECT_EQ(log.header.magic, "ranklens-events");
    EXPECT_EQ(log.header.rankLabel, "5");
    EXPECT_EQ(log.comms.size(), before[static_cast<int>(RecordType::kCommInit)]);
    EXPECT_EQ(log.ends.size(), before[static_cast<int>(RecordType::kCommEnd)]);
    EXPECT_EQ(log.calls.size(), before[static_cast<int>(RecordType::kCall)]);
    EXPECT_EQ(log.groups.size(), before[static_cast<int>(RecordType::kGroupEnd)]);
    EXPECT_EQ(log.stages.size(), before[static_cast<int>(RecordType::kStage)]);
    for (size_t i = 0; i < log.calls.size() && i < full.calls.size(); ++i) {
      EXPECT_EQ(log.calls[i].commId, full.calls[i].commId);
      EXPECT_EQ(log.calls[i].seq, full.calls[i].seq);
      EXPECT_EQ(log.calls[i].op, full.calls[i].op);
      EXPECT_EQ(log.calls[i].timeNs, full.calls[i].timeNs);
    }
  }
}

TEST_F(DamagedEventLogTest, TruncatedHeader) {
  EventLog log;
  EXPECT_TRUE(rejected(writeCopy("truncated_header.msgpack", bytes_.substr(0, magic_ + 4)), &log, 0,
                       "truncated record"));
  EXPECT_TRUE(log.calls.empty());
}

TEST_F(DamagedEventLogTest, EmptyFile) {
  EventLog log;
  EXPECT_TRUE(rejected(writeCopy("empty.msgpack", ""), &log, 0, "no header"));
}

TEST_F(DamagedEventLogTest, FlippedByteInMagic) {
  std::string bytes = bytes_;
  bytes[magic_ + 3] ^= 0x01;  // "ranklens-events" -> "ranjlens-events"
  EventLog log;
  EXPECT_TRUE(rejected(writeCopy("bad_magic.msgpack", bytes), &log, 0, "bad magic"));
  EXPECT_TRUE(log.comms.empty());
  EXPECT_TRUE(log.calls.empty());
}

TEST_F(DamagedEventLogTest, WrongMajorVersion) {
  std::string bytes = bytes_;
  const size_t major = magic_ + strlen("ranklens-events");  // header: [magic, versionMajor, versionMinor, ...]
  ASSERT_EQ(static_cast<unsigned char>(bytes[major]), ranklens::events::kEventLogVersionMajor);  // positive fixint
  bytes[major] = 7;
  EventLog log;
  EXPECT_TRUE(rejected(writeCopy("bad_version.msgpack", bytes), &log, 0, "unsupported event log version 7.0"));
  EXPECT_TRUE(log.calls.empty());

  bytes[magic_ + 3] ^= 0x01;  // and a bad magic too: the magic is checked first
  EXPECT_TRUE(rejected(writeCopy("bad_magic_and_version.msgpack", bytes), &log, 0, "bad magic"));
}

TEST_F(DamagedEventLogTest, CorruptRecordInTheMiddle) {
  const Record& bad = records_[records_.size() / 2];
  std::string bytes = bytes_;
  bytes[bad.start] = static_cast<char>(0xC1);  // never used in msgpack
  EventLog log;
  EXPECT_TRUE(rejected(writeCopy("corrupt.msgpack", bytes), &log, bad.start, "corrupt record"));
  size_t callsBefore = 0;
  for (size_t i = 0; i < records_.size() / 2; ++i)
    callsBefore += records_[i].type == static_cast<int>(RecordType::kCall);
  EXPECT_EQ(log.calls.size(), callsBefore);
}

TEST_F(DamagedEventLogTest, MissingFileNamesThePath) {
  EventLog log;
  std::string error;
  const std::string path = env("RANKLENS_TRACE_DIR") + "/damaged/does-not-exist.msgpack";
  EXPECT_FALSE(readEventLog(path, &log, &error));
  EXPECT_NE(error.find(path), std::string::npos) << error;
}

}  // namespace

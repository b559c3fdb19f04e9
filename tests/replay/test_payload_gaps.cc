// SPDX-License-Identifier: Apache-2.0
// What a value replay of a recording cannot restore: the calls that receive data without a stored payload, the
// first of them and its step, and why (the recording's counters, else its payload policy).
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"

namespace {

using namespace ranklens;

struct Call {
  int64_t timeNs;
  events::Op op;
  uint64_t count;
  bool stored;
};

struct Rank {
  std::vector<events::Stage> marks;
  std::vector<Call> calls;
  std::map<std::string, uint64_t> counters;
  std::map<std::string, std::string> env;
};

std::unique_ptr<trace::Recording> write(const std::string& dir, const Rank& r) {
  EXPECT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  trace::Manifest m;
  m.mode = "record";
  m.rank = 0;
  m.world_size = 2;
  m.env = r.env;
  std::string error;
  std::unique_ptr<trace::TraceWriter> w;
  error = trace::TraceWriter::create(dir, m, {}, &w).message();
  EXPECT_NE(w, nullptr) << error;
  if (!w) return nullptr;
  events::CommInit world;
  world.nranks = 2;
  world.how = "init";
  w->append(trace::RecordType::kCommInit, world);
  for (const auto& mark : r.marks) w->append(trace::RecordType::kStage, mark);
  uint64_t collSeq = 0, sendSeq = 0;
  for (const Call& call : r.calls) {
    events::Call c;
    c.nranks = 2;
    c.op = static_cast<int>(call.op);
    c.seq = call.op == events::Op::kSend ? sendSeq++ : collSeq++;
    c.rootOrPeer = call.op == events::Op::kSend ? 1 : -1;
    c.datatype = 0;  // int8
    c.count = c.bytes = call.count;
    c.timeNs = call.timeNs;
    w->append(trace::RecordType::kCall, c);
    if (!call.stored) continue;
    trace::PayloadRef ref;
    ref.seq = c.seq;
    ref.op = c.op;
    ref.peer = c.rootOrPeer;
    ref.count = call.count;
    const std::vector<uint8_t> data(call.count, 7);
    EXPECT_TRUE(w->appendPayload(ref, data.data(), data.size(), trace::BackPressure::kWait));
  }
  for (const auto& [name, value] : r.counters) w->setCounter(name, value);
  EXPECT_TRUE(w->close().isOk());
  std::unique_ptr<trace::Recording> recording;
  error = trace::Recording::open(dir, -1, &recording).message();
  EXPECT_NE(recording, nullptr) << error;
  return recording;
}

events::Stage mark(const char* name, int64_t step, int64_t timeNs) {
  events::Stage s;
  s.name = name;
  s.step = step;
  s.timeNs = timeNs;
  return s;
}

class PayloadGaps : public ::testing::Test {
 protected:
  std::string root_ = ::testing::TempDir() + "/payload-gaps-" + std::to_string(getpid());
  std::string dir_ = root_ + "/rank0";
  void TearDown() override { EXPECT_EQ(system(("rm -rf '" + root_ + "'").c_str()), 0); }
};

TEST_F(PayloadGaps, NoneWhenEveryReceivingCallHasItsPayload) {
  Rank r;
  r.calls = {{10, events::Op::kAllReduce, 64, true},
             {20, events::Op::kSend, 64, false},      // sends receive nothing
             {30, events::Op::kAllReduce, 0, false},  // nor do empty calls
             {40, events::Op::kBroadcast, 8, true}};
  auto rec = write(dir_, r);
  ASSERT_NE(rec, nullptr);
  const trace::PayloadGaps gaps = trace::payloadGaps(*rec);
  EXPECT_EQ(gaps.receiving, 2u);
  EXPECT_EQ(gaps.missing, 0u);
  EXPECT_EQ(gaps.first, nullptr);
  EXPECT_EQ(trace::describePayloadGaps(*rec), "");
}

TEST_F(PayloadGaps, NamesTheFirstMissingCallItsStepAndTheRecordingsReason) {
  Rank r;
  r.marks = {mark("step", 0, 100), mark("step", 1, 200), mark("step", 2, 300)};
  r.calls = {{150, events::Op::kAllReduce, 64, true},
             {160, events::Op::kAllReduce, 64, true},
             {250, events::Op::kAllReduce, 64, false},  // step 1: skipped for a full staging
             {260, events::Op::kSend, 64, false},
             {350, events::Op::kAllReduce, 64, false}};
  r.counters = {{trace::counter::kPayloadsSkippedStagingFull, 2}};
  auto rec = write(dir_, r);
  ASSERT_NE(rec, nullptr);
  const trace::PayloadGaps gaps = trace::payloadGaps(*rec);
  EXPECT_EQ(gaps.receiving, 4u);
  EXPECT_EQ(gaps.missing, 2u);
  ASSERT_NE(gaps.first, nullptr);
  EXPECT_EQ(gaps.first->call.seq, 2u);
  EXPECT_EQ(gaps.firstStep, 1);
  const std::string text = trace::describePayloadGaps(*rec);
  EXPECT_NE(text.find("2 of the 4 recorded calls that receive data have no payload in the recording (2 for a full "
                      "staging)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("part from the recorded run's at AllReduce comm 0 seq 2 (step 1)"), std::string::npos) << text;
  EXPECT_NE(text.find("staging_full: wait"), std::string::npos) << text;
  EXPECT_EQ(text.find("payload policy"), std::string::npos) << "every missing payload is explained: " << text;
}

TEST_F(PayloadGaps, WhatTheCountersDoNotExplainIsThePayloadPolicy) {
  Rank r;
  r.marks = {mark("optimizer", 4, 100)};
  r.calls = {{50, events::Op::kAllReduce, 8, true},
             {150, events::Op::kAllReduce, 1 << 20, false},
             {160, events::Op::kAllReduce, 1 << 20, false}};
  r.counters = {{trace::counter::kPayloadsSkippedTooLarge, 1}};
  auto rec = write(dir_, r);
  ASSERT_NE(rec, nullptr);
  const std::string text = trace::describePayloadGaps(*rec);
  EXPECT_NE(text.find("(1 larger than all of staging, the rest left out by its payload policy (payloads: small, the "
                      "default, stores up to 64 KiB"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("AllReduce comm 0 seq 1 (after optimizer step 4)"), std::string::npos) << text;
}

TEST_F(PayloadGaps, ThePolicyTheRecordingWasGivenAndACallBeforeAnyMarker) {
  Rank r;
  r.marks = {mark("step", 0, 100)};
  r.calls = {{50, events::Op::kAllGather, 64, false}, {150, events::Op::kAllReduce, 64, false}};
  r.env = {{"RANKLENS_PAYLOADS", "none"}};
  auto rec = write(dir_, r);
  ASSERT_NE(rec, nullptr);
  const std::string text = trace::describePayloadGaps(*rec);
  EXPECT_NE(text.find("2 of the 2 recorded calls that receive data have no payload in the recording (left out by its "
                      "payload policy (RANKLENS_PAYLOADS=none;"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("AllGather comm 0 seq 0 (before the first step marker)"), std::string::npos) << text;
}

// A segment damaged after a few records: the payloads of the calls past the damage are not read, and the warning
// says so instead of blaming the payload policy (which stored them) and asking for a new recording.
TEST_F(PayloadGaps, DamageNotThePolicyExplainsPayloadsPastIt) {
  Rank r;
  for (int i = 0; i < 6; ++i) r.calls.push_back({10 * i, events::Op::kAllReduce, 64, true});
  r.env = {{"RANKLENS_PAYLOADS", "all"}};
  ASSERT_NE(write(dir_, r), nullptr);
  // Flip a CRC byte of the fourth call's PayloadRef (frames: the CommInit, then a Call and a PayloadRef per call):
  // that call is read, its payload is not.
  const std::string seg = dir_ + "/" + trace::segmentName(0);
  FILE* f = fopen(seg.c_str(), "r+b");
  ASSERT_NE(f, nullptr);
  std::vector<uint8_t> data(1 << 16);
  data.resize(fread(data.data(), 1, data.size(), f));
  size_t at = 16;  // the segment header
  for (int frame = 0; frame < 8; ++frame) {
    ASSERT_LE(at + 8, data.size());
    at += 8 + (data[at] | data[at + 1] << 8 | data[at + 2] << 16 | static_cast<size_t>(data[at + 3]) << 24);
  }
  ASSERT_LE(at + 8, data.size());
  data[at + 4] ^= 0xFF;
  ASSERT_EQ(fseek(f, 0, SEEK_SET), 0);
  ASSERT_EQ(fwrite(data.data(), 1, data.size(), f), data.size());
  fclose(f);

  std::unique_ptr<trace::Recording> rec;
  ASSERT_TRUE(trace::Recording::open(dir_, -1, &rec).isOk());
  ASSERT_FALSE(rec->problems().empty());
  const std::string text = trace::describePayloadGaps(*rec);
  EXPECT_NE(text.find("lost to damage at " + seg + ": offset " + std::to_string(at) + ": CRC-32 mismatch"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Copy the trace again"), std::string::npos) << text;
  EXPECT_EQ(text.find("RANKLENS_PAYLOADS=all"), std::string::npos) << "the policy stored them: " << text;
}

}  // namespace

namespace {
// A PayloadRef whose op is a string: the shape a hand-edited or hostile trace may have.
struct StringOpRef {
  uint64_t commId = 0, seq = 0;
  std::string op = "AllReduce";
  int datatype = 0;
  uint64_t count = 4, rawBytes = 4;
  uint32_t file = 0;
  uint64_t offset = 0, compressedBytes = 0;
  uint32_t rawCrc32 = 0;
  int zstdLevel = 0, peer = -1, shuffle = 0;
  MSGPACK_DEFINE_ARRAY(commId, seq, op, datatype, count, rawBytes, file, offset, compressedBytes, rawCrc32, zstdLevel,
                       peer, shuffle)
};
}  // namespace

// A record of the wrong shape is reported with its file and offset and skipped, as the spec says: the recording
// still opens, with the calls around it.
TEST_F(PayloadGaps, AMalformedRecordIsReportedWithFileAndOffsetAndSkipped) {
  trace::Manifest m;
  m.mode = "record";
  m.rank = 0;
  m.world_size = 2;
  std::string error;
  std::unique_ptr<trace::TraceWriter> w;
  error = trace::TraceWriter::create(dir_, m, {}, &w).message();
  ASSERT_NE(w, nullptr) << error;
  events::Call c;
  c.nranks = 2;
  c.op = static_cast<int>(events::Op::kAllReduce);
  c.count = c.bytes = 4;
  w->append(trace::RecordType::kCall, c);
  w->append(trace::RecordType::kPayloadRef, StringOpRef{});
  c.seq = 1;
  w->append(trace::RecordType::kCall, c);
  ASSERT_TRUE(w->close().isOk());
  std::unique_ptr<trace::Recording> rec;
  error = trace::Recording::open(dir_, -1, &rec).message();
  ASSERT_NE(rec, nullptr) << error;
  EXPECT_EQ(rec->callCount(), 2u);
  ASSERT_EQ(rec->problems().size(), 1u);
  const trace::Problem& p = rec->problems().front();
  EXPECT_EQ(p.file, dir_ + "/" + trace::segmentName(0));
  EXPECT_GT(p.offset, 0u);
  EXPECT_NE(p.reason.find("PayloadRef record"), std::string::npos) << p.reason;
}

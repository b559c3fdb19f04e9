// SPDX-License-Identifier: Apache-2.0
// Replay of a recording without a GPU: replay_scenario is recorded once through RankLens forwarding to the fake "real
// NCCL" (payloads: all), then replayed by RankLens alone on the host device. The scenario writes every buffer it
// received; value replay must reproduce the recorded run's file byte for byte, and the replay trace's counters must
// account for every call, hold and payload.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <functional>
#include <memory>
#include <map>
#include <sstream>
#include <string>

#include "ranklens/estimator.h"
#include "ranklens/peer_waits.h"
#include "ranklens/recording.h"
#include "trace_test_support.h"

namespace {

using trace_test::readTrace;
using trace_test::Trace;

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Recorded {
  std::string root;    // trace root (holds rank1)
  std::string output;  // what the scenario received from the real library
  int status = -1;
  std::string log;
};

const std::string& tmpRoot() {
  static const std::string root = trace_test::freshDir(TEST_TMP_DIR, "replay-" + std::to_string(getpid()));
  return root;
}

// A recording of the scenario as rank 1 of 4 under `name`, the fake real NCCL spinning 200 us per call unless
// `extra` says otherwise.
Recorded recordScenario(const std::string& name, const std::map<std::string, std::string>& extra = {}) {
  Recorded r;
  r.root = tmpRoot() + "/" + name;
  const std::string out = tmpRoot() + "/" + name + ".out";
  std::map<std::string, std::string> env = {{"RANKLENS_MODE", "record"},
                                            {"RANKLENS_DEVICE", "host"},
                                            {"RANKLENS_REAL_NCCL", FAKE_REAL_NCCL},
                                            {"RANKLENS_TRACE_DIR", r.root},
                                            {"RANKLENS_PAYLOADS", "all"},
                                            {"RANK", "1"},
                                            {"WORLD_SIZE", "4"},
                                            {"FAKE_REAL_NCCL_SPIN_US", "200"},
                                            {"SCENARIO_OUT", out}};
  for (const auto& [k, v] : extra) env[k] = v;
  auto run = trace_test::runWithEnv(env, "'" REPLAY_SCENARIO "'");
  r.status = run.status;
  r.log = run.output;
  r.output = slurp(out);
  return r;
}

// One recording shared by the tests (deterministic: the fake library's results depend only on the inputs).
const Recorded& recording() {
  static const Recorded rec = recordScenario("recorded");
  return rec;
}

struct Replayed {
  trace_test::ChildRun run;
  std::string output;
  std::string traceDir;
};

Replayed replay(const std::string& name, std::map<std::string, std::string> extra) {
  Replayed r;
  const std::string dir = tmpRoot() + "/" + name;
  const std::string out = tmpRoot() + "/" + name + ".out";
  std::map<std::string, std::string> env = {{"RANKLENS_MODE", "replay"},
                                            {"RANKLENS_DEVICE", "host"},
                                            {"RANKLENS_REPLAY_TRACE", recording().root},
                                            {"RANKLENS_FIDELITY", "value"},
                                            {"RANKLENS_FILL", "poison"},
                                            {"RANKLENS_TRACE_DIR", dir},
                                            {"RANK", "1"},
                                            {"WORLD_SIZE", "4"},
                                            {"NCCL_DEBUG", "WARN"},
                                            {"SCENARIO_OUT", out}};
  for (const auto& [k, v] : extra) env[k] = v;
  r.run = trace_test::runWithEnv(env, "'" REPLAY_SCENARIO "'");
  r.output = slurp(out);
  r.traceDir = dir + "/rank1";
  return r;
}

// The shared recording's rank 1 as a duration history (a one-rank history: observed durations, no transfer times).
ranklens::timing::History recordedHistory() {
  ranklens::timing::History h;
  std::string error;
  if (!(error = ranklens::timing::addRecordedRun(recording().root + "/rank1", &h).message()).empty())
    ADD_FAILURE() << error;
  return h;
}

// `h` saved as tmpRoot()/name; the path.
std::string savedHistory(const std::string& name, const ranklens::timing::History& h) {
  const std::string path = tmpRoot() + "/" + name;
  std::string error;
  if (!(error = ranklens::timing::saveHistory(path, h).message()).empty()) ADD_FAILURE() << error;
  return path;
}

// What the recorded durations add up to: one per call outside groups, one per stream of each group.
uint64_t recordedHoldNs(const Trace& t) {
  uint64_t total = 0;
  for (const auto& timing : t.timings) total += static_cast<uint64_t>(std::max<int64_t>(timing.durationNs, 0));
  return total;
}

// recordedHistory() with every duration a function of the bytes alone: each estimate is then exactly flatNs() of its
// size however the estimator picks its samples, and no load on the machine can move it (the fake's own durations
// have a long tail under load, which an estimate, a median or trimmed mean, leaves out).
int64_t flatNs(uint64_t bytes) { return 100'000 + static_cast<int64_t>(bytes / 64); }
ranklens::timing::History flatHistory() {
  ranklens::timing::History h = recordedHistory();
  for (auto& sample : h.samples) sample.durationNs = flatNs(sample.bytes);
  return h;
}
// Every hold in the replay trace is the flat duration of a size the history has, and they add up to replay_held_ns.
void expectFlatHolds(const Trace& t, const ranklens::timing::History& h) {
  std::set<int64_t> sizes;
  for (const auto& sample : h.samples) sizes.insert(flatNs(sample.bytes));
  uint64_t held = 0;
  for (const auto& timing : t.timings) {
    EXPECT_EQ(timing.clock, ranklens::trace::kClockEstimated);
    if (timing.durationNs <= 0) continue;
    EXPECT_EQ(sizes.count(timing.durationNs), 1u)
        << "comm " << timing.commId << " seq " << timing.seq << " held " << timing.durationNs << " ns";
    held += static_cast<uint64_t>(timing.durationNs);
  }
  EXPECT_GT(held, 0u);
  EXPECT_EQ(t.counter("replay_held_ns"), held);
}

// Device staging (payload_device_bytes, on by default) and restoring from pinned memory alone give the same bytes.
TEST(ReplayRecording, ValueReplayWithoutDeviceStagingIsBitForBitToo) {
  const Recorded& rec = recording();
  ASSERT_EQ(rec.status, 0) << rec.log;
  Trace recorded = readTrace(rec.root + "/rank1");
  Replayed staged = replay("value-staged", {{"NCCL_DEBUG", "INFO"}});
  // auto: sized from the memory the recording says the job left (the host device's: the host's; 64 MiB, the floor,
  // unless this host is short of memory).
  EXPECT_NE(staged.run.output.find("payload_device_bytes auto: "), std::string::npos) << staged.run.output;
  EXPECT_NE(staged.run.output.find(" of device memory (the recorded job used up to "), std::string::npos)
      << staged.run.output;
  Replayed pinned = replay("value-pinned", {{"RANKLENS_PAYLOAD_DEVICE_BYTES", "0"}});
  ASSERT_EQ(staged.run.status, 0) << staged.run.output;
  ASSERT_EQ(pinned.run.status, 0) << pinned.run.output;
  EXPECT_EQ(staged.output, rec.output);
  EXPECT_EQ(pinned.output, rec.output);
  Trace s = readTrace(staged.traceDir), p = readTrace(pinned.traceDir);
  EXPECT_EQ(s.counter("replay_payloads_restored"), recorded.payloads.size());
  EXPECT_LE(s.counter("replay_payloads_from_device"), s.counter("replay_payloads_uploaded"));
  EXPECT_EQ(s.counter("replay_payload_upload_failures"), 0u);
  EXPECT_EQ(p.counter("replay_payloads_restored"), recorded.payloads.size());
  EXPECT_EQ(p.counter("replay_payloads_uploaded"), 0u);
  EXPECT_EQ(p.counter("replay_payloads_from_device"), 0u);
}

TEST(ReplayRecording, ValueReplayRestoresEveryReceivedBufferBitForBit) {
  const Recorded& rec = recording();
  ASSERT_EQ(rec.status, 0) << rec.log;
  Trace recorded = readTrace(rec.root + "/rank1");
  ASSERT_FALSE(recorded.payloads.empty());

  Replayed r = replay("value", {});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  // Under fill: poison every unrestored byte would show as NaN/0xff; the files are identical instead.
  EXPECT_EQ(r.output, rec.output);
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.calls.size(), recorded.calls.size());
  EXPECT_EQ(t.counter("replay_calls"), recorded.calls.size());
  EXPECT_EQ(t.counter("replay_calls_matched"), recorded.calls.size());
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);
  EXPECT_EQ(t.counter("replay_comms_matched"), 2u);
  EXPECT_EQ(t.counter("replay_payloads_restored"), recorded.payloads.size());
  EXPECT_EQ(t.counter("replay_filled_without_payload"), 0u);
  // The host device's holds take no calibration off: the held time is exactly the recorded time.
  EXPECT_EQ(t.counter("replay_held_ns"), recordedHoldNs(recorded));
  EXPECT_EQ(t.counter("replay_holds"), recorded.timings.size());
  EXPECT_GT(t.counter("replay_held_ns"), 0u);
  // Each communicator's binding, final at its first call, is in the replay trace (both kept their creation binding).
  ASSERT_EQ(t.bindings.size(), 2u);
  for (const auto& b : t.bindings) {
    EXPECT_EQ(b.recordedCommId, b.commId);
    EXPECT_EQ(b.rule, "creation");
  }
  // The split child was sized from the recording (no split table configured).
  ASSERT_EQ(t.comms.size(), 2u);
  EXPECT_EQ(t.comms[1].nranks, recorded.comms[1].nranks);
  EXPECT_EQ(t.comms[1].rank, recorded.comms[1].rank);
}

TEST(ReplayRecording, HostTimeOfEveryCallIsRecordedAndReplayed) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Trace recorded = readTrace(recording().root + "/rank1");
  // The fake real NCCL spins 200 us per data-moving call (in a group: at ncclGroupEnd).
  int64_t expectedNs = 0;
  for (const auto& c : recorded.calls) {
    if (c.groupId != 0) continue;
    EXPECT_GE(c.hostNs, 200'000) << "seq " << c.seq;
    expectedNs += c.hostNs;
  }
  ASSERT_FALSE(recorded.groups.empty());
  for (const auto& g : recorded.groups) {
    EXPECT_GE(g.hostNs, 2 * 200'000) << "group " << g.groupId;  // a Send and a Recv
    expectedNs += g.hostNs;
  }
  Replayed r = replay("host-time", {{"RANKLENS_FIDELITY", "timing"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  // The replay's own work per call is far below 200 us: most of the recorded host time is waited (half at least,
  // so that a loaded CI machine, where that work takes longer, does not fail it; without host_time it is 0).
  EXPECT_GT(t.counter("replay_host_held_ns"), static_cast<uint64_t>(expectedNs) / 2);
  EXPECT_LE(t.counter("replay_host_held_ns"), static_cast<uint64_t>(expectedNs));
  for (const auto& c : t.calls) EXPECT_EQ(c.hostNs, -1);  // replay traces do not claim host times

  Replayed ignored = replay("host-time-ignore", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_HOST_TIME", "ignore"}});
  ASSERT_EQ(ignored.run.status, 0) << ignored.run.output;
  EXPECT_EQ(readTrace(ignored.traceDir).counter("replay_host_held_ns"), 0u);
}

// The scenario's dump lines of one kind ("broadcast", "allreduce", ...), in order.
std::vector<std::string> linesOf(const std::string& output, const std::string& what) {
  std::vector<std::string> out;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(what + " ", 0) == 0) out.push_back(line);
  return out;
}

TEST(ReplayRecording, TimingReplayRestoresOnlyTheControlPayloads) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Trace recorded = readTrace(recording().root + "/rank1");
  // 100 bytes: the 16-byte Broadcast flags and the 64-byte Recv are control-sized; AllGather (128 B) and AllReduce
  // (1 KiB) are not and get the fill (poison).
  Replayed r = replay("timing", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_PAYLOAD_MAX_BYTES", "100"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  size_t small = 0;
  for (const auto& p : recorded.payloads) small += p.rawBytes <= 100;
  ASSERT_GT(small, 0u);
  ASSERT_LT(small, recorded.payloads.size());
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_payloads_restored"), small);
  EXPECT_EQ(t.counter("replay_filled_without_payload"), 0u);  // counted at value fidelity only
  EXPECT_EQ(linesOf(r.output, "broadcast"), linesOf(recording().output, "broadcast"));
  EXPECT_EQ(linesOf(r.output, "recv"), linesOf(recording().output, "recv"));
  EXPECT_NE(linesOf(r.output, "allreduce"), linesOf(recording().output, "allreduce"));
  EXPECT_NE(linesOf(r.output, "allgather"), linesOf(recording().output, "allgather"));
  EXPECT_EQ(t.counter("replay_held_ns"), recordedHoldNs(recorded));

  Replayed none = replay("timing-no-control", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_PAYLOAD_MAX_BYTES", "0"}});
  ASSERT_EQ(none.run.status, 0) << none.run.output;
  EXPECT_EQ(readTrace(none.traceDir).counter("replay_payloads_restored"), 0u);
  EXPECT_NE(linesOf(none.output, "broadcast"), linesOf(recording().output, "broadcast"));
}

TEST(ReplayRecording, StructureReplayWithATraceChecksCallsButHoldsNothing) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("structure", {{"RANKLENS_FIDELITY", "structure"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);
  EXPECT_EQ(t.counter("replay_holds"), 0u);
}

// A copy of a rank's trace (without payloads) in which the Timing records `capture` picks say what record mode writes
// for a call captured into a CUDA graph: captured, 0 ns. Returns how many it changed.
size_t copyWithCapturedTimings(const std::string& from, const std::string& to,
                               const std::function<bool(const ranklens::trace::Timing&)>& capture) {
  using namespace ranklens::trace;
  std::string error;
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(from, Limits{}, &reader).message();
  EXPECT_NE(reader, nullptr) << error;
  if (!reader) return 0;
  std::unique_ptr<TraceWriter> writer;
  error = TraceWriter::create(to, reader->manifest(), WriterOptions{}, &writer).message();
  EXPECT_NE(writer, nullptr) << error;
  if (!writer) return 0;
  size_t changed = 0;
  reader->scan([&](RecordType type, const msgpack::object& body, const Location&) {
    if (type == RecordType::kPayloadRef) return true;  // the payload files are not copied
    if (type != RecordType::kTiming) return writer->append(type, body);
    Timing t = body.as<Timing>();
    if (capture(t)) {
      t.captured = true;
      t.durationNs = 0;
      ++changed;
    }
    return writer->append(type, t);
  });
  EXPECT_TRUE(writer->close().isOk()) << writer->lastError();
  return changed;
}

// Calls the recording has no duration for, because they were captured into a CUDA graph (record mode writes a
// captured Timing of 0 ns), took time all the same: the replay holds them for an estimate from the recording's timed
// calls (under a capture the hold joins the program's graph), counts them, and history leaves them out.
TEST(ReplayRecording, CallsCapturedInAGraphAreHeldForAnEstimate) {
  const Recorded rec = recordScenario("to-capture", {{"RANKLENS_PAYLOADS", "none"}});
  ASSERT_EQ(rec.status, 0) << rec.log;
  const std::string root = tmpRoot() + "/captured";
  size_t lone = 0, grouped = 0;
  const size_t changed = copyWithCapturedTimings(rec.root + "/rank1", root + "/rank1", [&](const auto& t) {
    if (t.groupId == 0 && t.op == static_cast<int>(ranklens::events::Op::kAllReduce) && lone < 2) return ++lone > 0;
    if (t.groupId != 0 && grouped < 1) return ++grouped > 0;
    return false;
  });
  ASSERT_EQ(changed, 3u);
  std::string error;
  std::unique_ptr<ranklens::trace::Recording> recording;
  error = ranklens::trace::Recording::open(root, 1, &recording).message();
  ASSERT_NE(recording, nullptr) << error;
  size_t captured = 0;
  for (const auto& rc : recording->calls()) {
    if (!rc.captured) continue;
    ++captured;
    EXPECT_EQ(rc.durationNs, -1);
  }
  EXPECT_EQ(captured, 3u);
  ranklens::timing::History history;
  ASSERT_TRUE((error = ranklens::timing::addRecordedRun(*recording, &history).message()).empty()) << error;
  for (const auto& sample : history.samples) EXPECT_GT(sample.durationNs, 0);

  Replayed r = replay("captured-replay", {{"RANKLENS_REPLAY_TRACE", root}, {"RANKLENS_FIDELITY", "timing"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);
  EXPECT_EQ(t.counter("replay_untimed"), 3u);
  EXPECT_EQ(t.counter("replay_estimated"), 3u);
  size_t estimatedTimings = 0;
  for (const auto& timing : t.timings) estimatedTimings += timing.clock == ranklens::trace::kClockEstimated;
  EXPECT_EQ(estimatedTimings, 3u);
  // Held for estimates fitted to the recorded calls (~200 us each), not for nothing.
  const uint64_t extraNs = t.counter("replay_held_ns") - recordedHoldNs(readTrace(root + "/rank1"));
  EXPECT_GT(extraNs, 3 * 50'000u);
  EXPECT_LT(extraNs, 3 * 5'000'000u);
}

// A copy of the shared recording whose first payload blob has its middle bytes overwritten: the blob's frame or
// its CRC no longer holds. The payload file's path and the blob's offset, for the messages.
struct Damaged {
  std::string root, payloadFile;
  uint64_t offset = 0;
};
Damaged damagedPayloadCopy(const std::string& name) {
  Damaged d;
  d.root = tmpRoot() + "/" + name;
  EXPECT_EQ(system(("rm -rf '" + d.root + "' && cp -r '" + recording().root + "' '" + d.root + "'").c_str()), 0);
  Trace recorded = readTrace(d.root + "/rank1");
  EXPECT_FALSE(recorded.payloads.empty());
  if (recorded.payloads.empty()) return d;
  const auto& ref = recorded.payloads.front();
  d.offset = ref.offset;
  d.payloadFile = d.root + "/rank1/" + ranklens::trace::payloadName(ref.file);
  std::fstream f(d.payloadFile, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(ref.offset + ref.compressedBytes / 2));
  const std::string junk(std::max<uint64_t>(1, std::min<uint64_t>(ref.compressedBytes / 2, 64)), '\x5a');
  f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  EXPECT_TRUE(f.good());
  return d;
}

// At value fidelity an unreadable recorded payload fails the call (ncclSystemError), and stderr names the call, the
// file, the offset and the way on, without NCCL_DEBUG.
TEST(ReplayPayloadError, AnUnusablePayloadFailsTheCallNamingFileAndOffset) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const Damaged d = damagedPayloadCopy("damaged-payload-error");
  Replayed r = replay("payload-error", {{"RANKLENS_REPLAY_TRACE", d.root}, {"NCCL_DEBUG", "<unset>"}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;  // the scenario's exit code for a failed call
  EXPECT_NE(r.run.output.find("unhandled system error"), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find("ranklens: error: replay: "), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find(d.payloadFile + ": offset " + std::to_string(d.offset)), std::string::npos)
      << r.run.output;
  EXPECT_NE(r.run.output.find("RANKLENS_ON_PAYLOAD_ERROR=warn"), std::string::npos) << r.run.output;
}

// on_payload_error: warn goes on with the fill, one loud line per call, and the counters say how many.
TEST(ReplayPayloadError, WarnFillsTheCallSaysSoAndCountsIt) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const Damaged d = damagedPayloadCopy("damaged-payload-warn");
  Replayed r =
      replay("payload-warn",
             {{"RANKLENS_REPLAY_TRACE", d.root}, {"NCCL_DEBUG", "<unset>"}, {"RANKLENS_ON_PAYLOAD_ERROR", "warn"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  size_t lines = 0;
  for (size_t at = r.run.output.find("ranklens: warning: replay: "); at != std::string::npos;
       at = r.run.output.find("ranklens: warning: replay: ", at + 1))
    lines++;
  EXPECT_EQ(lines, 1u) << r.run.output;
  EXPECT_NE(r.run.output.find(d.payloadFile + ": offset " + std::to_string(d.offset)), std::string::npos)
      << r.run.output;
  EXPECT_NE(r.output, recording().output);  // under fill: poison the call's values are not the recorded ones
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_payload_failures"), 1u);
  EXPECT_EQ(t.counter("replay_filled_without_payload"), 1u);
}

// `ranklens replay` of the shared recording at value fidelity, its events in `traceDir` (empty: no --trace-dir).
trace_test::ChildRun cliReplay(const std::string& traceDir, const std::map<std::string, std::string>& env = {}) {
  std::map<std::string, std::string> all = {{"SCENARIO_OUT", tmpRoot() + "/cli-replay.out"}};
  for (const auto& [k, v] : env) all[k] = v;
  return trace_test::runWithEnv(
      all, "'" RANKLENS_BIN "' replay --trace '" + recording().root + "' --rank 1 --fidelity value --device host " +
               (traceDir.empty() ? "" : "--trace-dir '" + traceDir + "'") + " -- '" REPLAY_SCENARIO "'");
}

// An event directory that cannot be written is refused before the job runs, naming the path and the reason.
TEST(ReplayEventLog, ATraceDirThatCannotBeWrittenIsRefusedBeforeTheRun) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const std::string file = tmpRoot() + "/not-a-directory";
  std::ofstream(file) << "x";
  auto r = cliReplay(file);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: the replay's event log cannot be written: " + file), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("exited with status"), std::string::npos) << r.output;  // the job did not start
  // The same through the environment (or trace_dir in the YAML): a directory below a file.
  r = cliReplay("", {{"RANKLENS_TRACE_DIR", file + "/events"}});
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(file + "/events"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Not a directory"), std::string::npos) << r.output;
}

// A disk that fills during the run: the replay exits non-zero and says "No space left on device" with the path.
// Needs a small tmpfs (root, or a user namespace that may mount): skipped elsewhere.
TEST(ReplayEventLog, AFullDiskDuringTheRunFailsTheReplayWithTheReason) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const std::string mnt = trace_test::freshDir(tmpRoot(), "tiny-fs");
  if (system(("mount -t tmpfs -o size=64k tmpfs '" + mnt + "' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  // Two pages left: the check before the run and the trace's first files fit, the rest of the event log does not.
  EXPECT_EQ(system(("head -c 57344 /dev/zero > '" + mnt + "/filler' 2>/dev/null").c_str()), 0);
  auto r = cliReplay(mnt + "/events");
  EXPECT_EQ(system(("umount '" + mnt + "'").c_str()), 0);
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("No space left on device"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(mnt + "/events"), std::string::npos) << r.output;
}

// A world size no job has is refused at once, with the bound, instead of growing until the allocator gives up.
TEST(ReplayCli, AnAbsurdWorldSizeIsRefusedWithTheBound) {
  auto r = trace_test::runWithEnv({}, "'" RANKLENS_BIN "' replay -n 1000000000 -r 0 --device host --no-events -- true");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--world-size 1000000000: more ranks than RankLens replays (at most 131072)"),
            std::string::npos)
      << r.output;
}

// An unknown subcommand is named, with the list; a huge or hostile bad value is cut and escaped in the error line.
TEST(ReplayCli, UnknownSubcommandsAndBadValuesAreShownReadably) {
  auto r = trace_test::runWithEnv({}, "'" RANKLENS_BIN "' frobnicate");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: unknown subcommand 'frobnicate' of ranklens; the subcommands are: replay, record"),
            std::string::npos)
      << r.output;
  r = trace_test::runWithEnv({}, "'" RANKLENS_BIN "' trace frob$(printf '\\033')x");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown subcommand 'frob\\x1bx' of ranklens trace; the subcommands are: summary"),
            std::string::npos)
      << r.output;
  const std::string yaml = tmpRoot() + "/huge-value.yaml";
  std::ofstream(yaml) << "fill: " << std::string(8 << 20, 'a') << "\n";
  r = trace_test::runWithEnv({},
                             "'" RANKLENS_BIN "' replay -c '" + yaml + "' -n 2 -r 0 --device host --no-events -- true");
  EXPECT_EQ(r.status, 2);
  EXPECT_LT(r.output.size(), 2000u);
  EXPECT_NE(r.output.find("a... (8388608 bytes)' for 'fill'"), std::string::npos) << r.output.substr(0, 2000);
  r = trace_test::runWithEnv({}, "'" RANKLENS_BIN "' replay --fill \"$(printf 'x\\007y')\" -- true");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--fill: x\\x07y not in"), std::string::npos) << r.output;
}

TEST(ReplayMismatch, ErrorPolicyFailsTheCallAndNamesBothSides) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("count-error", {{"SCENARIO_VARIANT", "count"}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;  // the scenario's exit code for a failed call
  EXPECT_NE(r.run.output.find("AllReduce at step 1 failed: invalid usage"), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find("replayed: comm 0 seq 2 AllReduce float32 count 255"), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find("recorded: comm 0 seq 2 AllReduce float32 count 256"), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find("RANKLENS_ON_MISMATCH"), std::string::npos) << r.run.output;
  EXPECT_NE(r.run.output.find("call site"), std::string::npos) << r.run.output;
}

TEST(ReplayMismatch, SkippedCallsAreResynchronised) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("skip-warn", {{"SCENARIO_VARIANT", "skip"}, {"RANKLENS_ON_MISMATCH", "warn"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  // Step 3 skipped its Broadcast: the AllReduce of step 4 is found one recorded call ahead, then all match again.
  EXPECT_EQ(t.counter("replay_mismatches"), 1u);
  EXPECT_EQ(t.counter("replay_resyncs"), 1u);
  EXPECT_EQ(t.counter("replay_recorded_calls_skipped"), 1u);
  EXPECT_EQ(t.counter("replay_extra_calls"), 0u);
  EXPECT_EQ(t.counter("replay_calls_matched"), t.counter("replay_calls"));
  // Every buffer of step 4 still gets the recorded values.
  const std::string step4 = "allreduce step 4:";
  const auto recordedAt = recording().output.find(step4), replayedAt = r.output.find(step4);
  ASSERT_NE(recordedAt, std::string::npos);
  ASSERT_NE(replayedAt, std::string::npos);
  EXPECT_EQ(r.output.substr(replayedAt), recording().output.substr(recordedAt));
  EXPECT_NE(r.run.output.find("resynchronised"), std::string::npos) << r.run.output;
}

TEST(ReplayMismatch, ExtraCallsGetAnEstimatedDurationAndTheRestStillMatches) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("extra-estimate", {{"SCENARIO_VARIANT", "extra"}, {"RANKLENS_ON_MISMATCH", "estimate"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_extra_calls"), 1u);
  EXPECT_EQ(t.counter("replay_estimated"), 1u);
  EXPECT_EQ(t.counter("replay_calls_matched") + 1, t.counter("replay_calls"));
  // Its Timing record says so (what `ranklens compare` lists); the matched calls keep the recorded clock.
  size_t estimatedTimings = 0;
  for (const auto& timing : t.timings) estimatedTimings += timing.clock == ranklens::trace::kClockEstimated;
  EXPECT_EQ(estimatedTimings, 1u);
  // The extra call is held for an estimate fitted to the recorded AllReduces (~200 us each): plausible, not zero.
  Trace recorded = readTrace(recording().root + "/rank1");
  const uint64_t extraNs = t.counter("replay_held_ns") - recordedHoldNs(recorded);
  EXPECT_GT(extraNs, 50'000u);
  EXPECT_LT(extraNs, 5'000'000u);
  EXPECT_EQ(r.output, recording().output);  // the extra call is in place and not dumped
}

// ncclGroupSimulateEnd in a replay answers with the estimator (here from the recording's own ~200 us AllReduces),
// not with the fixed model a library without a recording uses (~15 us for 1 KiB).
TEST(ReplayEstimated, GroupSimulateEndAnswersWithTheEstimator) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("simulate", {{"SCENARIO_VARIANT", "simulate"}, {"RANKLENS_ON_MISMATCH", "estimate"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  const std::string key = "simulated AllReduce: ";
  const auto at = r.output.find(key);
  ASSERT_NE(at, std::string::npos) << r.output;
  const double us = atof(r.output.c_str() + at + key.size());
  // The replayed recording is the replay's history: the same estimate from it here (a one-rank history: observed
  // durations). The fake's durations follow the machine's load, so the value itself is not fixed; the estimate is.
  const ranklens::timing::History own = recordedHistory();
  const int allReduce = static_cast<int>(ranklens::events::Op::kAllReduce);
  const auto sample = std::find_if(own.samples.begin(), own.samples.end(),
                                   [&](const auto& x) { return x.op == allReduce && !x.grouped; });
  ASSERT_NE(sample, own.samples.end());
  ranklens::timing::Estimator::Options observed;
  observed.target = ranklens::timing::EstimateTarget::kObserved;
  const ranklens::timing::Estimate expected =
      ranklens::timing::Estimator(own, observed)
          .estimate(allReduce, sample->nranks, false, sample->bytes, sample->role);
  EXPECT_NEAR(us, static_cast<double>(expected.durationNs) / 1000.0, 0.1) << r.output;
  EXPECT_GT(us, 50.0) << "the fake's calls take about 200 us: " << r.output;
}

TEST(ReplayEstimated, EveryCallHeldForAnEstimateFromTheHistory) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const ranklens::timing::History flat = flatHistory();
  const std::string history = savedHistory("own.hist", flat);
  Replayed r = replay(
      "estimated", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_TIMING", "estimated"}, {"RANKLENS_HISTORY", history}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);
  EXPECT_EQ(t.counter("replay_estimated"), t.counter("replay_calls"));  // matched, but every duration estimated
  // A one-rank history has no transfer times (the default target): observed durations, and a WARN that says why.
  EXPECT_NE(r.run.output.find("has no transfer times"), std::string::npos) << r.run.output;
  expectFlatHolds(t, flat);

  Replayed missing =
      replay("estimated-no-history", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_TIMING", "estimated"}});
  EXPECT_EQ(missing.run.status, 3) << missing.run.output;
  EXPECT_NE(missing.run.output.find("RANKLENS_HISTORY"), std::string::npos) << missing.run.output;
}

// No recording at all (a scale never recorded): timing: estimated with a history holds every call for its estimate,
// matches nothing and counts no mismatch. Without the history, timing fidelity is refused with both ways out.
TEST(ReplayEstimated, WithoutARecordingEveryCallIsHeldForItsEstimate) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const ranklens::timing::History flat = flatHistory();
  const std::string history = savedHistory("own-for-unrecorded.hist", flat);
  Replayed r = replay("estimated-unrecorded", {{"RANKLENS_REPLAY_TRACE", ""},
                                               {"RANKLENS_FIDELITY", "timing"},
                                               {"RANKLENS_TIMING", "estimated"},
                                               {"RANKLENS_HISTORY", history},
                                               {"RANKLENS_FILL", "clone"},
                                               // no recording to size the scenario's split: the table does
                                               {"RANKLENS_GROUPS", "[{members: [1, 3], color: 1}]"}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  Trace t = readTrace(r.traceDir);
  Trace recorded = readTrace(recording().root + "/rank1");
  EXPECT_GT(t.counter("replay_calls"), 0u);
  EXPECT_EQ(t.counter("replay_estimated"), t.counter("replay_calls"));
  EXPECT_EQ(t.counter("replay_calls_matched"), 0u);
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);
  EXPECT_EQ(t.counter("replay_comms_unmatched"), 0u);
  EXPECT_EQ(t.counter("replay_recorded_calls"), 0u);
  EXPECT_EQ(r.run.output.find("differs from the recording"), std::string::npos) << r.run.output;
  expectFlatHolds(t, flat);  // the same program: every size is in the history
  EXPECT_EQ(t.timings.size(), recorded.timings.size());
  EXPECT_EQ(r.run.output.find("spans nodes"), std::string::npos) << r.run.output;  // 8 ranks per node by default

  // Two ranks per node: the 4-rank world communicator spans nodes, which no call of the history did. Said once.
  Replayed multiNode = replay("estimated-unrecorded-nodes", {{"RANKLENS_REPLAY_TRACE", ""},
                                                             {"RANKLENS_FIDELITY", "timing"},
                                                             {"RANKLENS_TIMING", "estimated"},
                                                             {"RANKLENS_HISTORY", history},
                                                             {"RANKLENS_FILL", "clone"},
                                                             {"RANKLENS_RANKS_PER_NODE", "2"},
                                                             {"RANKLENS_GROUPS", "[{members: [1, 3], color: 1}]"}});
  ASSERT_EQ(multiNode.run.status, 0) << multiNode.run.output;
  const size_t at = multiNode.run.output.find("spans nodes");
  ASSERT_NE(at, std::string::npos) << multiNode.run.output;
  EXPECT_EQ(multiNode.run.output.find("spans nodes", at + 1), std::string::npos) << "warned more than once";

  // The same with nccl-tests samples across nodes in the history (`history import-nccl-tests`: benchmark samples of a
  // 4-rank communicator on 2 hosts, three times the flat duration): no WARN, and the world communicator's calls are
  // held for the cluster's time across nodes, the 2-rank split's (within a node) for the recorded one.
  ranklens::timing::History withNcclTests = flat;
  for (auto& sample : withNcclTests.samples) sample.transferNs = sample.durationNs;
  withNcclTests.runs.push_back(std::string(ranklens::timing::kNcclTestsRunPrefix) + "/logs/4ranks.log:all:1");
  for (const auto& sample : flat.samples) {
    if (sample.nranks != 4) continue;
    ranklens::timing::HistorySample b = sample;
    b.crossesNodes = b.benchmark = true;
    b.durationNs = b.transferNs = 3 * sample.durationNs;
    b.role.clear();
    b.stepOccurrence = -1;
    b.stepPhase = -1;
    b.run = static_cast<uint32_t>(withNcclTests.runs.size() - 1);
    withNcclTests.samples.push_back(b);
  }
  const std::string ncclTestsHistory = savedHistory("own-and-nccl-tests.hist", withNcclTests);
  Replayed acrossNodes =
      replay("estimated-unrecorded-nccl-tests", {{"RANKLENS_REPLAY_TRACE", ""},
                                                 {"RANKLENS_FIDELITY", "timing"},
                                                 {"RANKLENS_TIMING", "estimated"},
                                                 {"RANKLENS_HISTORY", ncclTestsHistory},
                                                 {"RANKLENS_FILL", "clone"},
                                                 {"RANKLENS_RANKS_PER_NODE", "2"},
                                                 {"RANKLENS_GROUPS", "[{members: [1, 3], color: 1}]"}});
  ASSERT_EQ(acrossNodes.run.status, 0) << acrossNodes.run.output;
  EXPECT_EQ(acrossNodes.run.output.find("spans nodes"), std::string::npos) << acrossNodes.run.output;
  Trace across = readTrace(acrossNodes.traceDir);
  std::map<uint64_t, int> sizeOf;
  for (const auto& c : across.comms) sizeOf[c.commId] = c.nranks;
  std::set<int64_t> flatDurations, benchmarkDurations;
  for (const auto& sample : flat.samples) {
    flatDurations.insert(sample.durationNs);
    if (sample.nranks == 4) benchmarkDurations.insert(3 * sample.durationNs);
  }
  size_t acrossHeld = 0, withinHeld = 0;
  for (const auto& timing : across.timings) {
    if (timing.durationNs <= 0) continue;
    if (sizeOf.at(timing.commId) == 4) {
      EXPECT_EQ(benchmarkDurations.count(timing.durationNs), 1u) << "seq " << timing.seq << ": " << timing.durationNs;
      ++acrossHeld;
    } else {
      EXPECT_EQ(flatDurations.count(timing.durationNs), 1u) << "seq " << timing.seq << ": " << timing.durationNs;
      ++withinHeld;
    }
  }
  EXPECT_GT(acrossHeld, 0u);
  EXPECT_GT(withinHeld, 0u);
  EXPECT_GT(across.counter("replay_estimates_from_benchmarks"), 0u);
  EXPECT_EQ(readTrace(multiNode.traceDir).counter("replay_estimates_from_benchmarks"), 0u);

  Replayed refused = replay("unrecorded-no-history", {{"RANKLENS_REPLAY_TRACE", ""}, {"RANKLENS_FIDELITY", "timing"}});
  EXPECT_NE(refused.run.status, 0) << refused.run.output;
  EXPECT_NE(refused.run.output.find("RANKLENS_REPLAY_TRACE"), std::string::npos) << refused.run.output;
  EXPECT_NE(refused.run.output.find("RANKLENS_TIMING=estimated"), std::string::npos) << refused.run.output;
}

// timing: estimated with a history that knows where in the step each call was: the step's AllReduce is held for
// what the same call took in the history's runs (300 us), not for the median of every AllReduce of its size (50 us,
// mostly made elsewhere in the step), and its Send/Recv group likewise (400 us). The replay counts each op and
// size's calls, and groups on a stream, from its "step" markers.
TEST(ReplayEstimated, TheSameCallOfTheStepInTheHistoryIsWhatItIsHeldFor) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const ranklens::timing::History own = recordedHistory();
  ranklens::timing::History h;
  const int allReduce = static_cast<int>(ranklens::events::Op::kAllReduce);
  for (uint32_t job = 0; job < 3; ++job) {
    h.runs.push_back("/jobs/" + std::to_string(job) + "/rank1");
    for (ranklens::timing::HistorySample sample : own.samples) {
      sample.run = job;
      if ((sample.op == allReduce || sample.grouped) && sample.stepOccurrence == 0) {
        sample.durationNs = sample.grouped ? 400'000 : 300'000;
        for (int elsewhere = 0; elsewhere < 4; ++elsewhere) {  // the same size later in the step, and faster
          ranklens::timing::HistorySample later = sample;
          later.durationNs = 50'000;
          later.stepOccurrence = 1 + elsewhere;
          h.samples.push_back(later);
        }
      }
      h.samples.push_back(sample);
    }
  }
  const size_t placed = std::count_if(h.samples.begin(), h.samples.end(), [&](const auto& sample) {
    return sample.op == allReduce && sample.stepOccurrence == 0;
  });
  ASSERT_GE(placed, 3u * 3u) << "the scenario marks its steps: its step AllReduce has a place";
  const std::string history = savedHistory("placed.hist", h);
  Replayed r =
      replay("estimated-placed",
             {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_TIMING", "estimated"}, {"RANKLENS_HISTORY", history}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  size_t held = 0, groups = 0;
  for (const auto& timing : readTrace(r.traceDir).timings) {
    if (timing.groupId != 0) {  // the step's Send/Recv group: the same group of the step in the history
      EXPECT_EQ(timing.durationNs, 400'000) << "group " << timing.groupId;
      ++groups;
    }
    if (timing.op != allReduce) continue;
    EXPECT_EQ(timing.durationNs, 300'000) << "seq " << timing.seq;
    ++held;
  }
  EXPECT_EQ(held, 5u);  // one per step
  EXPECT_EQ(groups, 5u);
}

// Of the samples at the step's place, the replay takes those nearest in phase to its own call: three jobs made the
// step's AllReduce early in their steps (as this scenario does, 300 us), three others late (phase 0.9, 500 us). The
// replay measures a call's phase over the previous step's length, so its first step has none and takes all six
// jobs' samples (their trimmed mean, 400 us: a one-rank history has observed durations); the later steps take the
// early ones.
TEST(ReplayEstimated, AtTheSamePlaceTheSamplesNearestInStepPhaseAreHeldFor) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const ranklens::timing::History own = recordedHistory();
  ranklens::timing::History h;
  const int allReduce = static_cast<int>(ranklens::events::Op::kAllReduce);
  for (uint32_t job = 0; job < 6; ++job) {
    const bool late = job >= 3;
    h.runs.push_back("/jobs/" + std::to_string(job) + "/rank1");
    for (ranklens::timing::HistorySample sample : own.samples) {
      sample.run = job;
      if (sample.op == allReduce && sample.stepOccurrence == 0) {
        ASSERT_LT(sample.stepPhase, 0.4) << "the scenario's step AllReduce comes early in its step";
        sample.durationNs = late ? 500'000 : 300'000;
        if (late) sample.stepPhase = 0.9;
      }
      h.samples.push_back(sample);
    }
  }
  const std::string history = savedHistory("phased.hist", h);
  Replayed r =
      replay("estimated-phased",
             {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_TIMING", "estimated"}, {"RANKLENS_HISTORY", history}});
  ASSERT_EQ(r.run.status, 0) << r.run.output;
  std::vector<int64_t> held;
  for (const auto& timing : readTrace(r.traceDir).timings)
    if (timing.op == allReduce) held.push_back(timing.durationNs);
  EXPECT_EQ(held, (std::vector<int64_t>{400'000, 300'000, 300'000, 300'000, 300'000}));
}

TEST(ReplayEstimated, EstimateTargetTransferHoldsForTheTransferTimes) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  // This recording's samples, every one observed at 200 us with a transfer time of 100 us (as if every call had
  // waited for a peer as long as it transferred). Fixed values: the fake's measured durations vary with the load of
  // the machine, and the two targets are summarised differently (a trimmed mean, a median), so noisy values would
  // not keep the ratio at one half.
  ranklens::timing::History h = recordedHistory();
  for (auto& sample : h.samples) {
    sample.durationNs = 200'000;
    sample.transferNs = 100'000;
  }
  const std::string history = savedHistory("half-transfer.hist", h);
  auto heldNs = [&](const char* name, const char* target) {
    Replayed r = replay(name, {{"RANKLENS_FIDELITY", "timing"},
                               {"RANKLENS_TIMING", "estimated"},
                               {"RANKLENS_HISTORY", history},
                               {"RANKLENS_ESTIMATE_TARGET", target}});
    EXPECT_EQ(r.run.status, 0) << r.run.output;
    return static_cast<double>(readTrace(r.traceDir).counter("replay_held_ns"));
  };
  const double observed = heldNs("estimated-observed", "observed"), transfer = heldNs("estimated-transfer", "transfer");
  ASSERT_GT(observed, 0);
  EXPECT_NEAR(transfer / observed, 0.5, 0.15);
}

// host_time: own replays each call's own host cost. In this recording every 4th data-moving call of the fake real
// NCCL spins 5 ms instead of 200 us, as a launch does behind a full CUDA launch queue: `replay` holds the thread for
// all of it, `own` for its operation's typical cost (and counts the rest), `ignore` for nothing.
TEST(ReplayHostTime, OwnLeavesOutHostTimeAboveTheOperationsTypicalCost) {
  static const Recorded slow = recordScenario("recorded-slow", {{"FAKE_REAL_NCCL_SLOW_EVERY", "4:5000"}});
  ASSERT_EQ(slow.status, 0) << slow.log;
  auto run = [&](const std::string& name, const char* hostTime) {
    Replayed r = replay(
        name,
        {{"RANKLENS_REPLAY_TRACE", slow.root}, {"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_HOST_TIME", hostTime}});
    EXPECT_EQ(r.run.status, 0) << r.run.output;
    return readTrace(r.traceDir);
  };
  const Trace all = run("host-replay", "replay"), own = run("host-own", "own"), none = run("host-ignore", "ignore");
  const double capped = static_cast<double>(own.counter("replay_host_capped_ns"));
  EXPECT_GT(capped, 2 * 4'000'000.0);  // several 5 ms calls held for about 0.4 ms each
  EXPECT_EQ(all.counter("replay_host_capped_ns"), 0u);
  const double saved =
      static_cast<double>(all.counter("replay_host_held_ns")) - static_cast<double>(own.counter("replay_host_held_ns"));
  // What `own` leaves out is what `replay` held more: at most the capped time, and most of it. Not all of it: on a
  // loaded machine a call's own work takes part of its recorded time, and the hold only tops it up (seen: 85%).
  EXPECT_LT(saved, 1.1 * capped);
  EXPECT_GT(saved, 0.5 * capped);
  EXPECT_GT(own.counter("replay_host_held_ns"), 0u);  // the typical cost is still replayed
  EXPECT_EQ(none.counter("replay_host_held_ns"), 0u);
}

// peer_pacing: recorded. With every rank of the job recorded, each collective outside a group that every rank timed
// (with its gap) is paced: the counter equals what timing::peerPace finds in the recordings. With rank 1 alone in
// the trace root the replay says which rank is missing and holds as before.
TEST(ReplayPeerPacing, EveryCollectiveTheJobTimedIsPacedAndAMissingRankIsNamed) {
  Recorded job;
  for (const char* rank : {"0", "2", "3", "1"}) {
    job = recordScenario("recorded-job", {{"RANK", rank}});
    ASSERT_EQ(job.status, 0) << job.log;
  }
  std::vector<std::unique_ptr<ranklens::trace::Recording>> ranks;
  std::vector<const ranklens::trace::Recording*> views;
  for (int r = 0; r < 4; ++r) {
    std::string error;
    ranks.emplace_back();
    error = ranklens::trace::Recording::open(job.root, r, &ranks.back()).message();
    ASSERT_TRUE(ranks.back()) << error;
    views.push_back(ranks.back().get());
  }
  const auto paces = ranklens::timing::peerPace(views, 1);
  const auto expected = std::count_if(paces.begin(), paces.end(), [](const auto& p) { return p.known; });
  ASSERT_GT(expected, 0);

  Replayed paced = replay(
      "paced",
      {{"RANKLENS_REPLAY_TRACE", job.root}, {"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_PEER_PACING", "recorded"}});
  ASSERT_EQ(paced.run.status, 0) << paced.run.output;
  const Trace t = readTrace(paced.traceDir);
  EXPECT_EQ(t.counter("replay_holds_paced"), static_cast<uint64_t>(expected));
  EXPECT_EQ(t.counter("replay_mismatches"), 0u);

  Replayed alone = replay("paced-alone", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_PEER_PACING", "recorded"}});
  ASSERT_EQ(alone.run.status, 0) << alone.run.output;
  EXPECT_NE(alone.run.output.find("peer_pacing: recorded: it needs every rank's recording in"), std::string::npos)
      << alone.run.output;
  EXPECT_NE(alone.run.output.find("rank 0's cannot be read"), std::string::npos) << alone.run.output;
  EXPECT_EQ(readTrace(alone.traceDir).counter("replay_holds_paced"), 0u);
  EXPECT_GT(readTrace(alone.traceDir).counter("replay_holds"), 0u);
}

// A recording made on another kind of machine (trace format 1.7 names it): the replay says so at start, since a
// host-bound step then runs at this machine's speed. Its own machine: nothing said.
TEST(ReplayRecording, AnotherKindOfMachineIsNamedAtStart) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed same = replay("machine-same", {{"RANKLENS_FIDELITY", "timing"}});
  ASSERT_EQ(same.run.status, 0) << same.run.output;
  EXPECT_EQ(same.run.output.find("another kind of machine"), std::string::npos) << same.run.output;

  const std::string elsewhere = tmpRoot() + "/recorded-elsewhere";
  std::filesystem::copy(recording().root, elsewhere, std::filesystem::copy_options::recursive);
  const std::string manifestPath = elsewhere + "/rank1/manifest.msgpack";
  const std::string bytes = slurp(manifestPath);
  ranklens::trace::Manifest m = msgpack::unpack(bytes.data(), bytes.size()).get().as<ranklens::trace::Manifest>();
  ASSERT_FALSE(m.cpu_model.empty());
  m.cpu_model = "Elsewhere CPU";
  msgpack::sbuffer packed;
  msgpack::pack(packed, m);
  std::ofstream(manifestPath, std::ios::binary | std::ios::trunc).write(packed.data(), packed.size());
  Replayed other = replay("machine-other", {{"RANKLENS_FIDELITY", "timing"}, {"RANKLENS_REPLAY_TRACE", elsewhere}});
  ASSERT_EQ(other.run.status, 0) << other.run.output;
  EXPECT_NE(other.run.output.find("recorded on another kind of machine (CPU Elsewhere CPU against "), std::string::npos)
      << other.run.output;
}

TEST(ReplayMismatch, ATraceWithUnrecordedStepsIsRefusedNamingTheSetting) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  const std::string partial = tmpRoot() + "/recorded-alternating";
  std::filesystem::copy(recording().root, partial, std::filesystem::copy_options::recursive);
  const std::string manifestPath = partial + "/rank1/manifest.msgpack";
  const std::string bytes = slurp(manifestPath);
  ranklens::trace::Manifest m = msgpack::unpack(bytes.data(), bytes.size()).get().as<ranklens::trace::Manifest>();
  m.counters["calls_unrecorded"] = 12;
  msgpack::sbuffer packed;
  msgpack::pack(packed, m);
  std::ofstream(manifestPath, std::ios::binary | std::ios::trunc).write(packed.data(), packed.size());
  Replayed r = replay("replay-alternating", {{"RANKLENS_FIDELITY", "structure"}, {"RANKLENS_REPLAY_TRACE", partial}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;
  EXPECT_NE(r.run.output.find("12 of its calls were forwarded without being recorded"), std::string::npos)
      << r.run.output;
  EXPECT_NE(r.run.output.find("RANKLENS_RECORD_ALTERNATE_STEPS"), std::string::npos) << r.run.output;
}

TEST(ReplayMismatch, WrongRankIsRefusedWithTheRecordedRanks) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("wrong-rank", {{"RANK", "2"}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;
  EXPECT_NE(r.run.output.find("no recording of rank 2 (recorded: rank1)"), std::string::npos) << r.run.output;
}

TEST(ReplayMismatch, WrongWorldSizeIsRefusedWithTheFix) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("wrong-world", {{"WORLD_SIZE", "8"}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;
  EXPECT_NE(r.run.output.find("recorded with WORLD_SIZE 4"), std::string::npos) << r.run.output;
}

TEST(ReplayMismatch, FidelityTimingWithoutATraceNamesTheSetting) {
  Replayed r = replay("no-trace", {{"RANKLENS_REPLAY_TRACE", "<unset>"}, {"RANKLENS_FIDELITY", "timing"}});
  EXPECT_EQ(r.run.status, 3) << r.run.output;
  EXPECT_NE(r.run.output.find("RANKLENS_REPLAY_TRACE"), std::string::npos) << r.run.output;
}

TEST(ReplayDebugging, GdbStopsInThePayloadRestoreWithTheCallAndTheBytes) {
  if (system("gdb --version >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "gdb is not installed (scripts/setup.sh installs it)";
  ASSERT_EQ(recording().status, 0) << recording().log;
  const std::string dir = tmpRoot() + "/gdb";
  auto run = trace_test::runWithEnv(
      {{"RANKLENS_MODE", "replay"},
       {"RANKLENS_DEVICE", "host"},
       {"RANKLENS_REPLAY_TRACE", recording().root},
       {"RANKLENS_FIDELITY", "value"},
       {"RANK", "1"},
       {"WORLD_SIZE", "4"},
       {"RANKLENS_TRACE_DIR", dir}},
      "gdb -batch -nx -ex 'set breakpoint pending on' -ex 'break ranklens_restore_payload' -ex run -ex 'info args' "
      "-ex 'x/4fw data' -ex kill --args '" REPLAY_SCENARIO "'");
  // docs/debugging.md: the first restore is step 0's AllReduce: the recorded sum (the fake real NCCL returns 4x the
  // gradient, as if all 4 ranks had sent the same) about to enter the receive buffer.
  EXPECT_NE(run.output.find("hit Breakpoint 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("comm = 0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("seq = 0"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("\"AllReduce\""), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("bytes = 1024"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("0\t2\t4\t6"), std::string::npos) << run.output;  // grad[i] = i * 0.5, times 4 ranks
}

TEST(ReplayDebugging, BreakAtRaisesSigtrapAtThatCall) {
  ASSERT_EQ(recording().status, 0) << recording().log;
  Replayed r = replay("break", {{"RANKLENS_BREAK_AT", "0:3"}});
  EXPECT_EQ(r.run.status, 128 + SIGTRAP) << r.run.output;
  EXPECT_NE(r.run.output.find("comm 0 seq 3 reached (break_at)"), std::string::npos) << r.run.output;
}

}  // namespace

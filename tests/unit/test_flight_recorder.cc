// SPDX-License-Identifier: Apache-2.0
// PyTorch Flight Recorder dumps: the restricted pickle reader, the dump model, the import into a RankLens trace and
// the cross-rank diagnosis, on the synthetic dumps of tests/data/flight_recorder/make_synthetic.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "fr_dump.h"
#include "fr_export.h"
#include "fr_import.h"
#include "trace_log.h"
#include "ranklens/trace.h"

namespace fs = std::filesystem;
using namespace ranklens;
using ranklens::events::Op;

namespace {

const std::string kData = std::string(RANKLENS_TEST_DATA) + "/flight_recorder/synthetic";

fr::Dump load(const std::string& rel, int rank = -1) {
  fr::Dump d;
  const ranklens::Status loaded = fr::loadDump(kData + "/" + rel, rank, &d);
  EXPECT_TRUE(loaded.isOk()) << loaded.message();
  return d;
}

std::string refusal(const std::string& rel) {
  fr::Dump d;
  const ranklens::Status loaded = fr::loadDump(kData + "/" + rel, 0, &d);
  EXPECT_FALSE(loaded.isOk()) << rel;
  return loaded.message();
}

std::vector<fr::Dump> loadDir(const std::string& rel, int ranks) {
  std::vector<fr::Dump> out;
  for (int r = 0; r < ranks; ++r) out.push_back(load(rel + "/rank_" + std::to_string(r)));
  return out;
}

}  // namespace

TEST(FlightRecorderDump, ReadsEveryEntryKindAndState) {
  const fr::Dump d = load("hang-2/rank_0");
  EXPECT_EQ(d.format, "pickle");
  EXPECT_EQ(d.version, "2.10");
  EXPECT_EQ(d.versionMajor, 2);
  EXPECT_EQ(d.versionMinor, 10);
  EXPECT_EQ(d.rank, 0);
  EXPECT_EQ(d.commLibVersion, "2.27.3");
  ASSERT_EQ(d.pgConfig.size(), 2u);
  EXPECT_EQ(d.pgConfig.at("1").desc, "tp");
  EXPECT_EQ(d.pgConfig.at("0").ranks, (std::vector<int>{0, 1}));
  ASSERT_EQ(d.pgStatus.count("0"), 1u);
  EXPECT_EQ(d.pgStatus.at("0").lastStarted, d.pgStatus.at("0").lastCompleted + 1);
  ASSERT_EQ(d.entries.size(), 16u);
  std::set<std::string> names, states;
  for (const fr::Entry& e : d.entries) {
    names.insert(e.profilingName.substr(0, e.profilingName.find(' ')));
    states.insert(e.state);
    EXPECT_TRUE(e.hasFrames);
    EXPECT_FALSE(e.frames.empty());
  }
  EXPECT_EQ(states, (std::set<std::string>{"completed", "started", "scheduled"}));
  for (const char* n : {"nccl:broadcast", "nccl:all_reduce", "nccl:_all_gather_base",
                        "nccl:reduce_scatter_tensor_coalesced", "nccl:all_to_all", "nccl:reduce", "nccl:gather",
                        "nccl:scatter", "nccl:send", "nccl:recv", "nccl:coalesced", "nccl:all_reduce_barrier"}) {
    EXPECT_EQ(names.count(n), 1u) << n;
  }
  const fr::Entry& hung = d.entries[d.entries.size() - 2];
  EXPECT_EQ(hung.profilingName, "nccl:all_reduce");
  EXPECT_EQ(hung.state, "started");
  EXPECT_FALSE(hung.durationMs.has_value());
  EXPECT_TRUE(hung.timeDiscoveredStartedNs.has_value());
  EXPECT_FALSE(hung.timeDiscoveredCompletedNs.has_value());
  EXPECT_EQ(hung.frames[2].name, "optimizer_step");
  EXPECT_EQ(hung.frames[2].filename, "/work/train.py");
  EXPECT_EQ(hung.timeoutMs, 20000);
  EXPECT_EQ(d.entries[0].durationMs.value_or(-1), 0.25);
  EXPECT_EQ(d.entries[2].pgName, "1");
  EXPECT_EQ(d.entries[2].pgDesc, "tp");
  EXPECT_EQ(d.entries[2].outputSizes, (std::vector<std::vector<int64_t>>{{512}}));
  EXPECT_TRUE(d.entries[8].isP2p);
  EXPECT_EQ(d.entries.back().state, "scheduled");
  EXPECT_FALSE(d.entries.back().timeDiscoveredStartedNs.has_value());
}

TEST(FlightRecorderDump, ProtocolFourAndJsonReadTheSame) {
  const fr::Dump p2 = load("hang-2/rank_0");
  const fr::Dump p4 = load("desync_size-2/rank_0");  // rank 0 of a desync is the same program, pickled as protocol 4
  const fr::Dump js = load("json/rank_0.json");
  EXPECT_EQ(js.format, "json");
  EXPECT_EQ(js.rank, 0);
  ASSERT_EQ(p4.entries.size(), js.entries.size());
  for (size_t k = 0; k < js.entries.size(); ++k) {
    for (const fr::Dump* d : {&p4, &js}) {
      const fr::Entry& e = d->entries[k];
      EXPECT_EQ(e.profilingName, p4.entries[k].profilingName);
      EXPECT_EQ(e.collectiveSeqId, p4.entries[k].collectiveSeqId);
      EXPECT_EQ(e.inputSizes, p4.entries[k].inputSizes);
      EXPECT_EQ(e.inputDtypes, p4.entries[k].inputDtypes);
      EXPECT_EQ(e.pgName, p4.entries[k].pgName);
      EXPECT_EQ(e.timeDiscoveredStartedNs.has_value(), p4.entries[k].timeDiscoveredStartedNs.has_value()) << k;
    }
  }
  EXPECT_FALSE(js.entries[0].hasFrames);
  EXPECT_EQ(js.pgStatus.at("0").lastEnqueued, p2.pgStatus.at("0").lastEnqueued);
}

TEST(FlightRecorderPickle, TorchListHelpersAreBuiltNotCalled) {
  std::ifstream in(kData + "/c10_style/rank_0", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  fr::Pickle p;
  ASSERT_TRUE(fr::readPickle(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "c10", &p).isOk());
  const fr::Value* sizes = p.root->get("sizes");
  ASSERT_NE(sizes, nullptr);
  ASSERT_EQ(sizes->kind, fr::Value::Kind::kList);
  ASSERT_EQ(sizes->items.size(), 2u);
  EXPECT_EQ(sizes->items[1]->i, 8);
  fr::Dump d;
  ASSERT_TRUE(fr::parseDump(bytes, "c10_style/rank_0", -1, &d).isOk());
  EXPECT_TRUE(d.entries.empty());
}

TEST(FlightRecorderPickle, HostilePicklesAreRefusedWithoutRunningAnything) {
  fs::remove("/tmp/ranklens-pwned");
  struct Case {
    const char* file;
    const char* says;
  } cases[] = {
      {"global_os_system.pkl", "imports os.system"},
      {"stack_global.pkl", "imports builtins.eval"},
      {"build.pkl", "opcode BUILD"},
      {"newobj.pkl", "opcode NEWOBJ"},
      {"inst.pkl", "opcode INST"},
      {"persid.pkl", "opcode PERSID"},
      {"torch_other_global.pkl", "imports torch.jit._pickle.build_tensor_from_id"},
      {"truncated.pkl", "truncated"},
      {"unknown_opcode.pkl", "unknown pickle opcode 0xff"},
      {"memo_missing.pkl", "memo 7 read before it was stored"},
      {"huge_long.pkl", "more than 64 bits"},
      {"two_values.pkl", "STOP with 2 values"},
      {"empty.pkl", "without STOP"},
      {"not_a_dict.pkl", "expected a dict"},
      {"version_3.pkl", "version '3.0'"},
      {"no_version.pkl", "version: expected a version string"},
      {"bad_state.pkl", "entries[1].state: 'exploded'"},
      {"bad_sizes.pkl", "entries[2].input_sizes: expected a list of shapes, found a str"},
      {"bad_json.json", "truncated"},
  };
  for (const Case& c : cases) {
    const std::string error = refusal(std::string("hostile/") + c.file);
    EXPECT_NE(error.find(c.says), std::string::npos) << c.file << ": " << error;
    EXPECT_NE(error.find(c.file), std::string::npos) << c.file << ": " << error;  // names the file
  }
  EXPECT_NE(refusal("hostile/global_os_system.pkl").find("offset 2:"), std::string::npos);
  EXPECT_NE(refusal("hostile/version_3.pkl").find("2.x"), std::string::npos);
  EXPECT_FALSE(fs::exists("/tmp/ranklens-pwned"));
}

TEST(FlightRecorderPickle, SelfReferencingListIsReadWithoutLeakOrLoop) {
  // l = []; l.append(l): values live in the document's arena, so the cycle neither leaks nor recurses.
  fr::Dump d;
  std::string error;
  {
    const ranklens::Status loaded = fr::loadDump(kData + "/hostile/cycle.pkl", 0, &d);
    error = loaded.message();
    EXPECT_FALSE(loaded.isOk());
  }
  EXPECT_NE(error.find("expected a dict, found a list"), std::string::npos) << error;
}

TEST(FlightRecorderDump, RankFromFileName) {
  EXPECT_EQ(fr::rankFromFileName("/tmp/fr/rank_12"), 12);
  EXPECT_EQ(fr::rankFromFileName("/tmp/fr/nccl_trace_rank_3.json"), 3);
  EXPECT_EQ(fr::rankFromFileName("/tmp/fr/dump"), -1);
  fr::Dump d;
  std::string error;
  std::ifstream in(kData + "/hang-2/rank_1", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  {
    const ranklens::Status parsed = fr::parseDump(bytes, "dump.pkl", -1, &d);
    error = parsed.message();
    EXPECT_FALSE(parsed.isOk());
  }
  EXPECT_NE(error.find("--rank"), std::string::npos) << error;
  EXPECT_TRUE(fr::parseDump(bytes, "dump.pkl", 5, &d).isOk());
  EXPECT_EQ(d.rank, 5);
}

TEST(FlightRecorderImport, EntriesBecomeCallsWithWhatTheDumpCannotSayMarked) {
  const fr::Dump d = load("hang-4/rank_2");
  std::map<std::string, tools::EntryCall> byName;
  for (const fr::Entry& e : d.entries) byName.emplace(e.profilingName, tools::entryToCall(e, 4, 2));
  auto at = [&](const std::string& n) -> const tools::EntryCall& { return byName.at(n); };
  EXPECT_EQ(at("nccl:all_reduce").call.op, static_cast<int>(Op::kAllReduce));
  EXPECT_EQ(at("nccl:all_reduce").call.count, 1024u);
  EXPECT_EQ(at("nccl:all_reduce").call.datatype, 7);
  EXPECT_EQ(at("nccl:all_reduce").call.bytes, 4096u);
  EXPECT_EQ(at("nccl:all_reduce").call.nranks, 4);
  EXPECT_EQ(at("nccl:all_reduce").call.rank, 2);
  EXPECT_EQ(at("nccl:all_reduce").unknown, "redop,stream,payload");
  EXPECT_EQ(at("nccl:_all_gather_base").call.op, static_cast<int>(Op::kAllGather));
  EXPECT_EQ(at("nccl:_all_gather_base").call.count, 256u);  // the send count
  EXPECT_EQ(at("nccl:_all_gather_base").call.bytes, 256u * 4 * 4);
  EXPECT_EQ(at("nccl:reduce_scatter_tensor_coalesced").call.op, static_cast<int>(Op::kReduceScatter));
  EXPECT_NE(at("nccl:reduce_scatter_tensor_coalesced").unknown.find("count"), std::string::npos);
  EXPECT_EQ(at("nccl:all_to_all").call.count, 64u);  // per peer
  EXPECT_EQ(at("nccl:all_to_all").call.datatype, 9);
  EXPECT_EQ(at("nccl:reduce").call.datatype, 8);
  EXPECT_NE(at("nccl:reduce").unknown.find("root"), std::string::npos);
  EXPECT_EQ(at("nccl:gather").call.datatype, 4);
  EXPECT_EQ(at("nccl:scatter").call.count, 32u);
  EXPECT_EQ(at("nccl:scatter").call.datatype, 2);
  EXPECT_EQ(at("nccl:broadcast").call.op, static_cast<int>(Op::kBroadcast));
  EXPECT_EQ(at("nccl:send 2->3").call.op, static_cast<int>(Op::kSend));
  EXPECT_EQ(at("nccl:send 2->3").call.rootOrPeer, 3);
  EXPECT_EQ(at("nccl:recv 2<-1").call.op, static_cast<int>(Op::kRecv));
  EXPECT_EQ(at("nccl:recv 2<-1").call.rootOrPeer, 1);
  EXPECT_EQ(at("nccl:recv 2<-1").unknown.find("redop"), std::string::npos);
  EXPECT_EQ(at("nccl:all_reduce_barrier").call.count, 1u);
  EXPECT_FALSE(at("nccl:coalesced").isCall);
  EXPECT_NE(at("nccl:coalesced").why.find("coalesced"), std::string::npos);
  EXPECT_EQ(tools::datatypeOfDtype("Float8_e4m3fn"), 10);
  EXPECT_EQ(tools::datatypeOfDtype("ComplexFloat"), -1);
}

TEST(FlightRecorderImport, WritesATracePerRank) {
  const fs::path out = fs::path(::testing::TempDir()) / "fr-import-hang2";
  fs::remove_all(out);
  const auto dumps = loadDir("hang-2", 2);
  std::vector<tools::ImportReport> reports;
  std::string error;
  const ranklens::Status imported = tools::importDumps(dumps, out.string(), &reports);
  ASSERT_TRUE(imported.isOk()) << imported.message();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].entries, 16u);
  EXPECT_EQ(reports[0].calls, 15u);  // every entry but torch's "coalesced" marker
  EXPECT_EQ(reports[0].notCalls, 1u);
  EXPECT_EQ(reports[0].unfinished, 2u);
  EXPECT_EQ(reports[1].entries, 15u);  // rank 1 never called the last all-reduce

  std::unique_ptr<trace::TraceReader> reader;
  error = trace::TraceReader::open((out / "rank0").string(), trace::Limits{}, &reader).message();
  ASSERT_TRUE(reader) << error;
  const trace::Manifest& m = reader->manifest();
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.world_size, 2);
  EXPECT_EQ(m.nccl_version, 22703);
  EXPECT_EQ(m.version_minor, trace::kFormatMinor);
  EXPECT_EQ(m.imported.at("from"), "flight-recorder");
  EXPECT_EQ(m.imported.at("version"), "2.10");
  EXPECT_NE(m.imported.at("missing").find("payloads"), std::string::npos);
  std::vector<events::CommInit> comms;
  std::vector<events::Call> calls;
  std::vector<trace::Timing> timings;
  std::vector<trace::FlightRecorderEntry> entries;
  ASSERT_TRUE(reader->scan([&](trace::RecordType type, const msgpack::object& body, const trace::Location&) {
    if (type == trace::RecordType::kCommInit) comms.push_back(body.as<events::CommInit>());
    if (type == trace::RecordType::kCall) calls.push_back(body.as<events::Call>());
    if (type == trace::RecordType::kTiming) timings.push_back(body.as<trace::Timing>());
    if (type == trace::RecordType::kFlightRecorderEntry) entries.push_back(body.as<trace::FlightRecorderEntry>());
    return true;
  }));
  ASSERT_EQ(comms.size(), 2u);
  EXPECT_EQ(comms[0].name, "0:default_pg");
  EXPECT_EQ(comms[1].name, "1:tp");
  EXPECT_EQ(comms[1].worldRanks, (std::vector<int>{0, 1}));
  ASSERT_EQ(calls.size(), 15u);
  ASSERT_EQ(entries.size(), 16u);
  EXPECT_EQ(timings.size(), 11u);  // completed collectives with duration_ms; P2P ones have none in this dump
  // Collective sequence numbers follow torch's collective_seq_id (from 1) minus one, per communicator.
  const trace::FlightRecorderEntry& hung = entries[entries.size() - 2];
  EXPECT_EQ(hung.profilingName, "nccl:all_reduce");
  EXPECT_EQ(hung.state, "started");
  EXPECT_EQ(hung.seq, static_cast<uint64_t>(hung.collectiveSeqId - 1));
  EXPECT_EQ(hung.durationNs, -1);
  EXPECT_NE(hung.frames.find("#2 optimizer_step from /work/train.py:40"), std::string::npos) << hung.frames;
  EXPECT_EQ(hung.inputSizes, "[[1024]]");
  EXPECT_EQ(hung.inputDtypes, "Float");
  EXPECT_EQ(entries[0].durationNs, 250000);
  EXPECT_EQ(entries.back().state, "scheduled");
  EXPECT_EQ(entries.back().commId, 1u);
  EXPECT_EQ(entries.back().seq, 1u);  // the tp group's second all-gather
  for (const auto& e : entries) {
    if (e.op < 0) EXPECT_NE(e.unknown.find("coalesced"), std::string::npos);
  }
  const trace::FlightRecorderEntry& marker = entries[10];
  EXPECT_EQ(marker.profilingName, "nccl:coalesced");
  EXPECT_EQ(marker.op, -1);
  // A second import into the same directory is refused, not merged.
  EXPECT_FALSE(tools::importDumps(dumps, out.string(), &reports).isOk());
}

// torch leaves the send and receive of a batch_isend_irecv "scheduled" for good and keeps the group's state in the
// nccl:coalesced entry after them: imported, they take that state, so the first call left unfinished (where a replay
// stops) is the all-reduce that hung, not the first send.
TEST(FlightRecorderImport, CoalescedSendsAndReceivesTakeTheirGroupsState) {
  const fs::path out = fs::path(::testing::TempDir()) / "fr-import-coalesced";
  fs::remove_all(out);
  std::vector<tools::ImportReport> reports;
  ASSERT_TRUE(tools::importDumps(loadDir("hang_interleaved-2", 2), out.string(), &reports).isOk());
  std::unique_ptr<trace::TraceReader> reader;
  ASSERT_TRUE(trace::TraceReader::open((out / "rank0").string(), trace::Limits{}, &reader).isOk());
  std::vector<trace::FlightRecorderEntry> entries;
  ASSERT_TRUE(reader->scan([&](trace::RecordType type, const msgpack::object& body, const trace::Location&) {
    if (type == trace::RecordType::kFlightRecorderEntry) entries.push_back(body.as<trace::FlightRecorderEntry>());
    return true;
  }));
  auto firstUnfinished = std::find_if(entries.begin(), entries.end(),
                                      [](const trace::FlightRecorderEntry& e) { return e.state != "completed"; });
  ASSERT_NE(firstUnfinished, entries.end());
  EXPECT_EQ(firstUnfinished->profilingName, "nccl:all_reduce");
  EXPECT_EQ(firstUnfinished->collectiveSeqId, 5);
  EXPECT_EQ(firstUnfinished->state, "started");
  int sends = 0;
  for (const auto& e : entries) {
    if (e.profilingName.rfind("nccl:send", 0) != 0) continue;
    ++sends;
    EXPECT_EQ(e.state, sends <= 3 ? "completed" : "scheduled") << "send " << sends;
  }
  EXPECT_EQ(sends, 6);
}

TEST(FlightRecorderImport, DiagnosisNamesTheRankThatDiverged) {
  const std::string hang = tools::diagnose(loadDir("hang-2", 2));
  EXPECT_NE(hang.find("process group 0 (default_pg), collective sequence number 11: rank 1 skipped nccl:all_reduce "
                      "[[1024]] (missing call)"),
            std::string::npos)
      << hang;
  EXPECT_NE(hang.find("optimizer_step from /work/train.py:40"), std::string::npos) << hang;
  const std::string hang4 = tools::diagnose(loadDir("hang-4", 4));
  EXPECT_NE(hang4.find("rank 3 skipped nccl:all_reduce [[1024]] (missing call): ranks 0, 1, 2 called it before"),
            std::string::npos)
      << hang4;
  const std::string size = tools::diagnose(loadDir("desync_size-2", 2));
  EXPECT_NE(size.find("rank 1 called different sizes"), std::string::npos) << size;
  EXPECT_NE(size.find("[[2048]]"), std::string::npos) << size;
  EXPECT_NE(tools::diagnose(loadDir("desync_dtype-2", 2)).find("rank 1 called a different dtype"), std::string::npos);
  EXPECT_NE(tools::diagnose(loadDir("desync_op-2", 2)).find("rank 1 called a different collective"), std::string::npos);
  // A rank that skips an all-reduce and goes on: its next all-reduce takes the skipped one's sequence number, so only
  // the order across groups and the counts show who skipped.
  for (int world : {2, 4}) {
    const std::string skipped = tools::diagnose(loadDir("hang_interleaved-" + std::to_string(world), world));
    const std::string culprit = std::to_string(world - 1);
    EXPECT_NE(skipped.find("process group 0 (default_pg), collective sequence number 5: rank " + culprit +
                           " skipped nccl:all_reduce [[1024]] (missing call)"),
              std::string::npos)
        << skipped;
    EXPECT_NE(skipped.find("before nccl:_all_gather_base [[256]] Float on process group 1 (tp) (collective sequence "
                           "number 4), which rank " +
                           culprit + " called instead"),
              std::string::npos)
        << skipped;
    EXPECT_NE(skipped.find("rank " + culprit + " made 6 collectives where rank"), std::string::npos) << skipped;
    EXPECT_EQ(skipped.find("every rank called it"), std::string::npos) << skipped;
  }
  // Ranks of the groups that left no dump are named: the diagnosis cannot speak for them.
  auto three = loadDir("hang-4", 4);
  three.pop_back();
  const std::string partial = tools::diagnose(three);
  EXPECT_NE(partial.find("no dump of rank 3 (members of these process groups) was given"), std::string::npos)
      << partial;
  // One rank's dump alone shows its own unfinished calls only.
  const std::string alone = tools::diagnose({load("hang-2/rank_1")});
  EXPECT_NE(alone.find("not completed on rank 1"), std::string::npos) << alone;
}

// hang_interleaved-2 has torch's batch_isend_irecv groups: their sends and receives, imported with their group's
// state, are written back "scheduled" as torch writes them.
class ImportedTraceRoundTrip : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(FlightRecorderExport, ImportedTraceRoundTrip,
                         ::testing::Values("hang-2", "hang_interleaved-2"),
                         [](const auto& info) { return info.param == "hang-2" ? "Hang" : "CoalescedP2p"; });

TEST_P(ImportedTraceRoundTrip, ToTheSameDump) {
  const fs::path out = fs::path(::testing::TempDir()) / ("fr-export-" + GetParam());
  fs::remove_all(out);
  const auto dumps = loadDir(GetParam(), 2);
  std::vector<tools::ImportReport> reports;
  const ranklens::Status imported = tools::importDumps(dumps, out.string(), &reports);
  ASSERT_TRUE(imported.isOk()) << imported.message();
  for (int r = 0; r < 2; ++r) {
    tools::EventLog log;
    const ranklens::Status read = tools::readEventLog((out / ("rank" + std::to_string(r))).string(), &log);
    ASSERT_TRUE(read.isOk()) << read.message();
    const std::string bytes = tools::flightRecorderDump(log);
    fr::Dump back;
    ASSERT_TRUE(fr::parseDump(bytes, "exported/rank_" + std::to_string(r), -1, &back).isOk());
    EXPECT_EQ(back.version, "2.10");
    EXPECT_EQ(back.rank, r);
    EXPECT_EQ(back.pgConfig.at("0").ranks, dumps[r].pgConfig.at("0").ranks);
    EXPECT_EQ(back.pgConfig.at("1").desc, "tp");
    // Every entry comes back as it was imported, torch's coalesced marker (no call) in its place too: fr_trace
    // groups the calls before it.
    std::vector<const fr::Entry*> original;
    for (const fr::Entry& e : dumps[r].entries) original.push_back(&e);
    ASSERT_EQ(back.entries.size(), original.size());
    for (size_t k = 0; k < original.size(); ++k) {
      const fr::Entry& a = *original[k];
      const fr::Entry& b = back.entries[k];
      EXPECT_EQ(b.profilingName, a.profilingName) << k;
      EXPECT_EQ(b.state, a.state) << k;
      EXPECT_EQ(b.collectiveSeqId, a.collectiveSeqId) << k;
      EXPECT_EQ(b.p2pSeqId, a.p2pSeqId) << k;
      EXPECT_EQ(b.inputSizes, a.inputSizes) << k;
      EXPECT_EQ(b.outputSizes, a.outputSizes) << k;
      EXPECT_EQ(b.inputDtypes, a.inputDtypes) << k;
      EXPECT_EQ(b.pgName, a.pgName) << k;
      EXPECT_EQ(b.timeCreatedNs, a.timeCreatedNs) << k;
      EXPECT_EQ(b.durationMs.has_value(), a.durationMs.has_value()) << k;
      if (a.durationMs) EXPECT_NEAR(*b.durationMs, *a.durationMs, 1e-6) << k;
      ASSERT_EQ(b.frames.size(), a.frames.size()) << k;
      if (!a.frames.empty()) EXPECT_EQ(b.frames.back().name, a.frames.back().name);
    }
  }
}

TEST(FlightRecorderExport, RecordedCallsBecomeEntriesFrTraceUnderstands) {
  tools::EventLog log;
  log.manifest.rank = 1;
  log.manifest.world_size = 4;
  log.manifest.nccl_version = 22703;
  events::CommInit world;
  world.commId = 0;
  world.nranks = 4;
  world.rank = 1;
  world.worldRanks = {0, 1, 2, 3};
  events::CommInit pair = world;
  pair.commId = 1;
  pair.nranks = 2;
  pair.rank = 1;
  pair.worldRanks = {0, 1};
  log.comms = {world, pair};
  auto call = [](uint64_t comm, uint64_t seq, Op op, uint64_t count, int peer, int nranks) {
    events::Call c;
    c.commId = comm;
    c.seq = seq;
    c.op = static_cast<int>(op);
    c.datatype = 9;
    c.count = count;
    c.rootOrPeer = peer;
    c.nranks = nranks;
    c.timeNs = 1000 + static_cast<int64_t>(seq);
    return c;
  };
  log.calls = {call(0, 0, Op::kAllReduce, 1024, -1, 4), call(0, 1, Op::kAllGather, 256, -1, 4),
               call(1, 0, Op::kReduceScatter, 64, -1, 2), call(0, 0, Op::kSend, 32, 2, 4)};
  trace::Timing t = trace::timingOf(log.calls[0]);
  t.durationNs = 1500000;
  log.timings = {t};
  const std::string bytes = tools::flightRecorderDump(log);
  fr::Dump d;
  ASSERT_TRUE(fr::parseDump(bytes, "rank_1", -1, &d).isOk());
  ASSERT_EQ(d.entries.size(), 4u);
  EXPECT_EQ(d.pgConfig.at("0").ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(d.pgConfig.at("1_0_1").ranks, (std::vector<int>{0, 1}));  // a subgroup: named by its members too
  EXPECT_EQ(d.commLibVersion, "2.27.3");
  EXPECT_EQ(d.entries[0].profilingName, "nccl:all_reduce");
  EXPECT_EQ(d.entries[0].collectiveSeqId, 1);
  EXPECT_NEAR(d.entries[0].durationMs.value_or(0), 1.5, 1e-9);
  EXPECT_EQ(d.entries[0].inputDtypes, (std::vector<std::string>{"BFloat16"}));
  EXPECT_EQ(d.entries[1].profilingName, "nccl:_all_gather_base");
  EXPECT_EQ(d.entries[1].outputSizes, (std::vector<std::vector<int64_t>>{{1024}}));
  EXPECT_EQ(d.entries[2].pgName, "1_0_1");
  EXPECT_EQ(d.entries[2].inputSizes, (std::vector<std::vector<int64_t>>{{128}}));
  EXPECT_EQ(d.entries[3].profilingName, "nccl:send 1->2");
  EXPECT_TRUE(d.entries[3].isP2p);
  EXPECT_EQ(d.entries[3].p2pSeqId, 1);
  EXPECT_EQ(d.entries[3].collectiveSeqId, 2);  // the group's last collective, as torch leaves it on P2P entries
  for (const fr::Entry& e : d.entries) EXPECT_EQ(e.state, "completed");
  // Import reads it back as the same calls.
  const tools::EntryCall back = tools::entryToCall(d.entries[1], 4, 1);
  EXPECT_EQ(back.call.op, static_cast<int>(Op::kAllGather));
  EXPECT_EQ(back.call.count, 256u);
  EXPECT_EQ(back.call.datatype, 9);
}

// Real dumps made on a GPU by tests/data/flight_recorder/make_dumps.sh and copied to tests/data/flight_recorder/real/
// (<case>/fr/rank_* the watchdog's, <case>/self/pickle/rank_* and self/json/rank_*.json each rank's own, job.log the
// job's FR_HANG lines naming the rank that skipped or differed): each imports, and the diagnosis names that rank.
TEST(FlightRecorderRealDumps, ImportAndDiagnosisNameTheCulprit) {
  const fs::path real = fs::path(RANKLENS_TEST_DATA) / "flight_recorder" / "real";
  if (!fs::is_directory(real)) GTEST_SKIP() << real << " holds no real dumps (make_dumps.sh on a GPU makes them)";
  int checked = 0;
  for (const auto& c : fs::directory_iterator(real)) {
    if (!c.is_directory()) continue;
    int culprit = -1;  // from the job's log: {"event": "skip" | "desync", "rank": R, ...}
    std::ifstream log(c.path() / "job.log");
    for (std::string line; std::getline(log, line);) {
      if (line.find("FR_HANG") == std::string::npos) continue;
      if (line.find("\"event\": \"skip\"") == std::string::npos &&
          line.find("\"event\": \"desync\"") == std::string::npos)
        continue;
      const size_t at = line.find("\"rank\": ");
      if (at != std::string::npos) culprit = std::atoi(line.c_str() + at + 8);
    }
    for (const char* sub : {"fr", "self/pickle", "self/json"}) {
      const fs::path dir = c.path() / sub;
      if (!fs::is_directory(dir)) continue;
      std::vector<fr::Dump> dumps;
      for (const auto& f : fs::directory_iterator(dir)) {
        fr::Dump d;
        ASSERT_TRUE(fr::loadDump(f.path().string(), -1, &d).isOk()) << f.path();
        EXPECT_EQ(d.versionMajor, 2) << f.path();
        dumps.push_back(std::move(d));
      }
      if (dumps.empty()) continue;
      std::sort(dumps.begin(), dumps.end(), [](const fr::Dump& a, const fr::Dump& b) { return a.rank < b.rank; });
      const fs::path out =
          fs::path(::testing::TempDir()) / ("fr-real-" + c.path().filename().string() + "-" + std::to_string(checked));
      fs::remove_all(out);
      std::vector<tools::ImportReport> reports;
      const ranklens::Status imported = tools::importDumps(dumps, out.string(), &reports);
      ASSERT_TRUE(imported.isOk()) << imported.message();
      // Where a replay of a rank that did not skip stops: the first call its dump left unfinished is the collective
      // that hung, not one of the sends torch leaves "scheduled" inside a finished batch_isend_irecv.
      // In a desync (a rank calls the all-reduce with another size) the others hang in it just the same.
      const std::string kind = c.path().filename().string();
      if ((kind.rfind("hang", 0) == 0 || kind.rfind("desync", 0) == 0) && culprit != 0 && dumps.front().rank == 0) {
        std::unique_ptr<trace::TraceReader> reader;
        ASSERT_TRUE(trace::TraceReader::open((out / "rank0").string(), trace::Limits{}, &reader).isOk());
        std::string firstUnfinished;
        ASSERT_TRUE(reader->scan([&](trace::RecordType type, const msgpack::object& body, const trace::Location&) {
          if (type != trace::RecordType::kFlightRecorderEntry || !firstUnfinished.empty()) return true;
          const auto e = body.as<trace::FlightRecorderEntry>();
          if (e.state != "completed") firstUnfinished = e.profilingName + " " + e.state;
          return true;
        }));
        EXPECT_EQ(firstUnfinished, "nccl:all_reduce started") << c.path() << "/" << sub;
      }
      // Exported again, each rank's import reads back entry for entry as torch wrote it.
      for (const fr::Dump& d : dumps) {
        tools::EventLog log;
        const ranklens::Status read = tools::readEventLog((out / ("rank" + std::to_string(d.rank))).string(), &log);
        ASSERT_TRUE(read.isOk()) << read.message();
        fr::Dump back;
        ASSERT_TRUE(
            fr::parseDump(tools::flightRecorderDump(log), "exported/rank_" + std::to_string(d.rank), -1, &back).isOk());
        ASSERT_EQ(back.entries.size(), d.entries.size()) << d.file;
        for (size_t k = 0; k < d.entries.size(); ++k) {
          const fr::Entry& a = d.entries[k];
          const fr::Entry& b = back.entries[k];
          EXPECT_EQ(b.profilingName, a.profilingName) << d.file << " entry " << k;
          EXPECT_EQ(b.state, a.state) << d.file << " entry " << k;
          EXPECT_EQ(b.collectiveSeqId, a.collectiveSeqId) << d.file << " entry " << k;
          EXPECT_EQ(b.p2pSeqId, a.p2pSeqId) << d.file << " entry " << k;
          EXPECT_EQ(b.inputSizes, a.inputSizes) << d.file << " entry " << k;
          EXPECT_EQ(b.outputSizes, a.outputSizes) << d.file << " entry " << k;
          EXPECT_EQ(b.inputDtypes, a.inputDtypes) << d.file << " entry " << k;
          EXPECT_EQ(b.pgName, a.pgName) << d.file << " entry " << k;
        }
      }
      const std::string diagnosis = tools::diagnose(dumps);
      if (culprit >= 0 && dumps.size() > 1) {
        const std::string r = std::to_string(culprit);
        const bool named = diagnosis.find("never called by rank " + r) != std::string::npos ||
                           diagnosis.find("rank " + r + " skipped") != std::string::npos ||
                           diagnosis.find("rank " + r + " called") != std::string::npos ||
                           diagnosis.find(", " + r + " (missing call)") != std::string::npos;
        EXPECT_TRUE(named) << c.path() << "/" << sub << ": culprit rank " << culprit << "\n" << diagnosis;
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

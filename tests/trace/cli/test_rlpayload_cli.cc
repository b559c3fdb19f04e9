// SPDX-License-Identifier: Apache-2.0
// End-to-end tests of the rlpayload command on a small two-rank trace written with TraceWriter: ls, show, export,
// inject (copy and in place), diff, verify on clean and damaged copies, usage errors and exit codes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "trace_fixture.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace ranklens::trace;

struct Result {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs rlpayload with `args`; `env` entries (NAME=value) are added to the environment.
Result run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const std::string base =
      (fs::temp_directory_path() / ("rlpayload-run-" + std::to_string(getpid()) + "-" + std::to_string(counter++)))
          .string();
  const std::string outPath = base + ".out", errPath = base + ".err";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, outPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, errPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> argvStrings = {RLPAYLOAD_BIN};
  argvStrings.insert(argvStrings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argvStrings) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> envStrings;
  for (char** e = environ; *e; ++e) envStrings.emplace_back(*e);
  envStrings.insert(envStrings.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (auto& e : envStrings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  Result r;
  if (posix_spawn(&pid, RLPAYLOAD_BIN, &actions, nullptr, argv.data(), envp.data()) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  r.out = slurp(outPath);
  r.err = slurp(errPath);
  fs::remove(outPath);
  fs::remove(errPath);
  return r;
}

json parse(const Result& r) {
  try {
    return json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not JSON (" << e.what() << "):\n" << r.out << "\nstderr:\n" << r.err;
    return json();
  }
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = rltest::makeTempDir("cli");
    trace_ = root_ + "/trace";
    payloads_ = rltest::writeFixtureTrace(trace_);
  }
  static void TearDownTestSuite() { rltest::removeTree(root_); }
  // A private copy of the fixture trace for tests that change it.
  std::string copyOfTrace(const std::string& name) {
    const std::string dest = root_ + "/" + name;
    rltest::removeTree(dest);
    rltest::copyTree(trace_, dest);
    return dest;
  }
  std::string fresh(const std::string& name) {
    const std::string path = root_ + "/" + name;
    rltest::removeTree(path);
    return path;
  }
  static std::string root_, trace_;
  static std::vector<rltest::FixturePayload> payloads_;
};
std::string Cli::root_, Cli::trace_;
std::vector<rltest::FixturePayload> Cli::payloads_;

// ------------------------------------------------------------------------------------------------------ ls

TEST_F(Cli, LsListsEveryPayloadWithSizes) {
  const Result r = run({"ls", trace_, "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = parse(r);
  EXPECT_EQ(doc["format_version"], "1.0");
  ASSERT_EQ(doc["payloads"].size(), payloads_.size());  // calls without payloads (Send, comm 0 seq 2) not listed
  std::map<std::tuple<int, uint64_t, std::string, int, uint64_t>, json> byKey;
  for (const auto& p : doc["payloads"])
    byKey[{p["rank"].get<int>(), p["comm"].get<uint64_t>(), p["op"].get<std::string>(), p["peer"].get<int>(),
           p["seq"].get<uint64_t>()}] = p;
  const auto& f32 = byKey.at({0, 0, "AllReduce", -1, 0});
  EXPECT_EQ(f32["dtype"], "float32");
  EXPECT_EQ(f32["count"], 64);
  EXPECT_EQ(f32["bytes"], 256);
  EXPECT_GT(f32["compressed_bytes"].get<uint64_t>(), 0u);
  EXPECT_NEAR(f32["ratio"].get<double>(), 256.0 / f32["compressed_bytes"].get<double>(), 1e-9);
  EXPECT_EQ(byKey.at({1, 0, "AllGather", -1, 1})["dtype"], "bfloat16");
  EXPECT_EQ(byKey.at({1, 1, "AllReduce", -1, 0})["dtype"], "int32");
  // How each is stored: rank 1's as byte planes of their element width, rank 0's as they are.
  EXPECT_EQ(f32["shuffle"], 0);
  EXPECT_EQ(byKey.at({1, 0, "AllGather", -1, 1})["shuffle"], 2);
  EXPECT_EQ(byKey.at({1, 1, "AllReduce", -1, 0})["shuffle"], 4);
  EXPECT_EQ(byKey.at({0, 2, "Recv", 1, 0})["count"], 8);
  EXPECT_EQ(byKey.at({1, 2, "Recv", 0, 0})["count"], 8);
  EXPECT_EQ(doc["totals"]["payloads"], payloads_.size());

  const Result text = run({"ls", trace_});
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("rank  comm op"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("bfloat16"), std::string::npos);
  EXPECT_NE(text.out.find(" planes2"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find(" as-is"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("10 payloads"), std::string::npos) << text.out;
}

TEST_F(Cli, LsFilters) {
  json doc = parse(run({"ls", trace_, "--rank", "0", "--comm", "1", "--json"}));
  ASSERT_EQ(doc["payloads"].size(), 2u);
  for (const auto& p : doc["payloads"]) {
    EXPECT_EQ(p["rank"], 0);
    EXPECT_EQ(p["comm"], 1);
  }
  doc = parse(run({"ls", trace_, "-t", "recv", "-j"}));  // op names are case-insensitive
  ASSERT_EQ(doc["payloads"].size(), 2u);
  EXPECT_EQ(doc["payloads"][0]["op"], "Recv");
  doc = parse(run({"ls", trace_, "--seq", "1:1", "--json"}));
  ASSERT_EQ(doc["payloads"].size(), 4u);                                 // comm 0 seq 1 and comm 1 seq 1 on both ranks
  doc = parse(run({"ls", trace_ + "/rank1", "--seq", ":0", "--json"}));  // one rank directory
  ASSERT_EQ(doc["payloads"].size(), 3u);
  EXPECT_EQ(run({"ls", trace_, "--seq", "5:2"}).rc, 2);
  EXPECT_EQ(run({"ls", trace_, "--op", "AllPairs"}).rc, 2);
}

// ------------------------------------------------------------------------------------------------------ show

TEST_F(Cli, ShowPrintsStatisticsAndValues) {
  const Result r = run({"show", trace_, "--rank", "0", "--comm", "0", "--seq", "0", "-n", "4", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  const json doc = parse(r);
  const auto values = rltest::allReduceValues();  // -8, -7.5, ..., 23.5
  double sum = 0, sq = 0;
  for (float v : values) sum += v;
  const double mean = sum / values.size();
  for (float v : values) sq += (v - mean) * (v - mean);
  EXPECT_EQ(doc["dtype"], "float32");
  EXPECT_EQ(doc["stats"]["finite"], 64);
  EXPECT_EQ(doc["stats"]["min"].get<double>(), -8.0);
  EXPECT_EQ(doc["stats"]["max"].get<double>(), 23.5);
  EXPECT_NEAR(doc["stats"]["mean"].get<double>(), mean, 1e-12);
  EXPECT_NEAR(doc["stats"]["std"].get<double>(), std::sqrt(sq / values.size()), 1e-12);
  EXPECT_EQ(doc["stats"]["nan"], 0);
  EXPECT_TRUE(doc["stats"]["first_nan"].is_null());
  ASSERT_EQ(doc["values"].size(), 4u);
  EXPECT_EQ(doc["values"][1].get<double>(), -7.5);
  EXPECT_EQ(doc["call"]["redop"], 0);
  EXPECT_TRUE(doc["edits"].empty());

  const Result text = run({"show", trace_, "-r", "0", "-c", "0", "-s", "0"});
  ASSERT_EQ(text.rc, 0) << text.err;
  EXPECT_NE(text.out.find("min       -8\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("max       23.5\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("nan       0\n"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("[9] -3.5\n"), std::string::npos) << text.out;  // default: 10 values
}

TEST_F(Cli, ShowDecodesBfloat16Int32AndRecv) {
  json doc = parse(run({"show", trace_, "-r", "1", "-c", "0", "-s", "1", "-n", "32", "-j"}));
  EXPECT_EQ(doc["dtype"], "bfloat16");
  EXPECT_EQ(doc["stats"]["min"].get<double>(), -4.0);
  EXPECT_EQ(doc["stats"]["max"].get<double>(), 27.0);
  EXPECT_EQ(doc["values"][31].get<double>(), 27.0);
  doc = parse(run({"show", trace_, "-r", "1", "-c", "1", "-s", "0", "-j"}));
  EXPECT_EQ(doc["dtype"], "int32");
  EXPECT_EQ(doc["stats"]["min"].get<int64_t>(), -2999);
  EXPECT_EQ(doc["stats"]["max"].get<int64_t>(), 12001);
  EXPECT_EQ(doc["values"][0].get<int64_t>(), -2999);
  doc = parse(run({"show", trace_, "-r", "0", "-c", "2", "-s", "0", "--op", "Recv", "--peer", "1", "-j"}));
  EXPECT_EQ(doc["op"], "Recv");
  EXPECT_EQ(doc["peer"], 1);
  EXPECT_EQ(doc["values"][0].get<double>(), 100.0);
}

TEST_F(Cli, ShowSelectionErrors) {
  Result r = run({"show", trace_, "-c", "0", "-s", "0"});  // two ranks, no --rank
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--rank"), std::string::npos) << r.err;
  r = run({"show", trace_, "-r", "0", "-c", "2", "-s", "0", "--op", "Recv"});  // no --peer
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--peer"), std::string::npos) << r.err;
  r = run({"show", trace_, "-r", "0", "-c", "0", "-s", "7"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("error: " + trace_ + "/rank0: ", 0), 0u) << r.err;
  r = run({"show", trace_, "-r", "0", "-c", "0", "-s", "0", "--op", "AllGather"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("is AllReduce, not AllGather"), std::string::npos) << r.err;
  r = run({"show", trace_ + "/nope", "-c", "0", "-s", "0"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: " + trace_ + "/nope: no such file or directory\n");
  r = run({"show", trace_, "-r", "0", "-s", "0"});  // --comm is required
  EXPECT_EQ(r.rc, 2);
}

// ------------------------------------------------------------------------------------------------------ inject

TEST_F(Cli, InjectNanIntoACopyThenShowAndDiff) {
  const std::string out = fresh("trace-nan");
  Result r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "5", "-o", out});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(fs::exists(out + "/rank0/pay-000001.rlp"));
  ASSERT_TRUE(fs::exists(out + "/rank1/manifest.msgpack"));    // the whole trace was copied
  EXPECT_FALSE(fs::exists(trace_ + "/rank0/pay-000001.rlp"));  // the original is untouched

  json doc = parse(run({"show", out, "-r", "0", "-c", "0", "-s", "0", "--json"}));
  EXPECT_EQ(doc["stats"]["nan"], 1);
  EXPECT_EQ(doc["stats"]["first_nan"], 5);
  EXPECT_EQ(doc["stats"]["finite"], 63);
  EXPECT_EQ(doc["values"][5], "nan");
  ASSERT_EQ(doc["edits"].size(), 1u);
  EXPECT_EQ(doc["edits"][0]["tool"], "rlpayload");
  EXPECT_EQ(doc["edits"][0]["action"], "nan");

  r = run({"diff", trace_, out, "--json"});
  EXPECT_EQ(r.rc, 1) << r.err;
  doc = parse(r);
  EXPECT_EQ(doc["identical"], false);
  EXPECT_EQ(doc["differing_calls"], 1);
  EXPECT_EQ(doc["compared"], payloads_.size());
  const json& first = doc["first_difference"];
  EXPECT_EQ(first["rank"], 0);
  EXPECT_EQ(first["comm"], 0);
  EXPECT_EQ(first["op"], "AllReduce");
  EXPECT_EQ(first["seq"], 0);
  EXPECT_EQ(first["element"], 5);
  ASSERT_EQ(doc["calls"].size(), 1u);
  EXPECT_EQ(doc["calls"][0]["differing_elements"], 1);
  EXPECT_EQ(doc["calls"][0]["nan_mismatches"], 1);
  EXPECT_TRUE(doc["only_in_a"].empty());
  EXPECT_TRUE(doc["only_in_b"].empty());

  r = run({"diff", trace_, out});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("rank 0 comm 0 AllReduce seq 0: float32, first difference at element 5: -5.5 vs nan"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("10 calls with payloads in both compared, 1 differ"), std::string::npos) << r.out;
}

TEST_F(Cli, DiffIdenticalAndValueDifferences) {
  Result r = run({"diff", trace_, trace_});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("identical"), std::string::npos);

  const std::string out = fresh("trace-set");
  ASSERT_EQ(
      run({"inject", trace_, "-r", "1", "-c", "0", "-s", "0", "--set", "3=7.25", "--set", "10=0.00001", "-o", out}).rc,
      0);
  r = run({"diff", trace_, out, "--json"});
  EXPECT_EQ(r.rc, 1);
  json doc = parse(r);
  ASSERT_EQ(doc["calls"].size(), 1u);
  const json& c = doc["calls"][0];
  EXPECT_EQ(c["rank"], 1);  // rank 1 holds -(i/2 - 8): element 3 is 6.5, element 10 is 3
  EXPECT_EQ(c["first_element"], 3);
  EXPECT_EQ(c["a"], "6.5");
  EXPECT_EQ(c["b"], "7.25");
  EXPECT_EQ(c["differing_elements"], 2);
  EXPECT_NEAR(c["max_abs_diff"].get<double>(), 3.0 - 0.00001, 1e-6);

  // Two rank directories are compared with each other; scaling by 2 moves every float32 exactly 2^23 ULP.
  const std::string rank1Out = fresh("trace-rank1-only");
  ASSERT_EQ(run({"inject", trace_ + "/rank1", "-c", "1", "-s", "1", "--scale", "2", "-o", rank1Out}).rc, 0);
  doc = parse(run({"diff", trace_ + "/rank1", rank1Out, "--json"}));
  EXPECT_EQ(doc["compared"], 5);
  EXPECT_EQ(doc["differing_calls"], 1);
  EXPECT_EQ(doc["first_difference"]["op"], "Broadcast");
  EXPECT_EQ(doc["max_abs_diff"].get<double>(), 4.5);
  EXPECT_EQ(doc["max_ulp_diff"], 1u << 23);
  // A whole trace against one rank: rank 0's calls are only in A.
  doc = parse(run({"diff", trace_, rank1Out, "--json"}));
  EXPECT_EQ(doc["only_in_a"].size(), 5u);
  EXPECT_EQ(doc["only_in_a"][0]["rank"], 0);
  EXPECT_EQ(doc["differing_calls"], 1);
}

TEST_F(Cli, InPlaceInjectKeepsTheOriginalBlobAndRecordsTheEdit) {
  const std::string copy = copyOfTrace("trace-inplace");
  const std::string rank0 = copy + "/rank0";
  const auto blobFile = rltest::readBytes(rank0 + "/pay-000000.rlp");
  const Result r =
      run({"inject", copy, "--rank", "0", "--comm", "1", "--seq", "0", "--set", "3=42", "--in-place"}, {"USER=tester"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(rltest::readBytes(rank0 + "/pay-000000.rlp"), blobFile);  // byte for byte
  ASSERT_TRUE(fs::exists(rank0 + "/pay-000001.rlp"));

  const auto records = rltest::scanRecords(rank0);
  ASSERT_GE(records.size(), 2u);
  ASSERT_EQ(records[records.size() - 2].type, RecordType::kPayloadRef);
  const auto ref = records[records.size() - 2].body.get().as<PayloadRef>();
  EXPECT_EQ(ref.commId, 1u);
  EXPECT_EQ(ref.seq, 0u);
  EXPECT_EQ(ref.file, 1u);
  ASSERT_EQ(records.back().type, RecordType::kEdit);
  const auto edit = records.back().body.get().as<Edit>();
  EXPECT_EQ(edit.commId, 1u);
  EXPECT_EQ(edit.seq, 0u);
  EXPECT_EQ(edit.tool, "rlpayload");
  EXPECT_EQ(edit.action, "set");
  EXPECT_EQ(edit.user, "tester");
  EXPECT_EQ(edit.detail, "rlpayload inject " + copy + " --rank 0 --comm 1 --seq 0 --set 3=42 --in-place");

  const json doc = parse(run({"show", copy, "-r", "0", "-c", "1", "-s", "0", "--json"}));
  EXPECT_EQ(doc["values"][3].get<int64_t>(), 42);
  EXPECT_EQ(doc["values"][2].get<int64_t>(), -1000);
  EXPECT_EQ(doc["file"], "pay-000001.rlp");
  // The edited trace is still clean: index rewritten, counters account for the edit.
  const Result v = run({"verify", copy});
  EXPECT_EQ(v.rc, 0) << v.out << v.err;
  EXPECT_NE(v.out.find("(1 edit)"), std::string::npos) << v.out;
}

TEST_F(Cli, InjectScaleNoiseAndFromNpy) {
  const std::string a = fresh("trace-scale");
  ASSERT_EQ(run({"inject", trace_, "-r", "0", "-c", "1", "-s", "1", "--scale", "-2", "-o", a}).rc, 0);
  json doc = parse(run({"show", a, "-r", "0", "-c", "1", "-s", "1", "-j"}));
  EXPECT_EQ(doc["values"][0].get<double>(), -3.0);
  EXPECT_EQ(doc["values"][3].get<double>(), -9.0);

  const std::string b = fresh("trace-noise");
  Result r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--noise", "0.25", "--seed", "7", "-o", b});
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string c = fresh("trace-noise2");
  ASSERT_EQ(run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--noise", "0.25", "--seed", "7", "-o", c}).rc, 0);
  EXPECT_EQ(run({"diff", b, c}).rc, 0);  // the same seed gives the same noise
  EXPECT_EQ(run({"diff", trace_, b}).rc, 1);

  // export -> inject --from: the payload round-trips
  const std::string npy = fresh("bf16.npy");
  ASSERT_EQ(run({"export", trace_, "-r", "1", "-c", "0", "-s", "1", "-o", npy, "--as", "float32"}).rc, 0);
  const std::string d = fresh("trace-from");
  r = run({"inject", trace_, "-r", "1", "-c", "0", "-s", "1", "--from", npy, "-o", d});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("converted from '<f4' to bfloat16"), std::string::npos) << r.err;
  EXPECT_EQ(run({"diff", trace_, d}).rc, 0);  // same values: the payload is bit for bit the original
}

// -o from a trace the user may only read (a shared recording, read-only modes): the copy is the user's, writable,
// and the edit goes in.
TEST_F(Cli, InjectIntoACopyOfAReadOnlyTrace) {
  const std::string source = copyOfTrace("trace-read-only");
  for (const auto& entry : fs::recursive_directory_iterator(source))
    fs::permissions(entry.path(), fs::perms::owner_write | fs::perms::group_write | fs::perms::others_write,
                    fs::perm_options::remove);
  const std::string out = fresh("trace-from-read-only");
  Result r = run({"inject", source, "-r", "0", "-c", "0", "-s", "0", "--nan", "5", "-o", out});
  EXPECT_EQ(r.rc, 0) << r.err;
  for (const auto& entry : fs::recursive_directory_iterator(out))
    EXPECT_NE(fs::status(entry.path()).permissions() & fs::perms::owner_write, fs::perms::none) << entry.path();
  EXPECT_EQ(parse(run({"show", out, "-r", "0", "-c", "0", "-s", "0", "--json"}))["stats"]["nan"], 1);
  for (const auto& entry : fs::recursive_directory_iterator(source))
    fs::permissions(entry.path(), fs::perms::owner_write, fs::perm_options::add);
}

// A full disk under -o is said as such, with the file that could not be written, and leaves nothing behind. Needs
// a small tmpfs (root, or a user namespace that may mount): skipped elsewhere.
TEST_F(Cli, InjectIntoAFullDiskNamesTheFileAndTheReason) {
  const std::string mnt = fresh("tiny-fs");
  fs::create_directories(mnt);
  if (system(("mount -t tmpfs -o size=16k tmpfs '" + mnt + "' 2>/dev/null").c_str()) != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here";
  // Room for a page or so: the copy runs out of space whatever the fixture's size.
  EXPECT_EQ(system(("head -c 12288 /dev/zero > '" + mnt + "/filler' 2>/dev/null").c_str()), 0);
  Result r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "5", "-o", mnt + "/edited"});
  bool leftNothing = true;
  for (const auto& entry : fs::directory_iterator(mnt))
    leftNothing = leftNothing && entry.path().filename() == "filler";
  const int unmounted = system(("umount '" + mnt + "'").c_str());
  EXPECT_EQ(unmounted, 0);
  EXPECT_EQ(r.rc, 1) << r.err;
  EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(mnt + "/edited.partial-"), std::string::npos) << r.err;  // the file, not just the trace
  EXPECT_EQ(r.err.find("Input/output error"), std::string::npos) << r.err;
  EXPECT_TRUE(leftNothing);
}

// rlpayload under `timeout`: a reader that blocks (a FIFO) fails the test instead of hanging it. Output: both streams.
Result runBounded(const std::string& args) {
  Result r;
  FILE* pipe = popen(("timeout 20 '" RLPAYLOAD_BIN "' " + args + " 2>&1").c_str(), "r");
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) r.out.append(buffer, n);
  const int status = pclose(pipe);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A FIFO in place of a segment or the manifest is refused as such, naming it; no reader waits for a writer.
TEST_F(Cli, AFifoInPlaceOfATraceFileIsRefusedNotWaitedOn) {
  const std::string copy = copyOfTrace("trace-fifo");
  const std::string segment = copy + "/rank0/" + segmentName(0);
  fs::remove(segment);
  ASSERT_EQ(mkfifo(segment.c_str(), 0644), 0);
  Result r = runBounded("verify '" + copy + "'");
  EXPECT_NE(r.rc, 124) << "blocked on the FIFO";
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find(segment + ": offset 0: not a regular file (a FIFO)"), std::string::npos) << r.out;
  r = runBounded("ls '" + copy + "'");
  EXPECT_NE(r.rc, 124) << "blocked on the FIFO";
  const std::string manifest = copy + "/rank1/manifest.msgpack";
  fs::remove(manifest);
  ASSERT_EQ(mkfifo(manifest.c_str(), 0644), 0);
  r = runBounded("ls '" + copy + "' -r 1");
  EXPECT_NE(r.rc, 124) << "blocked on the FIFO";
  EXPECT_NE(r.out.find(manifest + ": not a regular file (a FIFO)"), std::string::npos) << r.out;
}

// A sparse 64 GiB segment is named with its size, not "std::bad_alloc".
TEST_F(Cli, AHugeSparseSegmentIsNamedNotAnAllocationFailure) {
  const std::string copy = copyOfTrace("trace-sparse");
  const std::string segment = copy + "/rank0/" + segmentName(0);
  fs::resize_file(segment, 64ull << 30);
  Result r = runBounded("verify '" + copy + "'");
  fs::resize_file(segment, 0);
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_EQ(r.out.find("bad_alloc"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(segment + ": offset 0: 68719476736 bytes exceeds the limit"), std::string::npos) << r.out;
}

// A reference claiming 2^62 elements for a 16-byte blob: export warns as show does (both read it the same way).
TEST_F(Cli, ExportWarnsOfAReferenceWhoseCountTheBlobDoesNotHold) {
  const std::string dir = fresh("trace-claims") + "/rank0";
  Manifest m;
  m.mode = "record";
  m.rank = 0;
  m.world_size = 1;
  std::string error;
  std::unique_ptr<TraceWriter> w;
  error = TraceWriter::create(dir, m, {}, &w).message();
  ASSERT_NE(w, nullptr) << error;
  ranklens::events::Call c;
  c.nranks = 1;
  c.op = static_cast<int>(ranklens::events::Op::kAllReduce);
  c.datatype = 7;  // float32
  c.count = c.bytes = 4;
  w->append(RecordType::kCall, c);
  PayloadRef ref;
  ref.op = c.op;
  ref.datatype = 7;
  ref.count = 1ull << 62;
  const std::vector<float> values = {1, 2, 3, 4};
  ASSERT_TRUE(w->appendPayload(ref, values.data(), 16));
  ASSERT_TRUE(w->close().isOk());
  const std::string warning = ": reference says 4611686018427387904 elements, the blob holds 16 bytes";
  Result shown = run({"show", dir, "-c", "0", "-s", "0"});
  EXPECT_NE(shown.err.find(warning), std::string::npos) << shown.err;
  Result exported = run({"export", dir, "-c", "0", "-s", "0", "-o", fresh("claims.npy")});
  EXPECT_EQ(exported.rc, 0) << exported.err;
  EXPECT_NE(exported.err.find(warning), std::string::npos) << exported.err;
}

// An unknown subcommand is named with the list; a subcommand's positional argument is not taken for one.
TEST_F(Cli, UnknownSubcommandIsNamedWithTheList) {
  Result r = run({"frobnicate"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("error: unknown subcommand 'frobnicate' of rlpayload; the subcommands are: ls, show, export, "
                       "inject, diff, verify"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(run({"ls", trace_}).rc, 0);
}

// An unusable rank<R> entry is said, not skipped; asking for that rank names it; two entries for one rank are refused.
TEST_F(Cli, UnusableAndDuplicateRankDirectoriesAreSaid) {
  const std::string copy = copyOfTrace("trace-rank-dirs");
  fs::remove(copy + "/rank0/manifest.msgpack");
  Result r = run({"ls", copy});
  EXPECT_NE(r.err.find("warning: " + copy + "/rank0: no manifest.msgpack"), std::string::npos) << r.err;
  r = run({"show", copy, "-r", "0", "-c", "0", "-s", "0"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(copy + "/rank0: no manifest.msgpack"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("this is rank 1"), std::string::npos) << r.err;
  fs::remove_all(copy + "/rank0");
  fs::create_symlink("rank0", copy + "/rank0");  // a symlink loop
  r = run({"ls", copy});
  EXPECT_NE(r.err.find(copy + "/rank0: unusable rank directory: "), std::string::npos) << r.err;
  r = run({"verify", copy});  // not "1 rank, 0 problems"
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("rank 0: " + copy + "/rank0: PROBLEMS"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("verify: 2 ranks, 1 problem"), std::string::npos) << r.out;
  fs::remove(copy + "/rank0");
  rltest::copyTree(copy + "/rank1", copy + "/rank01");
  r = run({"show", copy, "-r", "1", "-c", "0", "-s", "0"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("both name rank 1"), std::string::npos) << r.err;
  r = run({"inject", copy, "-r", "1", "-c", "0", "-s", "0", "--nan", "1", "--in-place"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("both name rank 1"), std::string::npos) << r.err;
}

// A segment cut exactly between two frames while the closed manifest counts more records: every command says so,
// not only verify.
TEST_F(Cli, ASegmentCutAtAFrameBoundaryIsReportedByEveryCommand) {
  const std::string copy = copyOfTrace("trace-cut-at-frame");
  const std::string rankDir = copy + "/rank0";
  const auto records = rltest::scanRecords(rankDir);
  ASSERT_GT(records.size(), 2u);
  const auto& last = records.back().where;
  const std::string segment = rankDir + "/" + segmentName(last.segment);
  fs::resize_file(segment, last.offset);  // the last frame gone, its header and all
  fs::remove(rankDir + "/index.msgpack");
  const std::string said = "the closed manifest counts ";
  Result r = run({"ls", copy});
  EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(segment), std::string::npos) << r.err;
  r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1);
  const auto& p = payloads_.front();
  r = run({"show", copy, "-r", std::to_string(p.rank), "-c", std::to_string(p.comm), "-s", std::to_string(p.seq)});
  if (p.rank == 0) {
    EXPECT_NE(r.err.find(said), std::string::npos) << r.err;
  }
}

// The step after which killedEdit's child ends as a killed process would.
const char* stopEditAfter = "";
void endProcessAfter(const char* step) {
  if (strcmp(step, stopEditAfter) == 0) _exit(137);
}

// The exit status of a process that edits call (comm 0, seq 0) of `rankDir` in place (its payload with the first
// byte changed) and is killed after `step` of the edit.
int killedEdit(const std::string& rankDir, const char* step) {
  const pid_t child = fork();
  if (child == 0) {
    stopEditAfter = step;
    setEditInterruptHookForTesting(endProcessAfter);
    std::unique_ptr<TraceReader> reader;
    if (!TraceReader::open(rankDir, Limits{}, &reader).isOk()) _exit(2);
    const auto ref = reader->payload(0, static_cast<int>(ranklens::events::Op::kAllReduce), -1, 0);
    std::vector<uint8_t> bytes;
    Problem problem;
    if (!ref || !reader->readPayload(*ref, &bytes, &problem) || bytes.empty()) _exit(3);
    bytes[0] ^= 0xff;
    reader.reset();
    (void)appendEditedPayload(rankDir, *ref, bytes.data(), bytes.size(), Edit{}, 3);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// An in-place edit killed after its blob, or after its reference: verify says "interrupted edit" with the way back
// (not "payload_files is N, but M were found"), and following it gives the trace as it was.
TEST_F(Cli, AKilledInPlaceEditIsAnInterruptedEditWithTheWayBack) {
  for (const char* step : {"payload", "reference"}) {
    SCOPED_TRACE(step);
    const std::string copy = copyOfTrace(std::string("trace-killed-edit-") + step);
    const std::string before = run({"show", copy, "-r", "0", "-c", "0", "-s", "0", "--json"}).out;
    EXPECT_EQ(killedEdit(copy + "/rank0", step), 137);
    Result r = run({"verify", copy});
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.out.find("interrupted edit of "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("not damage: nothing recorded is lost. To roll it back, truncate seg-000000.rls to "),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("payload_files is"), std::string::npos) << r.out;
    // Every other reader says it too, and exits 1 as verify does: the counters disagree with the files until the
    // edit is rolled back.
    for (const std::vector<std::string>& args :
         std::vector<std::vector<std::string>>{{"ls", copy}, {"show", copy, "-r", "0", "-c", "0", "-s", "0"}}) {
      r = run(args);
      EXPECT_EQ(r.rc, 1) << args[0] << "\n" << r.err;
      EXPECT_NE(r.err.find("interrupted edit of "), std::string::npos) << args[0] << "\n" << r.err;
    }
    // A new in-place edit is refused until then (it would append after the interrupted one's half).
    r = run({"inject", copy, "-r", "0", "-c", "0", "-s", "0", "--nan", "1", "--in-place"});
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("interrupted edit of "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("Nothing was changed by this edit"), std::string::npos) << r.err;
    // The way back, as said.
    const std::string rank0 = copy + "/rank0";
    std::ifstream journal(rank0 + "/edit-journal");
    std::string word, segment, payload;
    uint64_t size = 0;
    journal >> word >> segment >> size >> word >> payload;
    fs::resize_file(rank0 + "/" + segment, size);
    fs::remove(rank0 + "/" + payload);
    fs::remove(rank0 + "/index.msgpack");
    fs::remove(rank0 + "/edit-journal");
    r = run({"verify", copy});
    EXPECT_EQ(r.rc, 0) << r.out;
    EXPECT_EQ(run({"show", copy, "-r", "0", "-c", "0", "-s", "0", "--json"}).out, before);
  }
}

// A path with an escape sequence is shown, not sent to the terminal: every message passes one filter.
TEST_F(Cli, AControlCharacterInAPathIsShownNotSentToTheTerminal) {
  for (const char* command : {"ls", "verify"}) {
    const Result r = run({command, "trace\x1b[2Jgone\x07"});
    EXPECT_NE(r.rc, 0) << command;
    EXPECT_NE(r.err.find("trace\\x1b[2Jgone\\x07"), std::string::npos) << command << ": " << r.err;
    EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << command;
    EXPECT_EQ(r.err.find('\x07'), std::string::npos) << command;
  }
}

TEST_F(Cli, InjectUsageErrors) {
  const std::string out = fresh("trace-never");
  Result r = run({"inject", trace_, "-r", "0", "-c", "1", "-s", "0", "--nan", "1", "-o", out});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("int32 is an integer type and has no NaN"), std::string::npos) << r.err;
  r = run({"inject", trace_, "-r", "0", "-c", "1", "-s", "0", "--inf", "1", "-o", out});
  EXPECT_EQ(r.rc, 2);
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "64", "-o", out});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--nan 64: index out of range: the payload has 64 elements (0..63)"), std::string::npos)
      << r.err;
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "1", "--inf", "2", "-o", out});
  EXPECT_EQ(r.rc, 2);
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "1"});  // neither -o nor --in-place
  EXPECT_EQ(r.rc, 2);
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "1", "-o", out, "--in-place"});
  EXPECT_EQ(r.rc, 2);
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--nan", "1", "-o", trace_});  // exists
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err.rfind("error: " + trace_ + ": already exists", 0), 0u) << r.err;
  r = run({"inject", trace_, "-r", "0", "-c", "0", "-s", "0", "--set", "1=abc", "-o", out});
  EXPECT_EQ(r.rc, 2);
  EXPECT_FALSE(fs::exists(out));
}

// ------------------------------------------------------------------------------------------------------ export

uint16_t le16(const std::vector<uint8_t>& b, size_t at) { return static_cast<uint16_t>(b[at] | (b[at + 1] << 8)); }

TEST_F(Cli, ExportNpyHeaderAndDataRoundTrip) {
  const std::string npy = fresh("f32.npy");
  Result r = run({"export", trace_, "-r", "0", "-c", "0", "-s", "0", "-o", npy});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto file = rltest::readBytes(npy);
  ASSERT_GT(file.size(), 10u);
  EXPECT_EQ(std::string(file.begin(), file.begin() + 6), "\x93NUMPY");
  EXPECT_EQ(file[6], 1);
  EXPECT_EQ(file[7], 0);
  const size_t headerLength = le16(file, 8);
  EXPECT_EQ((10 + headerLength) % 64, 0u);
  const std::string header(file.begin() + 10, file.begin() + 10 + headerLength);
  EXPECT_EQ(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (64,), }", 0), 0u) << header;
  EXPECT_EQ(header.back(), '\n');
  const auto values = rltest::allReduceValues();
  ASSERT_EQ(file.size() - 10 - headerLength, values.size() * 4);
  EXPECT_EQ(memcmp(file.data() + 10 + headerLength, values.data(), values.size() * 4), 0);

  // bfloat16 has no numpy dtype: raw bits as '<u2' with a note, or converted with --as float32.
  r = run({"export", trace_, "-r", "0", "-c", "0", "-s", "1", "-o", npy});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("note: numpy has no bfloat16 dtype"), std::string::npos) << r.err;
  auto bits = rltest::readBytes(npy);
  EXPECT_NE(std::string(bits.begin(), bits.begin() + 128).find("'descr': '<u2'"), std::string::npos);
  r = run({"export", trace_, "-r", "0", "-c", "0", "-s", "1", "-o", npy, "--as", "float32"});
  ASSERT_EQ(r.rc, 0) << r.err;
  bits = rltest::readBytes(npy);
  const size_t hl = le16(bits, 8);
  EXPECT_NE(std::string(bits.begin(), bits.begin() + 10 + hl)
                .find("'descr': '<f4', 'fortran_order': False, "
                      "'shape': (32,)"),
            std::string::npos);
  float f[32];
  memcpy(f, bits.data() + 10 + hl, sizeof(f));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(f[i], static_cast<float>(i) - 4.0f);

  // int32 -> '<i4'; raw -> exactly the payload bytes
  r = run({"export", trace_, "-r", "1", "-c", "1", "-s", "0", "-o", npy});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(slurp(npy).find("'descr': '<i4'"), std::string::npos);
  const std::string raw = fresh("recv.bin");
  r = run({"export", trace_, "-r", "0", "-c", "2", "-s", "0", "-t", "Recv", "-p", "1", "-o", raw, "-f", "raw"});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const auto& p : payloads_)
    if (p.rank == 0 && p.comm == 2) {
      EXPECT_EQ(rltest::readBytes(raw), p.bytes);
    }
}

// ------------------------------------------------------------------------------------------------------ verify

TEST_F(Cli, VerifyCleanTrace) {
  const Result r = run({"verify", trace_});
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("verify: 2 ranks, 0 problems, 0 warnings"), std::string::npos) << r.out;
  const json doc = parse(run({"verify", trace_, "--json"}));
  EXPECT_EQ(doc["ok"], true);
  ASSERT_EQ(doc["ranks"].size(), 2u);
  EXPECT_EQ(doc["ranks"][0]["index"], "current");
  EXPECT_EQ(doc["ranks"][0]["payloads_checked"], 5);
}

TEST_F(Cli, VerifyTruncatedSegmentNamesFileAndOffset) {
  const std::string copy = copyOfTrace("trace-truncated");
  const std::string seg = copy + "/rank1/seg-000000.rls";
  const auto records = rltest::scanRecords(copy + "/rank1");
  const uint64_t lastFrame = records.back().where.offset;
  auto data = rltest::readBytes(seg);
  data.resize(data.size() - 5);
  rltest::writeBytes(seg, data);
  const Result r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_NE(r.out.find("problem: " + seg + ": offset " + std::to_string(lastFrame) + ": truncated frame"),
            std::string::npos)
      << r.out;
  const json doc = parse(run({"verify", copy, "--json"}));
  EXPECT_EQ(doc["ok"], false);
  const json& problems = doc["ranks"][1]["problems"];
  ASSERT_GE(problems.size(), 1u);
  EXPECT_EQ(problems[0]["file"], seg);
  EXPECT_EQ(problems[0]["offset"], lastFrame);
  EXPECT_EQ(problems[0]["truncated"], true);
  EXPECT_TRUE(doc["ranks"][0]["ok"].get<bool>());
  // The index no longer matches the segment size: a warning, not a problem of its own.
  EXPECT_EQ(doc["ranks"][1]["index"], "stale");
}

TEST_F(Cli, VerifyCorruptSegmentAndPayload) {
  const std::string copy = copyOfTrace("trace-corrupt");
  const std::string seg = copy + "/rank0/seg-000000.rls";
  const auto records = rltest::scanRecords(copy + "/rank0");
  const uint64_t victim = records[2].where.offset;
  auto data = rltest::readBytes(seg);
  data[victim + 8 + 2] ^= 0x55;  // a byte inside the third frame's body
  rltest::writeBytes(seg, data);
  const std::string pay = copy + "/rank1/pay-000000.rlp";
  auto blob = rltest::readBytes(pay);
  blob[20] ^= 0x01;  // inside the first blob
  rltest::writeBytes(pay, blob);
  const Result r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(seg + ": offset " + std::to_string(victim) + ": CRC-32 mismatch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(pay + ": offset 16: "), std::string::npos) << r.out;
}

TEST_F(Cli, VerifyMissingIndexIsAWarningAndMissingManifestAProblem) {
  const std::string copy = copyOfTrace("trace-noindex");
  fs::remove(copy + "/rank0/index.msgpack");
  Result r = run({"verify", copy, "--json"});
  EXPECT_EQ(r.rc, 0) << r.out;
  json doc = parse(r);
  EXPECT_EQ(doc["ranks"][0]["index"], "missing");
  EXPECT_EQ(doc["warnings"], 1);
  fs::remove(copy + "/rank1/manifest.msgpack");
  r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(copy + "/rank1/manifest.msgpack"), std::string::npos) << r.out;
}

TEST_F(Cli, VerifyFindsAnIndexThatLies) {
  // Same segment sizes, wrong entries: readers would trust it, so it is a problem.
  const std::string copy = copyOfTrace("trace-badindex");
  const std::string index = copy + "/rank0/index.msgpack";
  auto data = rltest::readBytes(index);
  msgpack::object_handle h = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size());
  std::map<std::string, msgpack::object> m;
  h.get().convert(m);
  using Entry = std::tuple<uint64_t, uint64_t, int, int, uint32_t, uint64_t>;
  auto payloads = m.at("payloads").as<std::vector<Entry>>();
  ASSERT_FALSE(payloads.empty());
  std::get<5>(payloads[0]) += 1;
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(m.size()));
  for (const auto& [k, v] : m) {
    pk.pack(k);
    if (k == "payloads")
      pk.pack(payloads);
    else
      pk.pack(v);
  }
  rltest::writeBytes(index, std::vector<uint8_t>(buf.data(), buf.data() + buf.size()));
  const Result r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1) << r.out;
  // Named by the index key it is about, not a byte offset (docs/trace-format.md).
  EXPECT_NE(r.out.find("index.msgpack: key 'payloads': disagrees with the segments"), std::string::npos) << r.out;
  const Result j = run({"verify", "--json", copy});
  const auto doc = nlohmann::json::parse(j.out);
  const auto& problem = doc["ranks"][0]["problems"][0];
  EXPECT_EQ(problem["key"], "payloads") << j.out;
  EXPECT_FALSE(problem.contains("offset")) << j.out;
}

// A manifest the reader refuses is a finding at the key it is about (a repeated key here), or at offset 0 when the
// map as a whole is wrong; never a null offset and the path said twice.
TEST_F(Cli, ARefusedManifestIsNamedByItsKey) {
  const std::string copy = copyOfTrace("trace-refused-manifest");
  const std::string path = copy + "/rank1/manifest.msgpack";
  auto data = rltest::readBytes(path);
  msgpack::object_handle h = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size());
  std::map<std::string, msgpack::object> m;
  h.get().convert(m);
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(static_cast<uint32_t>(m.size() + 1));
  for (const auto& [k, v] : m) {
    pk.pack(k);
    pk.pack(v);
  }
  pk.pack(std::string("rank"));
  pk.pack(7);
  rltest::writeBytes(path, std::vector<uint8_t>(buf.data(), buf.data() + buf.size()));
  const Result r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(path + ": key 'rank': repeated\n"), std::string::npos) << r.out;
  const auto doc = nlohmann::json::parse(run({"verify", "--json", copy}).out);
  const auto& problem = doc["ranks"][1]["problems"][0];
  EXPECT_EQ(problem["key"], "rank");
  EXPECT_EQ(problem["reason"], "repeated");
  EXPECT_FALSE(problem.contains("offset"));
  rltest::writeBytes(path, std::vector<uint8_t>{0x93, 1, 2, 3});  // an array, not a map
  const auto whole = nlohmann::json::parse(run({"verify", "--json", copy}).out)["ranks"][1]["problems"][0];
  EXPECT_EQ(whole["offset"], 0) << whole;
  EXPECT_EQ(whole["reason"].get<std::string>().find(path), std::string::npos) << whole;
}

TEST_F(Cli, VerifyComparesManifestCounters) {
  const std::string copy = copyOfTrace("trace-counters");
  const std::string path = copy + "/rank1/manifest.msgpack";
  auto data = rltest::readBytes(path);
  msgpack::object_handle h = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size());
  Manifest m = h.get().as<Manifest>();
  m.records_written += 3;
  msgpack::sbuffer buf;
  msgpack::pack(buf, m);
  rltest::writeBytes(path, std::vector<uint8_t>(buf.data(), buf.data() + buf.size()));
  const Result r = run({"verify", copy});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find(path + ": key 'records_written': records_written is 18, but 15 recorded records"),
            std::string::npos)
      << r.out;
  const Result j = run({"verify", "--json", copy});
  const auto doc = nlohmann::json::parse(j.out);
  const auto& problem = doc["ranks"][1]["problems"][0];
  EXPECT_EQ(problem["key"], "records_written") << j.out;
  EXPECT_FALSE(problem.contains("offset")) << j.out;
}

// A writer killed after flush(): manifest not closed, no index. Still readable (warnings); a torn tail is a
// problem, and an in-place edit refuses to append after it.
TEST_F(Cli, CrashedWriter) {
  const std::string dir = fresh("trace-crashed");
  const pid_t child = fork();
  if (child == 0) {
    Manifest manifest;
    manifest.rank = 0;
    std::string error;
    std::unique_ptr<TraceWriter> w;
    error = TraceWriter::create(dir + "/rank0", manifest, WriterOptions{}, &w).message();
    if (!w) _exit(3);
    ranklens::events::Call call;
    call.op = 0;
    call.datatype = 7;
    call.count = 4;
    w->append(RecordType::kCall, call);
    PayloadRef ref;
    ref.datatype = 7;
    ref.count = 4;
    const float values[4] = {1, 2, 3, 4};
    w->appendPayload(ref, values, sizeof(values));
    ranklens::events::Stage stage;
    stage.name = "step";
    w->append(RecordType::kStage, stage);  // the frame the "crash" tears below
    (void)w->flush();
    _exit(0);  // no close(): as if killed
  }
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  Result r = run({"verify", dir, "--json"});
  EXPECT_EQ(r.rc, 0) << r.out;
  json doc = parse(r);
  EXPECT_EQ(doc["ranks"][0]["closed"], false);
  EXPECT_EQ(doc["ranks"][0]["index"], "missing");
  EXPECT_EQ(doc["warnings"], 2);
  EXPECT_EQ(doc["ranks"][0]["payloads_checked"], 1);
  EXPECT_NE(doc["ranks"][0]["warnings"][0]["reason"].get<std::string>().find("not closed"), std::string::npos);

  const std::string seg = dir + "/rank0/seg-000000.rls";
  auto data = rltest::readBytes(seg);
  data.resize(data.size() - 1);
  rltest::writeBytes(seg, data);
  r = run({"verify", dir});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NOT closed"), std::string::npos) << r.out;
  const auto before = rltest::readBytes(seg);
  r = run({"inject", dir, "-c", "0", "-s", "0", "--nan", "0", "--in-place"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("error: " + seg + ": offset "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ends with a truncated frame"), std::string::npos) << r.err;
  EXPECT_EQ(rltest::readBytes(seg), before);
  EXPECT_FALSE(fs::exists(dir + "/rank0/pay-000001.rlp"));
}

// ------------------------------------------------------------------------------------------------------ CLI

TEST_F(Cli, HelpVersionAndUsageExitCodes) {
  Result r = run({"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Exit codes: 0 success; 1 problems"), std::string::npos) << r.out;
  for (const char* sub : {"ls", "show", "export", "inject", "diff", "verify"}) {
    r = run({sub, "--help"});
    EXPECT_EQ(r.rc, 0) << sub;
    EXPECT_NE(r.out.find("Examples:\n  rlpayload " + std::string(sub)), std::string::npos) << sub << r.out;
    r = run({sub, "--version"});
    EXPECT_EQ(r.rc, 0) << sub;
    EXPECT_EQ(r.out, "0.1.0\n");
  }
  EXPECT_EQ(run({"--version"}).rc, 0);
  EXPECT_EQ(run({}).rc, 2);
  EXPECT_EQ(run({"frobnicate"}).rc, 2);
  EXPECT_EQ(run({"ls", trace_, "--bogus"}).rc, 2);
  r = run({"ls", root_ + "/nothing-here"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "error: " + root_ + "/nothing-here: no such file or directory\n");
}

TEST_F(Cli, ProgressNeverReachesJsonOutput) {
  // Forced progress (as on a terminal) goes to stderr only; --json output stays parseable.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"verify", trace_, "--json"}, {"diff", trace_, trace_, "--json"}, {"ls", trace_, "--json"}}) {
    const Result r = run(args, {"RANKLENS_PROGRESS=1"});
    EXPECT_EQ(r.rc, 0) << r.err;
    parse(r);
  }
}

}  // namespace

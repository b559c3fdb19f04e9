// SPDX-License-Identifier: Apache-2.0
// config/: precedence, positions in messages, strict value parsing, the groups table, typo warnings.
// Every test uses a fake environment so the real one (CI may set RANKLENS_*) cannot change the outcome.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ranklens/config.h"

namespace ranklens {
namespace config {
namespace {

class FakeEnv {
 public:
  FakeEnv(std::initializer_list<std::pair<const std::string, std::string>> vars = {}) : vars_(vars) {}
  GetEnv getenv() const {
    return [this](const char* name) -> const char* {
      auto it = vars_.find(name);
      return it == vars_.end() ? nullptr : it->second.c_str();
    };
  }
  const std::vector<std::string>* names() {
    names_.clear();
    for (const auto& kv : vars_) names_.push_back(kv.first);
    return &names_;
  }

 private:
  std::map<std::string, std::string> vars_;
  std::vector<std::string> names_;
};

// One load's outcome, as the tests inspect it.
struct Loaded {
  Status status;
  bool ok = false;
  std::string error;
  std::vector<std::string> warnings;
  Settings settings;
};

Loaded outcome(Status status, Settings settings, std::vector<std::string> warnings) {
  Loaded r;
  r.ok = status.isOk();
  r.error = status.message();
  r.status = std::move(status);
  r.settings = std::move(settings);
  r.warnings = std::move(warnings);
  return r;
}

Loaded fromYaml(const std::string& text, FakeEnv env = {}) {
  Settings s;
  std::vector<std::string> warnings;
  Status status = loadFromYaml(text, "cfg.yaml", env.getenv(), &s, &warnings, env.names());
  return outcome(std::move(status), std::move(s), std::move(warnings));
}

Loaded fromEnv(FakeEnv env) {
  Settings s;
  std::vector<std::string> warnings;
  Status status = loadFromEnvironment(env.getenv(), &s, &warnings, env.names());
  return outcome(std::move(status), std::move(s), std::move(warnings));
}

// In table order: common, record, replay.
const std::vector<std::string> kAllKeys = {"mode",
                                           "device",
                                           "trace_dir",
                                           "real_nccl",
                                           "payloads",
                                           "payload_max_bytes",
                                           "payload_ops",
                                           "payload_comms",
                                           "payload_steps",
                                           "payload_seqs",
                                           "payload_zstd_level",
                                           "payload_threads",
                                           "payload_shuffle",
                                           "payload_queue_bytes",
                                           "staging_bytes",
                                           "staging_full",
                                           "timing_clock",
                                           "captured_timing",
                                           "timing_poll_us",
                                           "payload_copy_kernel_bytes",
                                           "payload_copy_kernel_bytes_one_rank",
                                           "payload_copy_priority",
                                           "fidelity",
                                           "fill",
                                           "nccl_version",
                                           "ranks_per_node",
                                           "groups",
                                           "mesh",
                                           "mesh_colors",
                                           "replay_trace",
                                           "on_mismatch",
                                           "on_payload_error",
                                           "at_hang",
                                           "completion",
                                           "host_time",
                                           "timing",
                                           "history",
                                           "estimate_target",
                                           "hold_blocks",
                                           "hold_threads",
                                           "hold_shared_bytes",
                                           "hold_from",
                                           "peer_pacing",
                                           "resync_window",
                                           "prefetch_bytes",
                                           "prefetch_threads",
                                           "payload_device_bytes",
                                           "break_at"};

const KeyInfo& row(const std::vector<KeyInfo>& rows, const std::string& key) {
  static const KeyInfo none;
  for (const KeyInfo& r : rows)
    if (r.key == key) return r;
  ADD_FAILURE() << "no row for " << key;
  return none;
}

void expectDefaults(const Settings& s) {
  EXPECT_EQ(s.mode, Mode::kReplay);
  EXPECT_EQ(s.fidelity, Fidelity::kStructure);
  EXPECT_EQ(s.fill, Fill::kClone);
  EXPECT_EQ(s.device, DeviceKind::kAuto);
  EXPECT_EQ(s.trace_dir, "");
  EXPECT_EQ(s.nccl_version, 22809);
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_TRUE(s.groups.empty());
  for (const std::string& key : kAllKeys) {
    ASSERT_EQ(s.set_by.count(key), 1u) << key;
    EXPECT_EQ(s.set_by.at(key), "default") << key;
  }
}

TEST(ConfigDefaults, EmptyYamlGivesDefaults) {
  Loaded r = fromYaml("");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.error.empty());
  EXPECT_TRUE(r.warnings.empty());
  expectDefaults(r.settings);
}

TEST(ConfigEnums, EstimateTargetFromEnvAndYaml) {
  Loaded r = fromEnv({{"RANKLENS_ESTIMATE_TARGET", "transfer"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.estimate_target, EstimateTarget::kTransfer);
  r = fromYaml("estimate_target: observed\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.estimate_target, EstimateTarget::kObserved);
  r = fromYaml("estimate_target: shortest\n");
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected one of observed|transfer"), std::string::npos) << r.error;
}

// Knobs that existed for one benchmark or experiment are gone: the file names them as unknown keys, and a variable
// that still sets one is reported as not RankLens's.
TEST(ConfigValues, RemovedKnobsAreUnknownKeys) {
  for (const char* key : {"record_alternate_steps", "hold_traffic", "rank"}) {
    Loaded r = fromYaml(std::string(key) + ": 1\n");
    ASSERT_FALSE(r.ok) << key;
    EXPECT_EQ(r.status.code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(r.error.rfind(std::string("cfg.yaml:1:1: unknown key '") + key + "' (known keys: mode,", 0), 0u)
        << r.error;
  }
  // RANKLENS_RANK and RANKLENS_WORLD_SIZE were reserved names that nothing read: RANK and WORLD_SIZE are the job's.
  Loaded r = fromEnv({{"RANKLENS_RECORD_ALTERNATE_STEPS", "5"},
                      {"RANKLENS_HOLD_TRAFFIC", "2"},
                      {"RANKLENS_RANK", "3"},
                      {"RANKLENS_WORLD_SIZE", "4"}});
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.warnings.size(), 4u);
  EXPECT_EQ(r.warnings[0].rfind("RANKLENS_HOLD_TRAFFIC is not a RankLens variable and is ignored", 0), 0u);
  EXPECT_EQ(r.warnings[1].rfind("RANKLENS_RANK is not a RankLens variable and is ignored", 0), 0u);
  EXPECT_EQ(r.warnings[2].rfind("RANKLENS_RECORD_ALTERNATE_STEPS is not a RankLens variable and is ignored", 0), 0u);
  EXPECT_EQ(r.warnings[3].rfind("RANKLENS_WORLD_SIZE is not a RankLens variable and is ignored", 0), 0u);
}

TEST(ConfigDefaults, CommentOnlyYamlGivesDefaults) {
  Loaded r = fromYaml("# nothing set here\n\n");
  ASSERT_TRUE(r.ok) << r.error;
  expectDefaults(r.settings);
}

TEST(ConfigDefaults, NoConfigVariableGivesDefaults) {
  Loaded r = fromEnv({});
  ASSERT_TRUE(r.ok) << r.error;
  expectDefaults(r.settings);
}

TEST(ConfigDefaults, EmptyGetEnvFunctionDoesNotThrow) {
  std::vector<std::string> none;
  Settings settings;
  Status status = loadFromEnvironment(GetEnv(), &settings, nullptr, &none);
  Loaded r = outcome(status, settings, {});
  ASSERT_TRUE(r.ok) << r.error;
  expectDefaults(r.settings);
}

// A default is written once, as Settings's initialiser; describe() shows it. Each shown default must read back
// through the loader as the same value, so that docs/config.md's default column is a value a user can write.
TEST(ConfigDefaults, EveryShownDefaultReadsBackAsTheDefault) {
  for (const KeyInfo& row : describe(Settings{})) {
    EXPECT_EQ(row.value, row.default_value) << row.key;
    EXPECT_EQ(row.set_by, "default") << row.key;
    const std::string text = row.default_value.empty() ? "''" : row.default_value;
    Loaded r = fromYaml(row.key + ": " + text + "\n");
    ASSERT_TRUE(r.ok) << row.key << ": " << r.error;
    for (const KeyInfo& back : describe(r.settings)) {
      if (back.key != row.key) continue;
      EXPECT_EQ(back.value, row.default_value) << row.key;
      EXPECT_EQ(back.set_by, "cfg.yaml:1:" + std::to_string(row.key.size() + 3)) << row.key;
    }
  }
}

TEST(ConfigDescribe, SectionsInOrderCommonRecordReplay) {
  const std::vector<KeyInfo> rows = describe(Settings{});
  std::map<std::string, Section> section;
  for (size_t i = 0; i < rows.size(); ++i) {
    section[rows[i].key] = rows[i].section;
    if (i > 0) EXPECT_LE(rows[i - 1].section, rows[i].section) << rows[i].key << ": each section's rows together";
  }
  EXPECT_EQ(section.at("mode"), Section::kCommon);
  EXPECT_EQ(section.at("trace_dir"), Section::kCommon);
  EXPECT_EQ(section.at("payloads"), Section::kRecord);
  EXPECT_EQ(section.at("payload_copy_priority"), Section::kRecord);
  EXPECT_EQ(section.at("fidelity"), Section::kReplay);
  EXPECT_EQ(section.at("break_at"), Section::kReplay);
  EXPECT_STREQ(toString(Section::kCommon), "common");
  EXPECT_STREQ(toString(Section::kRecord), "record");
  EXPECT_STREQ(toString(Section::kReplay), "replay");
}

TEST(ConfigYaml, EveryKey) {
  Loaded r = fromYaml(
      "mode: record\n"
      "fidelity: value\n"
      "fill: poison\n"
      "device: host\n"
      "trace_dir: /tmp/rl traces\n"
      "nccl_version: 22703\n"
      "ranks_per_node: 4\n"
      "groups:\n"
      "  - members: [0, 2]\n"
      "  - {members: [3, 1], color: 7, name: dp1}\n");
  ASSERT_TRUE(r.ok) << r.error;
  const Settings& s = r.settings;
  EXPECT_EQ(s.mode, Mode::kRecord);
  EXPECT_EQ(s.fidelity, Fidelity::kValue);
  EXPECT_EQ(s.fill, Fill::kPoison);
  EXPECT_EQ(s.device, DeviceKind::kHost);
  EXPECT_EQ(s.trace_dir, "/tmp/rl traces");
  EXPECT_EQ(s.nccl_version, 22703);
  EXPECT_EQ(s.ranks_per_node, 4);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].members, (std::vector<int>{0, 2}));
  EXPECT_FALSE(s.groups[0].color.has_value());
  EXPECT_EQ(s.groups[0].name, "");
  EXPECT_EQ(s.groups[0].origin, "cfg.yaml:9:5");
  EXPECT_EQ(s.groups[1].members, (std::vector<int>{3, 1}));  // order is child-rank order: kept as written
  EXPECT_EQ(s.groups[1].color, 7);
  EXPECT_EQ(s.groups[1].name, "dp1");
  EXPECT_EQ(s.groups[1].origin, "cfg.yaml:10:5");

  EXPECT_EQ(s.set_by.at("mode"), "cfg.yaml:1:7");
  EXPECT_EQ(s.set_by.at("fidelity"), "cfg.yaml:2:11");
  EXPECT_EQ(s.set_by.at("fill"), "cfg.yaml:3:7");
  EXPECT_EQ(s.set_by.at("device"), "cfg.yaml:4:9");
  EXPECT_EQ(s.set_by.at("trace_dir"), "cfg.yaml:5:12");
  EXPECT_EQ(s.set_by.at("nccl_version"), "cfg.yaml:6:15");
  EXPECT_EQ(s.set_by.at("ranks_per_node"), "cfg.yaml:7:17");
  EXPECT_EQ(s.set_by.at("groups"), "cfg.yaml:9:3");
}

TEST(ConfigYaml, OtherEnumValues) {
  Loaded r = fromYaml("{mode: replay, fidelity: timing, fill: keep, device: cuda}");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.mode, Mode::kReplay);
  EXPECT_EQ(r.settings.fidelity, Fidelity::kTiming);
  EXPECT_EQ(r.settings.fill, Fill::kKeep);
  EXPECT_EQ(r.settings.device, DeviceKind::kCuda);
  EXPECT_EQ(r.settings.set_by.at("mode"), "cfg.yaml:1:8");
  EXPECT_EQ(r.settings.set_by.at("trace_dir"), "default");

  r = fromYaml("fill: zero\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.fill, Fill::kZero);
}

TEST(ConfigEnv, EveryKey) {
  Loaded r = fromEnv({{"RANKLENS_MODE", "record"},
                      {"RANKLENS_FIDELITY", "timing"},
                      {"RANKLENS_FILL", "zero"},
                      {"RANKLENS_DEVICE", "cuda"},
                      {"RANKLENS_TRACE_DIR", "/data/trace: a"},
                      {"RANKLENS_NCCL_VERSION", "21903"},
                      {"RANKLENS_RANKS_PER_NODE", "2"},
                      {"RANKLENS_GROUPS", "[{members: [0,2]}, {members: [1,3], color: 7, name: dp1}]"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty());
  const Settings& s = r.settings;
  EXPECT_EQ(s.mode, Mode::kRecord);
  EXPECT_EQ(s.fidelity, Fidelity::kTiming);
  EXPECT_EQ(s.fill, Fill::kZero);
  EXPECT_EQ(s.device, DeviceKind::kCuda);
  EXPECT_EQ(s.trace_dir, "/data/trace: a");  // taken verbatim, not parsed as YAML
  EXPECT_EQ(s.nccl_version, 21903);
  EXPECT_EQ(s.ranks_per_node, 2);
  ASSERT_EQ(s.groups.size(), 2u);
  EXPECT_EQ(s.groups[0].members, (std::vector<int>{0, 2}));
  EXPECT_EQ(s.groups[0].origin, "RANKLENS_GROUPS:1:2");
  EXPECT_EQ(s.groups[1].members, (std::vector<int>{1, 3}));
  EXPECT_EQ(s.groups[1].color, 7);
  EXPECT_EQ(s.groups[1].name, "dp1");
  EXPECT_EQ(s.groups[1].origin, "RANKLENS_GROUPS:1:20");
  EXPECT_EQ(s.set_by.at("mode"), "env RANKLENS_MODE");
  EXPECT_EQ(s.set_by.at("fidelity"), "env RANKLENS_FIDELITY");
  EXPECT_EQ(s.set_by.at("fill"), "env RANKLENS_FILL");
  EXPECT_EQ(s.set_by.at("device"), "env RANKLENS_DEVICE");
  EXPECT_EQ(s.set_by.at("trace_dir"), "env RANKLENS_TRACE_DIR");
  EXPECT_EQ(s.set_by.at("nccl_version"), "env RANKLENS_NCCL_VERSION");
  EXPECT_EQ(s.set_by.at("ranks_per_node"), "env RANKLENS_RANKS_PER_NODE");
  EXPECT_EQ(s.set_by.at("groups"), "env RANKLENS_GROUPS");
}

TEST(ConfigEnv, EmptyValueCountsAsUnset) {
  Loaded r = fromYaml("fill: zero\n", {{"RANKLENS_FILL", ""}, {"RANKLENS_NCCL_VERSION", ""}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.fill, Fill::kZero);
  EXPECT_EQ(r.settings.set_by.at("fill"), "cfg.yaml:1:7");
  EXPECT_EQ(r.settings.nccl_version, 22809);
}

TEST(ConfigPrecedence, EnvBeatsYamlBeatsDefault) {
  Loaded r = fromYaml("fill: zero\nranks_per_node: 4\ntrace_dir: /from/yaml\n",
                      {{"RANKLENS_FILL", "keep"}, {"RANKLENS_TRACE_DIR", "/from/env"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.fill, Fill::kKeep);
  EXPECT_EQ(r.settings.set_by.at("fill"), "env RANKLENS_FILL");
  EXPECT_EQ(r.settings.trace_dir, "/from/env");
  EXPECT_EQ(r.settings.set_by.at("trace_dir"), "env RANKLENS_TRACE_DIR");
  EXPECT_EQ(r.settings.ranks_per_node, 4);
  EXPECT_EQ(r.settings.set_by.at("ranks_per_node"), "cfg.yaml:2:17");
  EXPECT_EQ(r.settings.mode, Mode::kReplay);
  EXPECT_EQ(r.settings.set_by.at("mode"), "default");
}

TEST(ConfigPrecedence, EnvGroupsReplaceYamlGroups) {
  Loaded r = fromYaml("groups: [{members: [0, 1, 2]}]\n", {{"RANKLENS_GROUPS", "[{members: [5]}]"}});
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.settings.groups.size(), 1u);
  EXPECT_EQ(r.settings.groups[0].members, (std::vector<int>{5}));
}

class TempDir : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text) {
    std::string path = ::testing::TempDir() + "ranklens_test_config_" + name;
    std::ofstream(path) << text;
    paths_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& p : paths_) std::remove(p.c_str());
  }

 private:
  std::vector<std::string> paths_;
};

TEST_F(TempDir, ConfigFileNamedByEnvironment) {
  std::string path = write("ok.yaml", "# comment\nfill: zero\nmode: replay\n");
  Loaded r = fromEnv({{"RANKLENS_CONFIG", path}, {"RANKLENS_MODE", "record"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty());  // RANKLENS_CONFIG is not a typo
  EXPECT_EQ(r.settings.fill, Fill::kZero);
  EXPECT_EQ(r.settings.set_by.at("fill"), path + ":2:7");
  EXPECT_EQ(r.settings.mode, Mode::kRecord);
  EXPECT_EQ(r.settings.set_by.at("mode"), "env RANKLENS_MODE");
}

TEST_F(TempDir, ErrorsInConfigFileNameThePath) {
  std::string path = write("bad.yaml", "fill: zero\nfil: keep\n");
  Loaded r = fromEnv({{"RANKLENS_CONFIG", path}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind(path + ":2:1: unknown key 'fil'", 0), 0u) << r.error;
}

TEST(ConfigFile, MissingFile) {
  Loaded r = fromEnv({{"RANKLENS_CONFIG", "/nonexistent-ranklens-dir/rl.yaml"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "RANKLENS_CONFIG=/nonexistent-ranklens-dir/rl.yaml: cannot read file (No such file or directory)");
  EXPECT_EQ(r.status.code(), Status::Code::kSystemError);
  expectDefaults(r.settings);
}

TEST(ConfigFile, DirectoryIsNotAFile) {
  Loaded r = fromEnv({{"RANKLENS_CONFIG", "/"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "RANKLENS_CONFIG=/: cannot read file (Is a directory)");
}

// The launcher's variables, parsed in one place as the consumers always read them.
TEST(ConfigContext, LauncherVariables) {
  Context none = readContext(FakeEnv().getenv());
  EXPECT_EQ(none.rank, "");
  EXPECT_EQ(none.rank_number, -1);
  EXPECT_EQ(none.world_size, -1);
  EXPECT_EQ(none.local_rank, -1);
  EXPECT_EQ(none.local_ranks, 1);
  EXPECT_EQ(none.comm_blocking, -1);
  EXPECT_EQ(none.progress, -1);
  EXPECT_EQ(none.shared_gpu_local_rank, -1);
  EXPECT_EQ(readContext(GetEnv()).local_ranks, 1);

  FakeEnv set({{"RANK", "3"},
               {"WORLD_SIZE", "8"},
               {"LOCAL_RANK", "1"},
               {"LOCAL_WORLD_SIZE", "4"},
               {"NCCL_COMM_BLOCKING", "0"},
               {"RANKLENS_PROGRESS", "1"},
               {"RANKLENS_SHARE_GPU_LOCAL_RANK", "5"}});
  Context c = readContext(set.getenv());
  EXPECT_EQ(c.rank, "3");
  EXPECT_EQ(c.rank_number, 3);
  EXPECT_EQ(c.world_size, 8);
  EXPECT_EQ(c.local_rank, 1);
  EXPECT_EQ(c.local_ranks, 4);
  EXPECT_EQ(c.comm_blocking, 0);
  EXPECT_EQ(c.progress, 1);
  EXPECT_EQ(c.shared_gpu_local_rank, 5);

  // RANK that is no number still names the rank directory; the number is then unknown.
  FakeEnv odd({{"RANK", "x1"},
               {"WORLD_SIZE", "-2"},
               {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
               {"NCCL_COMM_BLOCKING", "yes"},
               {"RANKLENS_PROGRESS", "0"}});
  c = readContext(odd.getenv());
  EXPECT_EQ(c.rank, "x1");
  EXPECT_EQ(c.rank_number, -1);
  EXPECT_EQ(c.world_size, -1);
  EXPECT_EQ(c.local_ranks, 2);
  EXPECT_EQ(c.comm_blocking, -1);
  EXPECT_EQ(c.progress, 0);
  EXPECT_EQ(readContext(FakeEnv({{"MPI_LOCALNRANKS", "6"}, {"LOCAL_WORLD_SIZE", "0"}}).getenv()).local_ranks, 6);
  EXPECT_EQ(readContext(FakeEnv({{"NCCL_COMM_BLOCKING", "1"}, {"RANKLENS_PROGRESS", ""}}).getenv()).comm_blocking, 1);
  EXPECT_EQ(readContext(FakeEnv({{"RANKLENS_PROGRESS", ""}}).getenv()).progress, -1);
}

TEST(ConfigErrors, UnknownKeyNamesLineColumnAndKnownKeys) {
  Loaded r = fromYaml("mode: replay\n\n  # indented comment\nfoo: 1\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error,
            "cfg.yaml:4:1: unknown key 'foo' (known keys: mode, device, trace_dir, "
            "real_nccl, payloads, payload_max_bytes, payload_ops, payload_comms, payload_steps, "
            "payload_seqs, payload_zstd_level, payload_threads, payload_shuffle, payload_queue_bytes, staging_bytes, "
            "staging_full, timing_clock, captured_timing, timing_poll_us, "
            "payload_copy_kernel_bytes, payload_copy_kernel_bytes_one_rank, payload_copy_priority, fidelity, fill, "
            "nccl_version, ranks_per_node, groups, mesh, mesh_colors, replay_trace, on_mismatch, on_payload_error, "
            "at_hang, completion, host_time, timing, history, "
            "estimate_target, hold_blocks, "
            "hold_threads, hold_shared_bytes, hold_from, peer_pacing, resync_window, "
            "prefetch_bytes, prefetch_threads, payload_device_bytes, break_at)");
  expectDefaults(r.settings);  // a failed load does not leak half-applied values

  r = fromYaml("{mode: replay,  bogus: 2}");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("cfg.yaml:1:17: unknown key 'bogus' (known keys: mode,", 0), 0u) << r.error;
}

TEST(ConfigErrors, DuplicateKey) {
  Loaded r = fromYaml("fill: zero\nmode: replay\nfill: keep\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:3:1: duplicate key 'fill' (first at cfg.yaml:1:1)");
}

TEST(ConfigErrors, BadEnumValueInYaml) {
  Loaded r = fromYaml("mode: replay\nfill:   xyz\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:2:9: bad value 'xyz' for 'fill': expected one of clone|keep|zero|poison");

  r = fromYaml("device: CUDA\n");  // names are case-sensitive, as documented
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:1:9: bad value 'CUDA' for 'device': expected one of auto|cuda|host");

  r = fromYaml("fidelity: [value]\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:1:11: bad value (a sequence) for 'fidelity': expected one of structure|timing|value");

  r = fromYaml("fill: keep\nmode:\n\nfill2: keep\n");  // an empty value is reported at its key
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:2:1: bad value (empty) for 'mode': expected one of replay|record");

  r = fromYaml("groups:\n- members:\n  name: x\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error,
            "cfg.yaml:2:3: bad value (empty) for 'groups[0].members': expected a non-empty sequence of distinct "
            "ranks >= 0");
}

TEST(ConfigErrors, BadEnumValueInEnv) {
  Loaded r = fromEnv({{"RANKLENS_FILL", "xyz"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "RANKLENS_FILL=xyz: bad value 'xyz' for 'fill': expected one of clone|keep|zero|poison");
  expectDefaults(r.settings);

  r = fromEnv({{"RANKLENS_MODE", " replay"}});  // no trimming: what is set is what is checked
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "RANKLENS_MODE= replay: bad value ' replay' for 'mode': expected one of replay|record");
}

TEST(Config, AtHangAndBreakAtHangForImportedFlightRecorderTraces) {
  Loaded r = fromYaml("at_hang: wait\nbreak_at: hang\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.at_hang, AtHang::kWait);
  EXPECT_TRUE(r.settings.break_hang);
  EXPECT_EQ(r.settings.break_comm, -1);
  r = fromYaml("break_at: '0:12'\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.settings.break_hang);
  EXPECT_EQ(r.settings.at_hang, AtHang::kStop);  // the default
  r = fromYaml("at_hang: pause\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:1:10: bad value 'pause' for 'at_hang': expected one of stop|wait|continue");
}

TEST(ConfigErrors, BadEnvValueFailsEvenWhenYamlIsFine) {
  Loaded r = fromYaml("fill: zero\n", {{"RANKLENS_DEVICE", "gpu"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "RANKLENS_DEVICE=gpu: bad value 'gpu' for 'device': expected one of auto|cuda|host");
}

struct BadInt {
  const char* key;
  const char* env;
  const char* text;
};

class ConfigBadInteger : public ::testing::TestWithParam<BadInt> {};

TEST_P(ConfigBadInteger, RejectedFromYamlAndEnv) {
  const BadInt& p = GetParam();
  Loaded r = fromYaml(std::string(p.key) + ": " + p.text + "\n");
  ASSERT_FALSE(r.ok) << p.key << " = " << p.text;
  std::string col = std::to_string(std::string(p.key).size() + 3);
  EXPECT_EQ(r.error.rfind("cfg.yaml:1:" + col + ": bad value '", 0), 0u) << r.error;
  EXPECT_NE(r.error.find("' for '" + std::string(p.key) + "': expected "), std::string::npos) << r.error;

  // The environment takes the text as is; YAML quoting does not apply there.
  std::string envText = p.text;
  if (envText == "\"\"") return;  // empty env means unset, covered by EmptyValueCountsAsUnset
  r = fromEnv({{p.env, envText}});
  ASSERT_FALSE(r.ok) << p.env << "=" << envText;
  EXPECT_EQ(r.error.rfind(
                std::string(p.env) + "=" + envText + ": bad value '" + envText + "' for '" + p.key + "': expected ", 0),
            0u)
      << r.error;
}

INSTANTIATE_TEST_SUITE_P(Values, ConfigBadInteger,
                         ::testing::Values(BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "12x"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "\"\""},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "99999999999999999999"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "1000000"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "0"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "-22809"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "2.28.9"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "0x5919"},
                                           BadInt{"nccl_version", "RANKLENS_NCCL_VERSION", "+22809"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "-1"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "0"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "--1"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "1.5"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "eight"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE", "2147483648"},
                                           BadInt{"ranks_per_node", "RANKLENS_RANKS_PER_NODE",
                                                  "99999999999999999999"}));

TEST(ConfigIntegers, Boundaries) {
  Loaded r = fromYaml("nccl_version: 999999\nranks_per_node: 2147483647\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.nccl_version, 999999);
  EXPECT_EQ(r.settings.ranks_per_node, 2147483647);

  r = fromEnv({{"RANKLENS_NCCL_VERSION", "1"}, {"RANKLENS_RANKS_PER_NODE", "1"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.nccl_version, 1);
  EXPECT_EQ(r.settings.ranks_per_node, 1);

  r = fromEnv({{"RANKLENS_RANKS_PER_NODE", " 8"}});
  EXPECT_FALSE(r.ok);
  r = fromEnv({{"RANKLENS_RANKS_PER_NODE", "8 "}});
  EXPECT_FALSE(r.ok);
}

TEST(ConfigGroups, EmptySequenceIsFine) {
  Loaded r = fromYaml("groups: []\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.settings.groups.empty());
  EXPECT_EQ(r.settings.set_by.at("groups"), "cfg.yaml:1:9");
}

struct GroupError {
  const char* yaml;
  const char* error;
};

class ConfigGroupError : public ::testing::TestWithParam<GroupError> {};

TEST_P(ConfigGroupError, MessageNamesPosition) {
  Loaded r = fromYaml(GetParam().yaml);
  ASSERT_FALSE(r.ok) << GetParam().yaml;
  EXPECT_EQ(r.error, GetParam().error);
  EXPECT_TRUE(r.settings.groups.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConfigGroupError,
    ::testing::Values(
        GroupError{"groups:\n  - members: [0, 1]\n  - members: []\n",
                   "cfg.yaml:3:14: bad value '[]' for 'groups[1].members': expected a non-empty sequence of distinct "
                   "ranks >= 0"},
        GroupError{"groups:\n  - members: [0, 1, 2,\n              1]\n",
                   "cfg.yaml:3:15: rank 1 listed twice in 'groups[0].members' (first at cfg.yaml:2:18): expected a "
                   "non-empty sequence of distinct ranks >= 0"},
        GroupError{"groups: [{members: [0, -3]}]\n",
                   "cfg.yaml:1:24: bad value '-3' for 'groups[0].members': expected a non-empty sequence of distinct "
                   "ranks >= 0"},
        GroupError{"groups: [{members: [0, x]}]\n",
                   "cfg.yaml:1:24: bad value 'x' for 'groups[0].members': expected a non-empty sequence of distinct "
                   "ranks >= 0"},
        GroupError{"groups:\n- members: 3\n",
                   "cfg.yaml:2:12: bad value '3' for 'groups[0].members': expected a non-empty sequence of distinct "
                   "ranks >= 0"},
        GroupError{"groups:\n- members: {a: 1}\n",
                   "cfg.yaml:2:12: bad value (a map) for 'groups[0].members': expected a non-empty sequence of "
                   "distinct ranks >= 0"},
        GroupError{"groups:\n- members: [[0]]\n",
                   "cfg.yaml:2:13: bad value (a sequence) for 'groups[0].members': expected a non-empty sequence of "
                   "distinct ranks >= 0"},
        GroupError{"groups:\n- {color: 1}\n",
                   "cfg.yaml:2:3: 'groups[0]' has no 'members': expected a non-empty sequence of distinct ranks >= 0"},
        GroupError{"groups:\n- [0, 1]\n",
                   "cfg.yaml:2:3: bad value (a sequence) for 'groups[0]': expected a map {members: [...], color: N, "
                   "name: S}"},
        GroupError{"groups:\n- {members: [0], colour: 1}\n",
                   "cfg.yaml:2:18: unknown key 'colour' in 'groups[0]' (known keys: members, color, name)"},
        GroupError{"groups:\n- {members: [0], color: -1}\n",
                   "cfg.yaml:2:25: bad value '-1' for 'groups[0].color': expected an integer >= 0"},
        GroupError{"groups:\n- {members: [0], name: [a]}\n",
                   "cfg.yaml:2:24: bad value (a sequence) for 'groups[0].name': expected a string"},
        GroupError{"groups:\n- {members: [0], members: [1]}\n",
                   "cfg.yaml:2:18: duplicate key 'members' (first at cfg.yaml:2:4)"},
        GroupError{"groups: {members: [0]}\n",
                   "cfg.yaml:1:9: bad value (a map) for 'groups': expected a sequence of maps {members: [ranks...], "
                   "color: N, name: S}"}));

TEST(ConfigGroups, ErrorsFromEnvNameTheVariableAndPosition) {
  Loaded r = fromEnv({{"RANKLENS_GROUPS", "[{members: [0,2]}, {members: []}]"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error,
            "RANKLENS_GROUPS:1:30: bad value '[]' for 'groups[1].members': expected a non-empty sequence of "
            "distinct ranks >= 0");

  r = fromEnv({{"RANKLENS_GROUPS", "[{members: [0,2]"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("RANKLENS_GROUPS:1:", 0), 0u) << r.error;

  r = fromEnv({{"RANKLENS_GROUPS", "0,1"}});
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("RANKLENS_GROUPS:1:1: bad value '0,1' for 'groups': expected a sequence", 0), 0u) << r.error;
}

TEST(ConfigGroups, DescribeRoundTripsThroughTheEnvironmentForm) {
  Loaded r = fromYaml(
      "groups:\n"
      "  - {members: [0, 2]}\n"
      "  - {members: [3, 1], color: 7, name: dp1}\n"
      "  - {members: [4], color: 0, name: 'tp group: \"a\"'}\n");
  ASSERT_TRUE(r.ok) << r.error;
  std::string text;
  for (const KeyInfo& row : describe(r.settings)) {
    if (row.key == "groups") text = row.value;
  }
  EXPECT_EQ(text,
            "[{members: [0, 2]}, {members: [3, 1], color: 7, name: dp1}, {members: [4], color: 0, name: \"tp group: "
            "\\\"a\\\"\"}]");
  Loaded back = fromEnv({{"RANKLENS_GROUPS", text}});
  ASSERT_TRUE(back.ok) << back.error;
  ASSERT_EQ(back.settings.groups.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(back.settings.groups[i].members, r.settings.groups[i].members);
    EXPECT_EQ(back.settings.groups[i].color, r.settings.groups[i].color);
    EXPECT_EQ(back.settings.groups[i].name, r.settings.groups[i].name);
  }
}

TEST(ConfigErrors, YamlSyntaxError) {
  Loaded r = fromYaml("mode: replay\nfill: [zero\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("cfg.yaml:3:1: ", 0), 0u) << r.error;
  EXPECT_GT(r.error.size(), std::string("cfg.yaml:3:1: ").size());

  r = fromYaml("mode: replay\n  fill: zero\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("cfg.yaml:2:7: ", 0), 0u) << r.error;
}

TEST(ConfigErrors, TopLevelMustBeAMap) {
  Loaded r = fromYaml("- mode\n- fill\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:1:1: top level must be a map of settings (key: value), not a sequence");

  r = fromYaml("\n  replay\n");
  ASSERT_FALSE(r.ok);
  EXPECT_EQ(r.error, "cfg.yaml:2:3: top level must be a map of settings (key: value), not a scalar");
}

TEST(ConfigWarnings, TypoNamesClosestVariable) {
  Loaded r = fromEnv({{"RANKLENS_FIL", "zero"}, {"RANKLENS_RANKS_PER_NOD", "4"}});
  ASSERT_TRUE(r.ok) << r.error;  // a warning, not an error
  ASSERT_EQ(r.warnings.size(), 2u);
  EXPECT_EQ(r.warnings[0], "RANKLENS_FIL is not a RankLens variable and is ignored; did you mean RANKLENS_FILL?");
  EXPECT_NE(r.warnings[1].find("RANKLENS_RANKS_PER_NOD is not a RankLens variable"), std::string::npos);
  EXPECT_NE(r.warnings[1].find("did you mean RANKLENS_RANKS_PER_NODE?"), std::string::npos);
  EXPECT_EQ(r.settings.fill, Fill::kClone);  // the misspelt variable has no effect
}

TEST(ConfigWarnings, KnownAndAllowedVariablesDoNotWarn) {
  Loaded r = fromEnv({{"RANKLENS_MODE", "replay"},
                      {"RANKLENS_CONFIG", ""},
                      {"RANKLENS_REAL_NCCL", "/usr/lib/libnccl.so.2"},
                      {"RANKLENS_ADAPTER", "1"},
                      {"RANKLENS_SHARE_GPU_LOCAL_RANK", "4"},
                      {"RANKLENS_PROGRESS", "0"},
                      {"NCCL_DEBUG", "INFO"},
                      {"RANKLENSX", "1"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
}

TEST(ConfigWarnings, ExplicitNameListIsWhatIsScanned) {
  // The names list, not the lookup function, decides what is checked for typos.
  FakeEnv env({{"RANKLENS_FIL", "zero"}});
  std::vector<std::string> names = {"RANKLENS_DEVCE", "PATH"};
  Settings settings;
  std::vector<std::string> warnings;
  Status status = loadFromYaml("", "<string>", env.getenv(), &settings, &warnings, &names);
  Loaded r = outcome(status, settings, warnings);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "RANKLENS_DEVCE is not a RankLens variable and is ignored; did you mean RANKLENS_DEVICE?");
}

TEST(ConfigDescribe, OneRowPerKeyInTableOrder) {
  Loaded r = fromYaml("ranks_per_node: 2\n", {{"RANKLENS_FILL", "poison"}});
  ASSERT_TRUE(r.ok) << r.error;
  std::vector<KeyInfo> rows = describe(r.settings);
  ASSERT_EQ(rows.size(), kAllKeys.size());
  const std::vector<std::string> envs = {"RANKLENS_MODE",
                                         "RANKLENS_DEVICE",
                                         "RANKLENS_TRACE_DIR",
                                         "RANKLENS_REAL_NCCL",
                                         "RANKLENS_PAYLOADS",
                                         "RANKLENS_PAYLOAD_MAX_BYTES",
                                         "RANKLENS_PAYLOAD_OPS",
                                         "RANKLENS_PAYLOAD_COMMS",
                                         "RANKLENS_PAYLOAD_STEPS",
                                         "RANKLENS_PAYLOAD_SEQS",
                                         "RANKLENS_PAYLOAD_ZSTD_LEVEL",
                                         "RANKLENS_PAYLOAD_THREADS",
                                         "RANKLENS_PAYLOAD_SHUFFLE",
                                         "RANKLENS_PAYLOAD_QUEUE_BYTES",
                                         "RANKLENS_STAGING_BYTES",
                                         "RANKLENS_STAGING_FULL",
                                         "RANKLENS_TIMING_CLOCK",
                                         "RANKLENS_CAPTURED_TIMING",
                                         "RANKLENS_TIMING_POLL_US",
                                         "RANKLENS_PAYLOAD_COPY_KERNEL_BYTES",
                                         "RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK",
                                         "RANKLENS_PAYLOAD_COPY_PRIORITY",
                                         "RANKLENS_FIDELITY",
                                         "RANKLENS_FILL",
                                         "RANKLENS_NCCL_VERSION",
                                         "RANKLENS_RANKS_PER_NODE",
                                         "RANKLENS_GROUPS",
                                         "RANKLENS_MESH",
                                         "RANKLENS_MESH_COLORS",
                                         "RANKLENS_REPLAY_TRACE",
                                         "RANKLENS_ON_MISMATCH",
                                         "RANKLENS_ON_PAYLOAD_ERROR",
                                         "RANKLENS_AT_HANG",
                                         "RANKLENS_COMPLETION",
                                         "RANKLENS_HOST_TIME",
                                         "RANKLENS_TIMING",
                                         "RANKLENS_HISTORY",
                                         "RANKLENS_ESTIMATE_TARGET",
                                         "RANKLENS_HOLD_BLOCKS",
                                         "RANKLENS_HOLD_THREADS",
                                         "RANKLENS_HOLD_SHARED_BYTES",
                                         "RANKLENS_HOLD_FROM",
                                         "RANKLENS_PEER_PACING",
                                         "RANKLENS_RESYNC_WINDOW",
                                         "RANKLENS_PREFETCH_BYTES",
                                         "RANKLENS_PREFETCH_THREADS",
                                         "RANKLENS_PAYLOAD_DEVICE_BYTES",
                                         "RANKLENS_BREAK_AT"};
  const std::vector<std::string> defaults = {
      "replay", "auto",    "",          "",       "small",  "64KiB",    "[]",     "[]",       "all",  "all",
      "-1",     "0",       "on",        "1GiB",   "auto",   "skip",     "events", "events",   "2000", "64KiB",
      "0",      "high",    "structure", "clone",  "22809",  "8",        "[]",     "",         "",     "",
      "error",  "error",   "stop",      "kernel", "replay", "recorded", "",       "transfer", "1",    "32",
      "auto",   "arrival", "off",       "64",     "auto",   "0",        "auto",   ""};
  ASSERT_EQ(envs.size(), kAllKeys.size());
  ASSERT_EQ(defaults.size(), kAllKeys.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].key, kAllKeys[i]);
    EXPECT_EQ(rows[i].env, envs[i]);
    EXPECT_EQ(rows[i].default_value, defaults[i]) << rows[i].key;
    EXPECT_FALSE(rows[i].help.empty()) << rows[i].key;
  }
  EXPECT_EQ(row(rows, "fill").value, "poison");
  EXPECT_EQ(row(rows, "fill").set_by, "env RANKLENS_FILL");
  EXPECT_EQ(row(rows, "ranks_per_node").value, "2");
  EXPECT_EQ(row(rows, "ranks_per_node").set_by, "cfg.yaml:1:17");
  EXPECT_EQ(rows[0].value, "replay");
  EXPECT_EQ(rows[0].set_by, "default");
  EXPECT_EQ(row(rows, "groups").value, "[]");
  EXPECT_EQ(row(rows, "groups").set_by, "default");
}

TEST(ConfigDescribe, MissingSetByMeansDefault) {
  Settings s;
  s.fill = Fill::kZero;
  std::vector<KeyInfo> rows = describe(s);
  ASSERT_EQ(rows.size(), kAllKeys.size());
  EXPECT_EQ(row(rows, "fill").value, "zero");
  EXPECT_EQ(row(rows, "fill").set_by, "default");
}

TEST(ConfigRecord, PayloadKnobsFromYaml) {
  Loaded r = fromYaml(
      "mode: record\npayloads: all\npayload_max_bytes: 1MiB\npayload_ops: [AllReduce, Recv]\n"
      "payload_comms: [0, dp]\npayload_steps: 10-20\npayload_seqs: 5-\nstaging_bytes: 2GiB\n"
      "staging_full: wait\nreal_nccl: /opt/nccl/libnccl.so.2\ntiming_clock: kernel\ncaptured_timing: off\n");
  ASSERT_TRUE(r.ok) << r.error;
  const Settings& s = r.settings;
  EXPECT_EQ(s.mode, Mode::kRecord);
  EXPECT_EQ(s.payloads, Payloads::kAll);
  EXPECT_EQ(s.payload_max_bytes, 1ull << 20);
  EXPECT_EQ(s.payload_ops, (std::vector<std::string>{"AllReduce", "Recv"}));
  EXPECT_EQ(s.payload_comms, (std::vector<std::string>{"0", "dp"}));
  EXPECT_TRUE(s.payload_steps.contains(10));
  EXPECT_TRUE(s.payload_steps.contains(20));
  EXPECT_FALSE(s.payload_steps.contains(21));
  EXPECT_FALSE(s.payload_steps.contains(9));
  EXPECT_FALSE(s.payload_seqs.contains(4));
  EXPECT_TRUE(s.payload_seqs.contains(1000000));
  EXPECT_EQ(s.staging_bytes, 2ull << 30);
  EXPECT_EQ(s.staging_full, StagingFull::kWait);
  EXPECT_EQ(s.real_nccl, "/opt/nccl/libnccl.so.2");
  EXPECT_EQ(s.timing_clock, TimingClock::kKernel);
  EXPECT_EQ(s.captured_timing, CapturedTiming::kOff);
  EXPECT_EQ(fromYaml("").settings.captured_timing, CapturedTiming::kEvents);
  EXPECT_EQ(fromYaml("").settings.timing_poll_us, 2000);
  EXPECT_EQ(fromYaml("timing_poll_us: 2000\n").settings.timing_poll_us, 2000);
  EXPECT_EQ(fromYaml("timing_poll_us: 2000\n", {{"RANKLENS_TIMING_POLL_US", "500"}}).settings.timing_poll_us, 500);
  r = fromYaml("", {{"RANKLENS_TIMING_POLL_US", "5"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("microseconds, 10..100000"), std::string::npos) << r.error;
  r = fromYaml("", {{"RANKLENS_CAPTURED_TIMING", "kernel"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected one of events|off"), std::string::npos) << r.error;
  r = fromYaml("", {{"RANKLENS_TIMING_CLOCK", "profiler"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected one of events|kernel"), std::string::npos) << r.error;
  EXPECT_EQ(fromYaml("").settings.payload_zstd_level, -1);
  EXPECT_EQ(fromYaml("payload_zstd_level: 3\n").settings.payload_zstd_level, 3);
  EXPECT_EQ(fromYaml("").settings.payload_threads, 0);
  EXPECT_EQ(fromYaml("payload_threads: 12\n").settings.payload_threads, 12);
  EXPECT_FALSE(fromYaml("payload_threads: 65\n").ok);
  EXPECT_EQ(fromYaml("").settings.payload_shuffle, PayloadShuffle::kOn);
  EXPECT_EQ(fromYaml("payload_shuffle: auto\n").settings.payload_shuffle, PayloadShuffle::kAuto);
  EXPECT_EQ(fromYaml("payload_shuffle: off\n").settings.payload_shuffle, PayloadShuffle::kOff);
  EXPECT_FALSE(fromYaml("payload_shuffle: yes\n").ok);
  EXPECT_EQ(fromYaml("").settings.payload_queue_bytes, 1ull << 30);
  EXPECT_EQ(fromYaml("payload_queue_bytes: 4GiB\n").settings.payload_queue_bytes, 4ull << 30);
  EXPECT_FALSE(fromYaml("payload_queue_bytes: 1MiB\n").ok);  // below 16 MiB
  r = fromYaml("", {{"RANKLENS_PAYLOAD_ZSTD_LEVEL", "20"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("a zstd level, -100..19"), std::string::npos) << r.error;
  EXPECT_EQ(fromYaml("").settings.payload_copy_kernel_bytes, 65536u);
  EXPECT_EQ(fromYaml("payload_copy_kernel_bytes: 0\n").settings.payload_copy_kernel_bytes, 0u);
  EXPECT_EQ(fromYaml("payload_copy_kernel_bytes: 0\n", {{"RANKLENS_PAYLOAD_COPY_KERNEL_BYTES", "8KiB"}})
                .settings.payload_copy_kernel_bytes,
            8192u);
  EXPECT_EQ(fromYaml("").settings.payload_copy_kernel_bytes_one_rank, 0u);
  EXPECT_EQ(fromYaml("payload_copy_kernel_bytes_one_rank: 64KiB\n").settings.payload_copy_kernel_bytes_one_rank,
            65536u);
  EXPECT_EQ(fromYaml("", {{"RANKLENS_PAYLOAD_COPY_KERNEL_BYTES_ONE_RANK", "4KiB"}})
                .settings.payload_copy_kernel_bytes_one_rank,
            4096u);
  EXPECT_EQ(fromYaml("").settings.payload_copy_priority, CopyPriority::kHigh);
  EXPECT_EQ(fromYaml("payload_copy_priority: stream\n").settings.payload_copy_priority, CopyPriority::kStream);
  r = fromYaml("", {{"RANKLENS_PAYLOAD_COPY_PRIORITY", "low"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected one of high|stream"), std::string::npos) << r.error;
}

TEST(ConfigReplay, ReplayKnobsFromYamlAndEnvironment) {
  Loaded r = fromYaml(
      "fidelity: value\nreplay_trace: /traces/run42\non_mismatch: estimate\ncompletion: host_callback\n"
      "resync_window: 8\nprefetch_bytes: 2GiB\npayload_device_bytes: 0\nbreak_at: '3:120'\n",
      {{"RANKLENS_ON_MISMATCH", "warn"}});
  ASSERT_TRUE(r.ok) << r.error;
  const Settings& s = r.settings;
  EXPECT_EQ(s.replay_trace, "/traces/run42");
  EXPECT_EQ(s.on_mismatch, OnMismatch::kWarn);  // env beats YAML
  EXPECT_EQ(s.set_by.at("on_mismatch"), "env RANKLENS_ON_MISMATCH");
  EXPECT_EQ(s.completion, Completion::kHostCallback);
  EXPECT_EQ(s.resync_window, 8);
  EXPECT_EQ(s.prefetch_bytes, 2ull << 30);
  EXPECT_EQ(s.payload_device_bytes, 0ull);
  EXPECT_EQ(s.break_comm, 3);
  EXPECT_EQ(s.break_seq, 120);
  EXPECT_EQ(s.prefetch_threads, 0);
  EXPECT_EQ(fromYaml("").settings.prefetch_bytes, 0ull) << "auto (0) by default";
  r = fromYaml("prefetch_bytes: 1GiB\n", {{"RANKLENS_PREFETCH_BYTES", "auto"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.prefetch_bytes, 0ull) << "env auto beats YAML";
  EXPECT_EQ(fromYaml("").settings.staging_bytes, Settings::kAutoStagingBytes) << "auto by default";
  r = fromYaml("staging_bytes: auto\n", {{"RANKLENS_STAGING_BYTES", "512MiB"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.staging_bytes, 512ull << 20) << "env beats YAML";
  EXPECT_EQ(fromYaml("staging_bytes: 1GiB\n").settings.staging_bytes, 1ull << 30);
  r = fromYaml("staging_bytes: 0\n");
  ASSERT_FALSE(r.ok) << "at least one byte";
  EXPECT_EQ(fromYaml("").settings.payload_device_bytes, Settings::kAutoDeviceBytes) << "auto by default";
  r = fromYaml("payload_device_bytes: auto\n", {{"RANKLENS_PAYLOAD_DEVICE_BYTES", "1GiB"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.payload_device_bytes, 1ull << 30) << "env beats YAML";
  r = fromYaml("payload_device_bytes: lots\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("auto or a byte count"), std::string::npos) << r.error;
  EXPECT_EQ(fromYaml("prefetch_threads: 8\n").settings.prefetch_threads, 8);
  r = fromYaml("", {{"RANKLENS_PREFETCH_THREADS", "65"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("threads, 0..64"), std::string::npos) << r.error;
}

TEST(ConfigReplay, HoldShape) {
  Loaded r = fromYaml("hold_blocks: 24\nhold_threads: 640\nhold_shared_bytes: 48KiB\nhold_from: start\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.hold_from, HoldFrom::kStart);
  EXPECT_EQ(r.settings.peer_pacing, ranklens::config::PeerPacing::kOff);
  EXPECT_EQ(fromYaml("peer_pacing: recorded\n").settings.peer_pacing, ranklens::config::PeerPacing::kRecorded);
  EXPECT_EQ(fromYaml("", {{"RANKLENS_PEER_PACING", "recorded"}}).settings.peer_pacing,
            ranklens::config::PeerPacing::kRecorded);
  EXPECT_FALSE(fromYaml("peer_pacing: on\n").ok);
  EXPECT_EQ(r.settings.hold_blocks, 24);
  EXPECT_EQ(r.settings.hold_threads, 640);
  EXPECT_EQ(r.settings.hold_shared_bytes, 48 * 1024);
  r = fromYaml("", {{"RANKLENS_HOLD_SHARED_BYTES", "sm"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.hold_shared_bytes, ranklens::config::kHoldSharedSm);
  r = fromYaml("hold_shared_bytes: 0\n");
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.hold_shared_bytes, 0);
  EXPECT_EQ(fromYaml("").settings.hold_shared_bytes, ranklens::config::kHoldSharedAuto);
  r = fromYaml("hold_threads: 48\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("a multiple of 32 in 32..1024"), std::string::npos) << r.error;
  r = fromYaml("", {{"RANKLENS_HOLD_SHARED_BYTES", "lots"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("auto, sm or a byte count"), std::string::npos) << r.error;
}

TEST(ConfigReplay, BadReplayValuesNameTheExpectedForm) {
  Loaded r = fromYaml("", {{"RANKLENS_BREAK_AT", "120"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("RANKLENS_BREAK_AT"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("<comm>:<seq>"), std::string::npos) << r.error;
  r = fromYaml("on_mismatch: ignore\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("one of error|warn|estimate"), std::string::npos) << r.error;
  r = fromYaml("prefetch_bytes: 1KiB\n");
  ASSERT_FALSE(r.ok) << "prefetch_bytes below 1 MiB is refused";
  r = fromYaml("prefetch_bytes: automatic\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("auto or a byte count >= 1048576"), std::string::npos) << r.error;
}

TEST(ConfigRecord, PayloadKnobsFromEnvironment) {
  Loaded r = fromYaml("", {{"RANKLENS_PAYLOAD_OPS", "Send, Recv"},
                           {"RANKLENS_PAYLOAD_STEPS", "7"},
                           {"RANKLENS_PAYLOAD_MAX_BYTES", "4096"},
                           {"RANKLENS_PAYLOADS", "none"}});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.settings.payload_ops, (std::vector<std::string>{"Send", "Recv"}));
  EXPECT_TRUE(r.settings.payload_steps.contains(7));
  EXPECT_FALSE(r.settings.payload_steps.contains(8));
  EXPECT_EQ(r.settings.payload_max_bytes, 4096u);
  EXPECT_EQ(r.settings.payloads, Payloads::kNone);
  std::vector<KeyInfo> rows = describe(r.settings);
  for (const auto& row : rows) {
    if (row.key == "payload_ops") EXPECT_EQ(row.value, "[Send, Recv]");
    if (row.key == "payload_steps") EXPECT_EQ(row.value, "7-7");
    if (row.key == "payload_max_bytes") EXPECT_EQ(row.value, "4KiB");
  }
}

TEST(ConfigRecord, BadPayloadValuesNameTheFix) {
  Loaded r = fromYaml("payload_ops: [AllReduce, Allreduce]\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("bad value 'Allreduce' for 'payload_ops'"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("AllReduce|"), std::string::npos) << r.error;
  r = fromYaml("payload_steps: 20-10\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("cfg.yaml:1:16: bad value '20-10' for 'payload_steps'"), std::string::npos) << r.error;
  r = fromYaml("", {{"RANKLENS_STAGING_BYTES", "12MB"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("RANKLENS_STAGING_BYTES=12MB: bad value '12MB'"), std::string::npos) << r.error;
  r = fromYaml("", {{"RANKLENS_STAGING_BYTES", "0"}});
  EXPECT_FALSE(r.ok);
  r = fromYaml("", {{"RANKLENS_PAYLOAD_COMMS", "0,,1"}});
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("an entry is empty"), std::string::npos) << r.error;
  r = fromYaml("payloads: some\n");
  ASSERT_FALSE(r.ok);
  EXPECT_NE(r.error.find("expected one of none|small|all"), std::string::npos) << r.error;
}

TEST(ConfigToString, LowercaseNames) {
  EXPECT_STREQ(toString(Mode::kReplay), "replay");
  EXPECT_STREQ(toString(Mode::kRecord), "record");
  EXPECT_STREQ(toString(Fidelity::kStructure), "structure");
  EXPECT_STREQ(toString(Fidelity::kTiming), "timing");
  EXPECT_STREQ(toString(Fidelity::kValue), "value");
  EXPECT_STREQ(toString(Fill::kClone), "clone");
  EXPECT_STREQ(toString(Fill::kKeep), "keep");
  EXPECT_STREQ(toString(Fill::kZero), "zero");
  EXPECT_STREQ(toString(Fill::kPoison), "poison");
  EXPECT_STREQ(toString(DeviceKind::kAuto), "auto");
  EXPECT_STREQ(toString(DeviceKind::kCuda), "cuda");
  EXPECT_STREQ(toString(DeviceKind::kHost), "host");
}

// Style rule: every knob is documented once in docs/config.md, as a table row `| `key` | `ENV` | ...`.
TEST(ConfigDocs, EveryKeyHasExactlyOneRowInTheReference) {
  std::ifstream in(RANKLENS_CONFIG_DOC);
  ASSERT_TRUE(in) << RANKLENS_CONFIG_DOC;
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  for (const KeyInfo& row : describe(Settings{})) {
    const std::string cell = "| `" + row.key + "` | `" + row.env + "` |";
    size_t count = 0;
    for (size_t at = doc.find(cell); at != std::string::npos; at = doc.find(cell, at + 1)) ++count;
    EXPECT_EQ(count, 1u) << row.key << " (" << row.env << ") in " << RANKLENS_CONFIG_DOC;
  }
}
}  // namespace
}  // namespace config
}  // namespace ranklens

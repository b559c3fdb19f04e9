// SPDX-License-Identifier: Apache-2.0
// The device mesh (settings mesh, mesh_colors; ranklens/mesh.h): a split's members for any rank at any world size,
// torch's colors recognised, and the errors that say how to fix a mesh that does not fit.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "ranklens/config.h"
#include "ranklens/mesh.h"

namespace ranklens {
namespace config {
namespace {

// One load's outcome, as the tests inspect it.
struct Loaded {
  bool ok = false;
  std::string error;
  Settings settings;
};

Loaded fromEnv(const std::map<std::string, std::string>& vars) {
  std::vector<std::string> names;
  for (const auto& kv : vars) names.push_back(kv.first);
  Loaded r;
  const Status status = loadFromEnvironment(
      [&](const char* name) -> const char* {
        auto it = vars.find(name);
        return it == vars.end() ? nullptr : it->second.c_str();
      },
      &r.settings, nullptr, &names);
  r.ok = status.isOk();
  r.error = status.message();
  return r;
}

Settings settings(const std::string& mesh, const std::string& colors = "") {
  Loaded r = fromEnv({{"RANKLENS_MESH", mesh}, {"RANKLENS_MESH_COLORS", colors}});
  EXPECT_TRUE(r.ok) << r.error;
  return r.settings;
}

std::vector<int> range(int first, int stride, int count) {
  std::vector<int> out;
  for (int i = 0; i < count; ++i) out.push_back(first + i * stride);
  return out;
}

MeshSplit split(const Settings& s, int world, const std::vector<int>& parent, int parentRank, int color, int key = 0) {
  MeshSplit out;
  const Status placed = resolveMeshSplit(s, world, parent, parentRank, color, key, &out);
  EXPECT_TRUE(placed.isOk()) << placed.message();
  return out;
}

TEST(MeshConfig, ParsesEnvironmentAndYaml) {
  Settings s = settings("dp=8192,tp=2", "tp=0-8191,dp=8192-");
  ASSERT_EQ(s.mesh.size(), 2u);
  EXPECT_EQ(s.mesh[0].name, "dp");
  EXPECT_EQ(s.mesh[0].size, 8192);
  EXPECT_EQ(s.mesh[1].name, "tp");
  EXPECT_EQ(s.mesh[1].size, 2);
  ASSERT_EQ(s.mesh_colors.size(), 2u);
  EXPECT_EQ(s.mesh_colors[0].dims, std::vector<std::string>{"tp"});
  EXPECT_EQ(s.mesh_colors[0].colors.lo, 0);
  EXPECT_EQ(s.mesh_colors[0].colors.hi, 8191);
  EXPECT_EQ(s.mesh_colors[1].colors.lo, 8192);
  EXPECT_EQ(s.mesh_colors[1].colors.hi, -1);

  Loaded y;
  const Status loaded = loadFromYaml(
      "mesh: [pp=4, dp=-1, tp=8]\nmesh_colors: [pp+dp=all]\n", "cfg.yaml",
      [](const char*) -> const char* { return nullptr; }, &y.settings);
  ASSERT_TRUE(loaded.isOk()) << loaded.message();
  ASSERT_EQ(y.settings.mesh.size(), 3u);
  EXPECT_EQ(y.settings.mesh[1].size, -1);
  EXPECT_EQ(y.settings.mesh_colors[0].dims, (std::vector<std::string>{"pp", "dp"}));
  EXPECT_TRUE(y.settings.mesh_colors[0].colors.all());
  EXPECT_EQ(y.settings.set_by.at("mesh"), "cfg.yaml:1:7");
  for (const KeyInfo& row : describe(y.settings)) {
    if (row.key == "mesh") EXPECT_EQ(row.value, "pp=4,dp=-1,tp=8");
    if (row.key == "mesh_colors") EXPECT_EQ(row.value, "pp+dp=all");
  }
}

TEST(MeshConfig, RefusesBadMeshes) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"dp=0,tp=2", "expected dimensions outermost first"},
      {"dp,tp=2", "expected dimensions outermost first"},
      {"dp=8192,tp=x", "expected dimensions outermost first"},
      {"2d=4", "expected dimensions outermost first"},
      {"dp=2,dp=4", "each dimension named once"},
      {"dp=-1,tp=-1", "at most one size of -1"},
      {"a=2,b=2,c=2,d=2,e=2,f=2,g=2,h=2,i=2", "at most 8 dimensions"},
      {"dp=65536,tp=65536", "at most 2^31-1 ranks"},
  };
  for (const auto& [mesh, expected] : bad) {
    Loaded r = fromEnv({{"RANKLENS_MESH", mesh}});
    EXPECT_FALSE(r.ok) << mesh;
    EXPECT_NE(r.error.find("RANKLENS_MESH=" + mesh), std::string::npos) << r.error;
    EXPECT_NE(r.error.find(expected), std::string::npos) << r.error;
  }
}

TEST(MeshConfig, RefusesBadColorEntries) {
  for (const std::string& colors : {"tp", "tp=", "=3", "tp=5-3", "tp=-3", "tp+tp=1", "tp=x"}) {
    Loaded r = fromEnv({{"RANKLENS_MESH", "dp=4,tp=2"}, {"RANKLENS_MESH_COLORS", colors}});
    EXPECT_FALSE(r.ok) << colors;
    EXPECT_NE(r.error.find("expected entries dims=colors"), std::string::npos) << r.error;
  }
  Loaded unknown = fromEnv({{"RANKLENS_MESH", "dp=4,tp=2"}, {"RANKLENS_MESH_COLORS", "tp=0-3,pp=4-"}});
  EXPECT_FALSE(unknown.ok);
  EXPECT_NE(unknown.error.find("'pp', which is not a dimension of the mesh dp=4,tp=2"), std::string::npos)
      << unknown.error;
  Loaded noMesh = fromEnv({{"RANKLENS_MESH_COLORS", "tp=0-3"}});
  EXPECT_FALSE(noMesh.ok);
  EXPECT_NE(noMesh.error.find("env RANKLENS_MESH_COLORS: mesh_colors names mesh dimensions, but no mesh is set"),
            std::string::npos)
      << noMesh.error;
}

TEST(MeshSizes, FillsTheInferredDimensionAndRefusesAMismatch) {
  std::vector<int> sizes;
  EXPECT_TRUE(meshSizes(settings("dp=-1,tp=2").mesh, 131072, &sizes).isOk());
  EXPECT_EQ(sizes, (std::vector<int>{65536, 2}));
  EXPECT_TRUE(meshSizes(settings("pp=4,dp=8,tp=2").mesh, 64, &sizes).isOk());
  EXPECT_EQ(sizes, (std::vector<int>{4, 8, 2}));
  Status fit = meshSizes(settings("dp=8192,tp=2").mesh, 16, &sizes);
  EXPECT_EQ(fit.code(), Status::Code::kInvalidArgument);
  std::string err = fit.message();
  EXPECT_NE(err.find("the mesh dp=8192,tp=2 does not fit a world of 16 ranks (it has 16384)"), std::string::npos)
      << err;
  EXPECT_NE(err.find("dp=-1"), std::string::npos) << err;
  err = meshSizes(settings("dp=-1,tp=3").mesh, 16, &sizes).message();
  EXPECT_NE(err.find("(3 does not divide it)"), std::string::npos) << err;
}

// Values from CPython 3.11: abs(hash(tuple(ranks))) % 2**31, what torch.distributed passes as the split color.
TEST(MeshTorchColor, MatchesPython) {
  EXPECT_EQ(torchSplitColor({0, 1}), 2130503744);
  EXPECT_EQ(torchSplitColor({0, 2, 4, 6}), 2031181855);
  EXPECT_EQ(torchSplitColor({1, 3, 5, 7}), 2023921969);
  EXPECT_EQ(torchSplitColor({5}), 14136057);
  EXPECT_EQ(torchSplitColor({}), 750394491);
  EXPECT_EQ(torchSplitColor(range(0, 2, 8192)), 90609142);
  EXPECT_EQ(torchSplitColor(range(1, 2, 65536)), 785390687);
}

// nccl_minitrain's layout: tp color = w / K (0..D-1), dp color = D + w % K.
TEST(MeshSplit, MinitrainColorsAtSixteenThousandRanks) {
  const int world = 16384;
  const Settings s = settings("dp=-1,tp=2", "tp=0-8191,dp=8192-");
  const std::vector<int> all = range(0, 1, world);
  for (int rank : {0, 1, 5, 8190, 16383}) {
    MeshSplit tp = split(s, world, all, rank, rank / 2, rank);
    EXPECT_EQ(tp.members, range(rank / 2 * 2, 1, 2)) << rank;
    EXPECT_EQ(tp.rank, rank % 2);
    EXPECT_EQ(tp.dims, "tp");
    EXPECT_EQ(tp.how, "mesh_colors entry tp=0-8191");
    MeshSplit dp = split(s, world, all, rank, 8192 + rank % 2, rank);
    EXPECT_EQ(dp.members, range(rank % 2, 2, 8192)) << rank;
    EXPECT_EQ(dp.rank, rank / 2);
    EXPECT_EQ(dp.dims, "dp");
  }
}

TEST(MeshSplit, ThreeDimensionsAndSetsOfThem) {
  const Settings s = settings("pp=2,dp=2,tp=2", "tp=0,dp=1,pp=2,pp+dp=3,pp+dp+tp=4");
  const std::vector<int> all = range(0, 1, 8);
  // Rank 5: pp 1, dp 0, tp 1.
  EXPECT_EQ(split(s, 8, all, 5, 0).members, (std::vector<int>{4, 5}));
  EXPECT_EQ(split(s, 8, all, 5, 1).members, (std::vector<int>{5, 7}));
  EXPECT_EQ(split(s, 8, all, 5, 2).members, (std::vector<int>{1, 5}));
  MeshSplit ppdp = split(s, 8, all, 5, 3);
  EXPECT_EQ(ppdp.members, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(ppdp.rank, 2);
  EXPECT_EQ(ppdp.dims, "pp+dp");
  EXPECT_EQ(split(s, 8, all, 5, 4).members, all);
  // Rank 2: pp 0, dp 1, tp 0.
  EXPECT_EQ(split(s, 8, all, 2, 1).members, (std::vector<int>{0, 2}));
  EXPECT_EQ(split(s, 8, all, 2, 2).members, (std::vector<int>{2, 6}));
}

TEST(MeshSplit, SplitOfASplitKeepsTheParentsOrder) {
  const Settings s = settings("pp=2,dp=2,tp=2", "dp=1,pp+dp=3");
  // The pp+dp group of rank 5, then its dp split: members within the parent only.
  MeshSplit dp = split(s, 8, {1, 3, 5, 7}, 2, 1);
  EXPECT_EQ(dp.members, (std::vector<int>{5, 7}));
  EXPECT_EQ(dp.rank, 0);
  // A parent in reversed order (keys that reversed it): the child keeps the parent's order.
  MeshSplit reversed = split(s, 8, {7, 5, 3, 1}, 1, 3);
  EXPECT_EQ(reversed.members, (std::vector<int>{7, 5, 3, 1}));
  EXPECT_EQ(reversed.rank, 1);
}

TEST(MeshSplit, RecognisesTorchColorsWithoutMeshColors) {
  const Settings s = settings("dp=4,tp=4");
  const std::vector<int> all = range(0, 1, 16);
  // Rank 6: dp 1, tp 2. torch's new_group hashes the group's world ranks.
  MeshSplit tp = split(s, 16, all, 6, torchSplitColor({4, 5, 6, 7}), 2);
  EXPECT_EQ(tp.members, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(tp.rank, 2);
  EXPECT_EQ(tp.how, "torch's color for the tp group");
  MeshSplit dp = split(s, 16, all, 6, torchSplitColor({2, 6, 10, 14}), 1);
  EXPECT_EQ(dp.members, (std::vector<int>{2, 6, 10, 14}));
  EXPECT_EQ(dp.rank, 1);
  EXPECT_EQ(dp.dims, "dp");
  EXPECT_EQ(split(s, 16, all, 6, torchSplitColor(all)).members, all);
  EXPECT_EQ(split(s, 16, all, 6, torchSplitColor({6})).members, std::vector<int>{6});
  // split_group of a subgroup hashes ranks in the parent: the dp group of rank 6 split along... itself.
  MeshSplit inParent = split(s, 16, {2, 6, 10, 14}, 1, torchSplitColor({0, 1, 2, 3}));
  EXPECT_EQ(inParent.members, (std::vector<int>{2, 6, 10, 14}));
  // A mesh_colors entry wins over the recognition.
  const Settings said = settings("dp=4,tp=4", "dp=all");
  EXPECT_EQ(split(said, 16, all, 6, torchSplitColor({4, 5, 6, 7})).dims, "dp");
}

TEST(MeshSplit, ErrorsNameTheColorKeyAndFix) {
  const Settings s = settings("dp=-1,tp=2", "tp=0-7");
  MeshSplit out;
  Status placed = resolveMeshSplit(s, 16, range(0, 1, 16), 3, 9, 3, &out);
  EXPECT_EQ(placed.code(), Status::Code::kInvalidUsage);
  std::string err = placed.message();
  EXPECT_NE(err.find("ncclCommSplit(color 9, key 3) of a communicator of 16 ranks by world rank 3"), std::string::npos)
      << err;
  EXPECT_NE(err.find("does not say which dimensions color 9 splits along"), std::string::npos) << err;
  EXPECT_NE(err.find("dp [1, 3, 5, ..., 15]"), std::string::npos) << err;
  EXPECT_NE(err.find("RANKLENS_MESH_COLORS=tp=9"), std::string::npos) << err;
  EXPECT_NE(err.find("groups: table"), std::string::npos) << err;
  err = resolveMeshSplit(settings("dp=8192,tp=2", "tp=all"), 16, range(0, 1, 16), 3, 1, 3, &out).message();
  EXPECT_NE(err.find("the mesh dp=8192,tp=2 does not fit a world of 16 ranks"), std::string::npos) << err;
}

// One rank of a 131,072-rank world: its 65,536-member data-parallel group, quickly (no table of every group).
TEST(MeshSplit, LargeWorld) {
  const int world = 131072;
  const Settings s = settings("dp=-1,tp=2");
  const std::vector<int> all = range(0, 1, world);
  const auto start = std::chrono::steady_clock::now();
  MeshSplit dp = split(s, world, all, 131071, torchSplitColor(range(1, 2, 65536)), 131071);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(dp.members, range(1, 2, 65536));
  EXPECT_EQ(dp.rank, 65535);
  EXPECT_LT(seconds, 5.0);
}

}  // namespace
}  // namespace config
}  // namespace ranklens

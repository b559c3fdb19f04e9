// SPDX-License-Identifier: Apache-2.0
// Split children from the device mesh (ranklens/mesh.h). Work is proportional to the child's size, never to a table
// of every group, so one rank of a 131,072-rank world resolves its splits in milliseconds.
#include "ranklens/mesh.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <utility>

namespace ranklens {
namespace config {
namespace {

std::string meshText(const std::vector<MeshDim>& mesh) {
  std::string out;
  for (const MeshDim& d : mesh) out += (out.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return out;
}

// Dimension set (bit i: mesh dimension i) as "pp+dp".
std::string dimsText(const std::vector<MeshDim>& mesh, unsigned mask) {
  std::string out;
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (mask & (1u << i)) out += (out.empty() ? "" : "+") + mesh[i].name;
  }
  return out;
}

// Ranks as "[1, 3, 5, ..., 16383]" (the first few and the last): messages stay one short line at any scale.
std::string ranksText(const std::vector<int>& ranks) {
  std::string out = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 3 && ranks.size() > 5) {
      out += ", ..., " + std::to_string(ranks.back());
      break;
    }
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return out + "]";
}

// Where the parent's members sit, for a parent that is not the whole world in world order.
struct Parent {
  const std::vector<int>& worldRanks;
  bool wholeWorld = true;                    // worldRanks[i] == i for every i < worldSize
  std::vector<std::pair<int, int>> byWorld;  // (world rank, parent rank), sorted; only when !wholeWorld

  Parent(const std::vector<int>& ranks, int worldSize) : worldRanks(ranks) {
    wholeWorld = static_cast<int>(ranks.size()) == worldSize;
    for (size_t i = 0; wholeWorld && i < ranks.size(); ++i) wholeWorld = ranks[i] == static_cast<int>(i);
    if (wholeWorld) return;
    byWorld.reserve(ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) byWorld.emplace_back(ranks[i], static_cast<int>(i));
    std::sort(byWorld.begin(), byWorld.end());
  }
  // The parent rank of a world rank, or -1 when it is not a member.
  int rankOf(int world) const {
    if (wholeWorld) return world;
    auto it = std::lower_bound(byWorld.begin(), byWorld.end(), std::make_pair(world, INT_MIN));
    return it != byWorld.end() && it->first == world ? it->second : -1;
  }
};

// The parent's members that agree with `me` on every dimension outside `mask`, as (parent rank, world rank) in
// parent-rank order.
std::vector<std::pair<int, int>> groupOf(const std::vector<int>& sizes, const std::vector<long long>& strides, int me,
                                         unsigned mask, const Parent& parent) {
  long long base = me;  // me with every spanned coordinate set to 0
  std::vector<size_t> spanned;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!(mask & (1u << i))) continue;
    base -= (me / strides[i] % sizes[i]) * strides[i];
    spanned.push_back(i);
  }
  std::vector<std::pair<int, int>> out;
  std::vector<int> coord(spanned.size(), 0);
  while (true) {
    long long world = base;
    for (size_t j = 0; j < spanned.size(); ++j) world += coord[j] * strides[spanned[j]];
    const int parentRank = parent.rankOf(static_cast<int>(world));
    if (parentRank >= 0) out.emplace_back(parentRank, static_cast<int>(world));
    size_t j = spanned.size();  // odometer, innermost (last) dimension fastest
    while (j > 0 && ++coord[j - 1] == sizes[spanned[j - 1]]) coord[--j] = 0;
    if (j == 0) break;
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Python's hash of a tuple of non-negative ints below 2^61 - 1 (CPython 3.8 and later: xxHash-like lanes; an int
// hashes to itself).
int64_t pythonTupleHash(const std::vector<int>& items) {
  constexpr uint64_t kPrime1 = 11400714785074694791ull, kPrime2 = 14029467366897019727ull,
                     kPrime5 = 2870177450012600261ull;
  uint64_t acc = kPrime5;
  for (int item : items) {
    acc += static_cast<uint64_t>(item) * kPrime2;
    acc = (acc << 31) | (acc >> 33);
    acc *= kPrime1;
  }
  acc += items.size() ^ (kPrime5 ^ 3527539ull);
  if (acc == ~0ull) return 1546275796;
  return static_cast<int64_t>(acc);
}

}  // namespace

int torchSplitColor(const std::vector<int>& ranks) {
  const int64_t h = pythonTupleHash(ranks);
  // abs() of the most negative value does not fit; Python's would be 2^63, which is 0 modulo 2^31.
  const uint64_t magnitude = h < 0 ? static_cast<uint64_t>(-(h + 1)) + 1 : static_cast<uint64_t>(h);
  return static_cast<int>(magnitude % (1ull << 31));
}

Status meshSizes(const std::vector<MeshDim>& mesh, long long worldSize, std::vector<int>* sizes) {
  long long known = 1;
  int inferred = -1;
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (mesh[i].size < 0)
      inferred = static_cast<int>(i);
    else
      known *= mesh[i].size;
  }
  const std::string fix =
      "; the product of its sizes must be the world size (give one size as -1 to take what the "
      "world size leaves, e.g. dp=-1)";
  if (inferred >= 0 ? worldSize % known != 0 : known != worldSize) {
    return Status::invalidArgument("the mesh " + meshText(mesh) + " does not fit a world of " +
                                   std::to_string(worldSize) + " ranks" +
                                   (inferred >= 0 ? " (" + std::to_string(known) + " does not divide it)"
                                                  : " (it has " + std::to_string(known) + ")") +
                                   fix);
  }
  sizes->clear();
  for (const MeshDim& d : mesh)
    sizes->push_back(d.size < 0 ? static_cast<int>(worldSize / known) : static_cast<int>(d.size));
  return Status::ok();
}

namespace {

// A split the settings cannot place is the program's call at the wrong place for them: invalid usage, as NCCL says.
Status resolve(const Settings& settings, int worldSize, const std::vector<int>& parentWorldRanks, int parentRank,
               int color, int key, MeshSplit* out) {
  const std::vector<MeshDim>& mesh = settings.mesh;
  const int me = parentWorldRanks.at(parentRank);
  const std::string which = "ncclCommSplit(color " + std::to_string(color) + ", key " + std::to_string(key) +
                            ") of a communicator of " + std::to_string(parentWorldRanks.size()) +
                            " ranks by world rank " + std::to_string(me);
  std::vector<int> sizes;
  if (Status fit = meshSizes(mesh, worldSize, &sizes); !fit.isOk())
    return Status::invalidUsage(which + ": " + fit.message());
  if (mesh.size() > 8) return Status::invalidUsage(which + ": the mesh has more than 8 dimensions");
  std::vector<long long> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  const Parent parent(parentWorldRanks, worldSize);

  auto finish = [&](unsigned mask, std::vector<std::pair<int, int>> group, std::string how) {
    out->members.clear();
    for (const auto& [p, w] : group) {
      if (w == me) out->rank = static_cast<int>(out->members.size());
      out->members.push_back(w);
    }
    out->dims = dimsText(mesh, mask);
    out->how = std::move(how);
    return Status::ok();
  };
  auto maskOf = [&](const MeshColors& entry) {
    unsigned mask = 0;
    for (const std::string& dim : entry.dims) {
      for (size_t i = 0; i < mesh.size(); ++i) {
        if (mesh[i].name == dim) mask |= 1u << i;
      }
    }
    return mask;
  };

  // 1. Said by the user.
  for (const MeshColors& entry : settings.mesh_colors) {
    if (!entry.colors.contains(color)) continue;
    const unsigned mask = maskOf(entry);
    return finish(mask, groupOf(sizes, strides, me, mask, parent), "mesh_colors entry " + entry.text);
  }
  // 2. torch's color: new_group hashes the group's world ranks, split_group its ranks in the parent (both sorted).
  const unsigned all = (1u << mesh.size()) - 1;
  std::string seen;  // this rank's groups, for the error
  for (unsigned mask = 0; mask <= all; ++mask) {
    auto group = groupOf(sizes, strides, me, mask, parent);
    std::vector<int> world, inParent;
    for (const auto& [p, w] : group) {
      world.push_back(w);
      inParent.push_back(p);
    }
    std::sort(world.begin(), world.end());
    std::sort(inParent.begin(), inParent.end());
    if (torchSplitColor(world) == color || torchSplitColor(inParent) == color)
      return finish(mask, std::move(group),
                    "torch's color for the " + (mask ? dimsText(mesh, mask) : "1-rank") + " group");
    if (mask != 0 && (mask & (mask - 1)) == 0)  // one dimension: the groups a user most likely means
      seen += (seen.empty() ? "" : ", ") + dimsText(mesh, mask) + " " + ranksText(world);
  }
  return Status::invalidUsage(
      which + ": the mesh " + meshText(mesh) + " does not say which dimensions color " + std::to_string(color) +
      " splits along (no mesh_colors entry holds it, and it is not torch's color for any of this rank's mesh "
      "groups: " +
      seen + "). Say it with mesh_colors, e.g. RANKLENS_MESH_COLORS=" + mesh.back().name + "=" + std::to_string(color) +
      " (or a range such as " + mesh.back().name + "=" + std::to_string(color) +
      "- for every color from it on; ranklens replay --mesh-colors), or list the child in the groups: table");
}

}  // namespace

// Called from ncclCommSplit: nothing may leave as an exception (a world too large for memory is the one way in).
Status resolveMeshSplit(const Settings& settings, int worldSize, const std::vector<int>& parentWorldRanks,
                        int parentRank, int color, int key, MeshSplit* out) {
  try {
    if (parentRank < 0 || static_cast<size_t>(parentRank) >= parentWorldRanks.size())
      return Status::invalidUsage("ncclCommSplit: rank " + std::to_string(parentRank) +
                                  " is not a member of the communicator split");
    return resolve(settings, worldSize, parentWorldRanks, parentRank, color, key, out);
  } catch (const std::exception& e) {
    return Status::internalError(std::string("ncclCommSplit: cannot work out the child from the mesh: ") + e.what());
  } catch (...) {
    return Status::internalError("ncclCommSplit: cannot work out the child from the mesh");
  }
}

}  // namespace config
}  // namespace ranklens

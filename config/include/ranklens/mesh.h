// SPDX-License-Identifier: Apache-2.0
// The members of a ncclCommSplit child worked out from the device mesh (settings `mesh`, `mesh_colors`), for a rank
// that is replayed alone and so cannot see its peers' colors.
//
// The mesh lists dimensions outermost first; a world rank is the row-major index of its coordinates (the last
// dimension contiguous), as in torch's DeviceMesh. A split groups the ranks that agree with this rank on every
// dimension it does not span; which dimensions it spans comes from the split's color:
//   1. the first `mesh_colors` entry whose colors hold it, else
//   2. torch's color for that group (Python's hash of the tuple of its ranks, modulo 2^31, as torch.distributed's
//      new_group and split_group set ncclCommSplit's color), tried for every set of dimensions.
// Children are ordered by rank in the parent: NCCL orders by key, then parent rank, and the keys programs pass
// (torch: the rank in the group; others: the world or parent rank) ascend the same way.
#pragma once

#include <string>
#include <vector>

#include "ranklens/config.h"

namespace ranklens {
namespace config {

// The mesh's sizes for a world of `worldSize` ranks (a size of -1 filled in); kInvalidArgument naming the fix when
// the mesh does not fit.
Status meshSizes(const std::vector<MeshDim>& mesh, long long worldSize, std::vector<int>* sizes);

struct MeshSplit {
  std::vector<int> members;  // world ranks, in child-rank order
  int rank = 0;              // this rank's place among them
  std::string dims;          // the dimensions spanned, e.g. "tp" or "pp+dp"; "" for a child of this rank alone
  std::string how;           // why these dimensions: "mesh_colors entry tp=0-8191" or "torch's color for ..."
};

// The child of ncclCommSplit(parent, color, key) for the parent member `parentRank`, whose members are
// `parentWorldRanks` (world ranks in parent-rank order) in a world of `worldSize` ranks. kInvalidUsage when the
// settings do not place it, with a message that names the color and key and how to describe the split.
Status resolveMeshSplit(const Settings& settings, int worldSize, const std::vector<int>& parentWorldRanks,
                        int parentRank, int color, int key, MeshSplit* out);

// torch's split color for a group of these ranks (sorted, as torch passes them): abs(hash(tuple(ranks))) % 2^31.
int torchSplitColor(const std::vector<int>& ranks);

}  // namespace config
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: loadFromYaml on arbitrary text (a RANKLENS_CONFIG file: written by hand, often wrong). Whatever
// the text, no exception leaves the config library and the answer is either settings or one error that names the
// file; a refusal leaves every setting at its default. A mesh it accepts is resolved for a few ranks and colors of a
// world it fits (small ones only, to keep each input fast): the child always holds the rank, at the place it reports,
// and only ranks of that world.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "ranklens/config.h"
#include "ranklens/mesh.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::config;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> noVariables;
  Settings settings;
  ranklens::Status status;
  try {
    status = loadFromYaml(
        text, "fuzz.yaml", [](const char*) -> const char* { return nullptr; }, &settings, nullptr, &noVariables);
  } catch (...) {
    check(false);  // the library promises no exception
  }
  if (!status.isOk()) {
    check(!status.message().empty() && status.message().find("fuzz.yaml") != std::string::npos);
    const std::vector<KeyInfo> got = describe(settings), defaults = describe(Settings{});
    check(got.size() == defaults.size());
    for (size_t i = 0; i < got.size(); ++i) check(got[i].value == defaults[i].value);
    return 0;
  }
  if (settings.mesh.empty()) return 0;
  long long world = 1;
  for (const MeshDim& d : settings.mesh) world *= d.size < 0 ? 2 : d.size;
  if (world > 4096) return 0;
  std::vector<int> sizes;
  check(meshSizes(settings.mesh, world, &sizes).isOk());
  std::vector<int> all(static_cast<size_t>(world));
  for (int i = 0; i < world; ++i) all[static_cast<size_t>(i)] = i;
  for (int me : {0, static_cast<int>(world / 2), static_cast<int>(world - 1)}) {
    for (int color : {0, 1, 7, 8192, 2147483647}) {
      MeshSplit child;
      if (!resolveMeshSplit(settings, static_cast<int>(world), all, me, color, me, &child).isOk()) continue;
      check(child.rank >= 0 && static_cast<size_t>(child.rank) < child.members.size());
      check(child.members[static_cast<size_t>(child.rank)] == me);
      for (int m : child.members) check(m >= 0 && m < world);
    }
  }
  return 0;
}

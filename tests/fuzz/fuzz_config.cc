// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: loadFromYaml on arbitrary text (a RANKLENS_CONFIG file: written by hand, often wrong). Whatever
// the text, no exception leaves the config library and the answer is either settings or one error that names the
// file; a refusal leaves every setting at its default.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "ranklens/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::config;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string> noVariables;
  LoadResult r;
  try {
    r = loadFromYaml(text, "fuzz.yaml", [](const char*) -> const char* { return nullptr; }, &noVariables);
  } catch (...) {
    check(false);  // the library promises no exception
  }
  if (!r.ok) {
    check(!r.error.empty() && r.error.find("fuzz.yaml") != std::string::npos);
    const std::vector<KeyInfo> got = describe(r.settings), defaults = describe(Settings{});
    check(got.size() == defaults.size());
    for (size_t i = 0; i < got.size(); ++i) check(got[i].value == defaults[i].value);
  }
  return 0;
}

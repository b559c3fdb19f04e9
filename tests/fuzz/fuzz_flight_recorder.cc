// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parseDump on arbitrary bytes (PyTorch Flight Recorder dumps come from other machines; a pickle
// is read by a restricted reader that never imports or calls). What it accepts is a version 2.x dump whose entries
// each have a known state and non-negative shapes; what it refuses says where and why, naming the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fr_dump.h"
#include "fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::fr;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Dump dump;
  if (const ranklens::Status parsed = parseDump(bytes, "fuzz/rank_3", -1, &dump); !parsed.isOk()) {
    check(!parsed.message().empty() && parsed.message().rfind("fuzz/rank_3", 0) == 0);
    return 0;
  }
  check(dump.versionMajor == kSupportedMajor && dump.rank == 3);
  check(dump.format == "pickle" || dump.format == "json");
  for (const Entry& e : dump.entries) {
    check(e.state == "scheduled" || e.state == "started" || e.state == "completed");
    check(!e.profilingName.empty() || e.profilingName.empty());
    for (const auto& shape : e.inputSizes)
      for (int64_t d : shape) check(d >= 0);
    for (const auto& shape : e.outputSizes)
      for (int64_t d : shape) check(d >= 0);
  }
  // The generic readers on the same bytes: a value tree or a message, never a crash (cycles included).
  Pickle p;
  if (const ranklens::Status read = readPickle(data, size, "fuzz", &p); !read.isOk())
    check(!read.message().empty());
  else
    check(p.root != nullptr);
  return 0;
}

// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: parseManifest on arbitrary bytes. A manifest that parses is a 1.x ranklens-trace manifest, and
// writing it back and parsing again gives the same fields.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "ranklens/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ranklens::trace;
  Manifest manifest;
  std::string reason;
  if (!(reason = parseManifest(data, size, &manifest).message()).empty()) {
    check(!reason.empty());
    return 0;
  }
  check(manifest.format == kFormatName);
  check(manifest.version_major == kFormatMajor);
  msgpack::sbuffer again;
  msgpack::pack(again, manifest);
  Manifest back;
  check(
      (reason = parseManifest(reinterpret_cast<const uint8_t*>(again.data()), again.size(), &back).message()).empty());
  msgpack::sbuffer twice;
  msgpack::pack(twice, back);
  check(again.size() == twice.size() && memcmp(again.data(), twice.data(), again.size()) == 0);
  return 0;
}

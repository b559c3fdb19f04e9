// SPDX-License-Identifier: Apache-2.0
// The fuzz seed corpora (tests/fuzz/corpus/<target>/) stay useful: every committed seed is under 4 KiB and is a
// valid input of its target (parsed without a problem, except the seed named truncated-*, which must read as a
// truncation); and make_fuzz_seeds, which produced them from real writer output, still produces such seeds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "../fuzz/payload_seed_layout.h"
#include "trace_test_util.h"

#ifndef RANKLENS_FUZZ_CORPUS
#error "RANKLENS_FUZZ_CORPUS must name tests/fuzz/corpus"
#endif
#ifndef RANKLENS_MAKE_FUZZ_SEEDS
#error "RANKLENS_MAKE_FUZZ_SEEDS must name the make_fuzz_seeds executable"
#endif

namespace {

using namespace tracetest;

void checkCorpus(const std::string& corpus) {
  const std::vector<std::string> expectedTargets = {"fuzz_manifest", "fuzz_payload", "fuzz_segment"};
  for (const std::string& target : expectedTargets) {
    const std::string dir = corpus + "/" + target;
    const auto seeds = listDir(dir);
    EXPECT_GE(seeds.size(), 3u) << dir;
    for (const std::string& name : seeds) {
      SCOPED_TRACE(dir + "/" + name);
      const std::string bytes = readAll(dir + "/" + name);
      EXPECT_LT(bytes.size(), 4096u);
      const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
      if (target == "fuzz_segment") {
        Problem problem;
        size_t records = 0;
        const bool ok = parseSegment(
            data, bytes.size(), 0, name, Limits{},
            [&](RecordType, const msgpack::object&, const Location&) { return ++records, true; }, &problem);
        if (name.rfind("truncated", 0) == 0) {
          EXPECT_FALSE(ok);
          EXPECT_TRUE(problem.truncated) << problem.describe();
          EXPECT_GT(records, 3u);
        } else {
          EXPECT_TRUE(ok) << problem.describe();
          if (name.rfind("header-only", 0) != 0) EXPECT_GT(records, 3u);
        }
      } else if (target == "fuzz_payload") {
        ASSERT_GE(bytes.size(), fuzz_layout::kPayloadSeedHeader);
        const PayloadRef ref = fuzz_layout::payloadSeedRef(data, bytes.size());
        Limits limits;
        limits.maxPayloadBytes = 1u << 20;  // what fuzz_payload uses
        std::vector<uint8_t> out;
        std::string reason;
        EXPECT_TRUE((reason = decodePayload(data + 8, bytes.size() - 8, ref, limits, &out).message()).empty())
            << reason;
        EXPECT_EQ(out.size(), ref.rawBytes);
      } else {
        Manifest manifest;
        std::string reason;
        EXPECT_TRUE((reason = parseManifest(data, bytes.size(), &manifest).message()).empty()) << reason;
      }
    }
  }
}

TEST(TraceFuzzSeeds, CommittedSeedsAreValidInputs) { checkCorpus(RANKLENS_FUZZ_CORPUS); }

TEST(TraceFuzzSeeds, GeneratorStillProducesValidSeeds) {
  TempDir tmp;
  const std::string command = std::string(RANKLENS_MAKE_FUZZ_SEEDS) + " " + tmp.path() + " > /dev/null";
  ASSERT_EQ(system(command.c_str()), 0) << command;
  checkCorpus(tmp.path());
  // The same seed names as committed (regenerate the corpus when this changes).
  for (const char* target : {"fuzz_manifest", "fuzz_payload", "fuzz_segment"})
    EXPECT_EQ(listDir(tmp / target), listDir(std::string(RANKLENS_FUZZ_CORPUS) + "/" + target)) << target;
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Value replay's payload prefetcher on a recorded trace written here: every payload comes back byte for byte, in
// order, skipped, out of order, larger than the arena, and with copies that take a while to release memory.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/payload_prefetcher.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"

namespace ranklens {
namespace trace {
namespace {

constexpr int kPayloads = 40;

std::vector<uint8_t> bytesOf(int i) {
  std::vector<uint8_t> v(static_cast<size_t>(1000 + 997 * (i % 7)) * ((i == 13) ? 64 : 1));  // #13 is large
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<uint8_t>(i * 31 + j * 7);
  return v;
}

std::string writeRecording() {
  const std::string dir = ::testing::TempDir() + "/prefetch-" + std::to_string(getpid()) + "/rank0";
  EXPECT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  Manifest m;
  m.mode = "record";
  std::string error;
  auto w = TraceWriter::create(dir, m, {}, &error);
  EXPECT_NE(w, nullptr) << error;
  for (int i = 0; i < kPayloads; ++i) {
    events::Call c;
    c.seq = static_cast<uint64_t>(i);
    c.op = static_cast<int>(events::Op::kAllReduce);
    c.datatype = 0;  // int8: count == bytes
    const auto data = bytesOf(i);
    c.count = data.size();
    c.bytes = data.size();
    w->append(RecordType::kCall, c);
    PayloadRef ref;
    ref.seq = c.seq;
    ref.op = c.op;
    ref.datatype = c.datatype;
    ref.count = data.size();
    EXPECT_TRUE(w->appendPayload(ref, data.data(), data.size(), BackPressure::kWait));
  }
  EXPECT_TRUE(w->close());
  return dir;
}

struct Fixture {
  std::unique_ptr<Recording> recording;
  void open() {
    std::string error;
    recording = Recording::open(writeRecording(), -1, &error);
    ASSERT_NE(recording, nullptr) << error;
  }
  std::atomic<int> allocations{0}, frees{0};
  PayloadPrefetcher::Alloc alloc() {
    return [this](size_t bytes) {
      ++allocations;
      return malloc(bytes);
    };
  }
  PayloadPrefetcher::Free release() {
    return [this](void* p) {
      ++frees;
      free(p);
    };
  }
};

void expectPayload(PayloadPrefetcher& p, const RecordedCall* call, int i, std::function<bool()> copied = nullptr) {
  PayloadPrefetcher::Staged staged;
  std::string error;
  ASSERT_TRUE(p.acquire(call, &staged, &error)) << error;
  const auto want = bytesOf(i);
  ASSERT_EQ(staged.bytes, want.size()) << i;
  EXPECT_EQ(memcmp(staged.data, want.data(), want.size()), 0) << i;
  p.release(call, std::move(copied));
}

TEST(PayloadPrefetcher, InOrderWithASmallArenaEvictionAndAnOversizedPayload) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  const auto& order = f.recording->payloadOrder();
  ASSERT_EQ(order.size(), static_cast<size_t>(kPayloads));
  PayloadPrefetcher::Options options;
  options.arenaBytes = 64 << 10;  // a handful of payloads; #13 (~64-448 KB) never fits
  options.threads = 3;
  {
    PayloadPrefetcher p(*f.recording, options, f.alloc(), f.release());
    for (int i = 0; i < kPayloads; ++i) {
      // Every third copy "completes" only after a few polls, as a CUDA event would.
      auto polls = std::make_shared<int>(i % 3 == 0 ? 3 : 0);
      expectPayload(p, order[i], i, [polls] { return (*polls)-- <= 0; });
    }
    const PrefetchStats s = p.stats();
    EXPECT_EQ(s.failures, 0u);
    EXPECT_GE(s.oversized, 1u);  // #13
    EXPECT_EQ(s.skipped, 0u);
  }
  EXPECT_EQ(f.allocations.load(), f.frees.load());  // the arena and every own allocation given back
}

TEST(PayloadPrefetcher, SkippedAndOutOfOrderCalls) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  const auto& order = f.recording->payloadOrder();
  PayloadPrefetcher::Options options;
  options.arenaBytes = 1 << 20;
  options.threads = 2;
  {
    PayloadPrefetcher p(*f.recording, options, f.alloc(), f.release());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the workers decode ahead
    expectPayload(p, order[0], 0);
    expectPayload(p, order[5], 5);   // 1..4 skipped by the program
    expectPayload(p, order[3], 3);   // and one of them asked for later after all
    for (int i = 6; i < kPayloads; ++i) expectPayload(p, order[i], i);
    EXPECT_GE(p.stats().skipped, 1u);
    EXPECT_EQ(p.stats().failures, 0u);
  }
  EXPECT_EQ(f.allocations.load(), f.frees.load());
}

TEST(PayloadPrefetcher, MaxPayloadBytesKeepsOnlyTheSmallOnes) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  const auto& order = f.recording->payloadOrder();
  PayloadPrefetcher::Options options;
  options.arenaBytes = 1 << 20;
  options.maxPayloadBytes = 2000;  // payloads i % 7 == 0 (1000 bytes, #13 aside) and nothing larger
  {
    PayloadPrefetcher p(*f.recording, options, f.alloc(), f.release());
    int small = 0;
    for (int i = 0; i < kPayloads; ++i) {
      if (bytesOf(i).size() <= options.maxPayloadBytes) {
        expectPayload(p, order[i], i);
        ++small;
        continue;
      }
      PayloadPrefetcher::Staged staged;
      std::string why;
      EXPECT_FALSE(p.acquire(order[i], &staged, &why)) << i;
      EXPECT_NE(why.find("no recorded payload"), std::string::npos) << why;
    }
    EXPECT_GT(small, 0);
    EXPECT_EQ(p.stats().decoded, static_cast<uint64_t>(small));  // the large ones were never decoded
  }
  EXPECT_EQ(f.allocations.load(), f.frees.load());
}

TEST(PayloadPrefetcher, ADamagedBlobIsAnErrorNamingTheFileNotACrash) {
  Fixture f;
  std::string error;
  const std::string dir = writeRecording();
  f.recording = Recording::open(dir, -1, &error);
  ASSERT_NE(f.recording, nullptr) << error;
  const RecordedCall* call = f.recording->payloadOrder()[2];
  // Flip a byte inside its compressed blob.
  const std::string file = dir + "/" + payloadName(call->payload->file);
  FILE* fp = fopen(file.c_str(), "r+b");
  ASSERT_NE(fp, nullptr);
  fseek(fp, static_cast<long>(call->payload->offset + call->payload->compressedBytes / 2), SEEK_SET);
  const int c = fgetc(fp);
  fseek(fp, static_cast<long>(call->payload->offset + call->payload->compressedBytes / 2), SEEK_SET);
  fputc(c ^ 0x5a, fp);
  fclose(fp);
  PayloadPrefetcher::Options options;
  options.threads = 1;
  PayloadPrefetcher p(*f.recording, options, f.alloc(), f.release());
  PayloadPrefetcher::Staged staged;
  EXPECT_FALSE(p.acquire(call, &staged, &error));
  EXPECT_NE(error.find(payloadName(call->payload->file)), std::string::npos) << error;
  expectPayload(p, f.recording->payloadOrder()[3], 3);  // the next one is fine
}

}  // namespace
}  // namespace trace
}  // namespace ranklens

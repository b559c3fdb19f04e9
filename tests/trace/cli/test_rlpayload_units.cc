// SPDX-License-Identifier: Apache-2.0
// Unit tests of rlpayload's pieces and of ranklens::trace::appendEditedPayload: the narrow-float conversions
// (exhaustive round trips, rounding, special values), ULP distances, statistics, .npy headers, and the edit API's
// guarantees (original blob untouched, manifest keys kept, refusals).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "dtype.h"
#include "npy.h"
#include "stats.h"
#include "trace_fixture.h"

using namespace rlpayload;
using namespace ranklens::trace;

namespace {

uint32_t floatBits(float f) {
  uint32_t b;
  memcpy(&b, &f, 4);
  return b;
}

TEST(Float16, SpecialValues) {
  EXPECT_EQ(halfToFloat(0x3C00), 1.0f);
  EXPECT_EQ(halfToFloat(0xC000), -2.0f);
  EXPECT_EQ(halfToFloat(0x7BFF), 65504.0f);
  EXPECT_EQ(halfToFloat(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(halfToFloat(0x03FF), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(halfToFloat(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(halfToFloat(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(halfToFloat(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(halfToFloat(0x7E00)));
  EXPECT_TRUE(std::isnan(halfToFloat(0x7C01)));
  EXPECT_EQ(floatBits(halfToFloat(0x8000)), 0x80000000u);  // -0
}

TEST(Float16, RoundTripsEveryPattern) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = halfToFloat(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    ASSERT_EQ(floatToHalf(f), b) << std::hex << b;
  }
}

TEST(Float16, RoundsToNearestEven) {
  EXPECT_EQ(floatToHalf(1.0 + std::ldexp(1.0, -11)), 0x3C00);      // tie -> even (down)
  EXPECT_EQ(floatToHalf(1.0 + 3 * std::ldexp(1.0, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(floatToHalf(1.0 + std::ldexp(1.0, -11) + 1e-12), 0x3C01);
  EXPECT_EQ(floatToHalf(65519.0), 0x7BFF);
  EXPECT_EQ(floatToHalf(65520.0), 0x7C00);  // halfway to the next binade: overflows to infinity
  EXPECT_EQ(floatToHalf(-1e9), 0xFC00);
  EXPECT_EQ(floatToHalf(std::ldexp(1.0, -25)), 0x0000);              // tie with 0 -> 0
  EXPECT_EQ(floatToHalf(std::ldexp(1.0, -25) * 1.0000001), 0x0001);  // just above: smallest subnormal
  EXPECT_EQ(floatToHalf(std::ldexp(1023.5, -24)), 0x0400);           // rounds up into the normals
}

TEST(Bfloat16, ValuesAndRoundTrip) {
  EXPECT_EQ(bfloat16ToFloat(0x3F80), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(0x7FC0)));
  EXPECT_EQ(bfloat16ToFloat(0x0001), std::ldexp(1.0f, -133));
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bfloat16ToFloat(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToBfloat16(f), b) << std::hex << b;
    }
  }
  EXPECT_EQ(floatToBfloat16(1.0 + std::ldexp(1.0, -8)), 0x3F80);  // tie -> even
  EXPECT_EQ(floatToBfloat16(std::numeric_limits<double>::max()), 0x7F80);
}

TEST(Float8E4M3, ValuesAndRoundTrip) {
  EXPECT_EQ(e4m3ToFloat(0x38), 1.0f);
  EXPECT_EQ(e4m3ToFloat(0x7E), 448.0f);  // largest
  EXPECT_EQ(e4m3ToFloat(0x78), 256.0f);  // exponent field 15 is an ordinary binade
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3ToFloat(0xFF)));
  EXPECT_EQ(e4m3ToFloat(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3ToFloat(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3ToFloat(0xB8), -1.0f);
  int nans = 0;
  for (uint32_t b = 0; b < 0x100; ++b) {
    const float f = e4m3ToFloat(static_cast<uint8_t>(b));
    EXPECT_FALSE(std::isinf(f));
    if (std::isnan(f)) {
      ++nans;
      continue;
    }
    ASSERT_EQ(floatToE4m3(f), b) << std::hex << b;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(floatToE4m3(464.0), 0x7E);  // tie between 448 and (NaN-coded) 480 -> 448
  EXPECT_EQ(floatToE4m3(470.0), 0x7F);  // beyond: NaN (no infinity, no saturation)
  EXPECT_EQ(floatToE4m3(INFINITY), 0x7F);
  EXPECT_EQ(floatToE4m3(-INFINITY), 0xFF);
}

TEST(Float8E5M2, ValuesAndRoundTrip) {
  EXPECT_EQ(e5m2ToFloat(0x3C), 1.0f);
  EXPECT_EQ(e5m2ToFloat(0x7B), 57344.0f);
  EXPECT_EQ(e5m2ToFloat(0x7C), std::numeric_limits<float>::infinity());
  EXPECT_EQ(e5m2ToFloat(0xFC), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(e5m2ToFloat(0x7D)));
  EXPECT_TRUE(std::isnan(e5m2ToFloat(0x7F)));
  EXPECT_EQ(e5m2ToFloat(0x01), std::ldexp(1.0f, -16));
  for (uint32_t b = 0; b < 0x100; ++b) {
    const float f = e5m2ToFloat(static_cast<uint8_t>(b));
    if (!std::isnan(f)) {
      ASSERT_EQ(floatToE5m2(f), b) << std::hex << b;
    }
  }
  EXPECT_EQ(floatToE5m2(61440.0), 0x7C);  // halfway above the largest: infinity
}

TEST(Ulp, OrderedRepresentation) {
  uint8_t a[8], b[8];
  auto f32 = [](uint8_t* p, float v) { memcpy(p, &v, 4); };
  f32(a, 1.0f);
  f32(b, std::nextafter(1.0f, 2.0f));
  EXPECT_EQ(ulpDistance(kFloat32, a, b), 1u);
  f32(a, 0.0f);
  f32(b, -0.0f);
  EXPECT_EQ(ulpDistance(kFloat32, a, b), 0u);
  f32(a, std::numeric_limits<float>::denorm_min());
  f32(b, -std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(ulpDistance(kFloat32, a, b), 2u);
  f32(a, std::numeric_limits<float>::max());
  f32(b, std::numeric_limits<float>::infinity());
  EXPECT_EQ(ulpDistance(kFloat32, a, b), 1u);
  const double x = -1.0, y = 1.0;
  memcpy(a, &x, 8);
  memcpy(b, &y, 8);
  EXPECT_EQ(ulpDistance(kFloat64, a, b), 2 * 0x3FF0000000000000ull);
  uint8_t h1[2] = {0x00, 0x3C}, h2[2] = {0x02, 0x3C};  // float16 1.0 and 1.0 + 2 ulp
  EXPECT_EQ(ulpDistance(kFloat16, h1, h2), 2u);
}

TEST(Elements, ParseAndFormat) {
  uint8_t e[8];
  std::string reason;
  ASSERT_TRUE(parseElement(kInt64, "-9223372036854775808", e, &reason));
  EXPECT_EQ(formatElement(kInt64, e), "-9223372036854775808");
  ASSERT_TRUE(parseElement(kUint64, "18446744073709551615", e, &reason));
  EXPECT_EQ(formatElement(kUint64, e), "18446744073709551615");
  EXPECT_FALSE(parseElement(kInt8, "128", e, &reason));
  EXPECT_FALSE(parseElement(kUint32, "-1", e, &reason));
  EXPECT_FALSE(parseElement(kInt32, "1.5", e, &reason));
  ASSERT_TRUE(parseElement(kFloat32, "-inf", e, &reason));
  EXPECT_EQ(formatElement(kFloat32, e), "-inf");
  ASSERT_TRUE(parseElement(kBfloat16, "nan", e, &reason));
  EXPECT_TRUE(isNan(kBfloat16, e));
  EXPECT_FALSE(parseElement(kFloat8e4m3, "inf", e, &reason));
  EXPECT_NE(reason.find("no infinity"), std::string::npos);
  ASSERT_TRUE(parseElement(kFloat32, "0.1", e, &reason));
  EXPECT_EQ(formatElement(kFloat32, e), "0.1");
  bool saturated = false;
  ASSERT_TRUE(storeDouble(kInt8, 300.0, e, &saturated));
  EXPECT_TRUE(saturated);
  EXPECT_EQ(formatElement(kInt8, e), "127");
  EXPECT_FALSE(storeDouble(kInt32, std::nan(""), e, nullptr));
}

TEST(Stats, FiniteValuesNanAndInf) {
  std::vector<float> v = {1, 2, NAN, 3, INFINITY, -INFINITY, 4, NAN};
  const TensorStats s = computeStats(kFloat32, reinterpret_cast<const uint8_t*>(v.data()), v.size());
  EXPECT_EQ(s.finite, 4u);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.stddev, std::sqrt(1.25));
  EXPECT_EQ(s.nan, 2u);
  EXPECT_EQ(s.firstNan, 2);
  EXPECT_EQ(s.posInf, 1u);
  EXPECT_EQ(s.negInf, 1u);
  EXPECT_EQ(s.firstInf, 4);
  std::vector<int64_t> big = {INT64_MAX, INT64_MAX - 1, INT64_MIN};
  const TensorStats t = computeStats(kInt64, reinterpret_cast<const uint8_t*>(big.data()), big.size());
  EXPECT_EQ(t.maxText, "9223372036854775807");
  EXPECT_EQ(t.minText, "-9223372036854775808");
}

TEST(Npy, HeaderIsVersion1AlignedAndParses) {
  const std::string h = npyHeader("<f4", 3);
  ASSERT_GE(h.size(), 10u);
  EXPECT_EQ(h.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(h[6], 1);
  EXPECT_EQ(h[7], 0);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_EQ(static_cast<size_t>(static_cast<uint8_t>(h[8]) | (static_cast<uint8_t>(h[9]) << 8)), h.size() - 10);
  std::vector<uint8_t> image(h.begin(), h.end());
  const float data[3] = {1, 2, 3};
  image.insert(image.end(), reinterpret_cast<const uint8_t*>(data), reinterpret_cast<const uint8_t*>(data) + 12);
  NpyArray a;
  std::string reason;
  ASSERT_TRUE(parseNpy(image, &a, &reason)) << reason;
  EXPECT_EQ(a.descr, "<f4");
  EXPECT_EQ(a.count, 3u);
  EXPECT_EQ(a.data.size(), 12u);
  image.pop_back();
  EXPECT_FALSE(parseNpy(image, &a, &reason));
}

// Found by fuzz_npy: a header naming its shape twice gave a shape whose product was not the element count.
TEST(Npy, AKeyGivenTwiceIsRefused) {
  for (const char* dict : {"{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), 'shape': (2, 3), }",
                           "{'descr': '<i8', 'descr': '<f8', 'fortran_order': False, 'shape': (6,), }",
                           "{'descr': '<i8', 'fortran_order': False, 'fortran_order': True, 'shape': (6,), }"}) {
    std::string header = std::string("\x93NUMPY\x01\x00", 8) + "xx" + dict + "\n";
    header[8] = static_cast<char>(header.size() - 10);
    header[9] = 0;
    std::vector<uint8_t> image(header.begin(), header.end());
    image.resize(image.size() + 48);
    NpyArray a;
    std::string reason;
    EXPECT_FALSE(parseNpy(image, &a, &reason)) << dict;
    EXPECT_NE(reason.find("duplicate key"), std::string::npos) << reason;
  }
}

// ------------------------------------------------------------------------------------------ appendEditedPayload

class EditApi : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = rltest::makeTempDir("edit");
    rltest::writeFixtureTrace(dir_);
    rank0_ = dir_ + "/rank0";
  }
  void TearDown() override { rltest::removeTree(dir_); }
  PayloadRef current(uint64_t comm, int op, int peer, uint64_t seq) {
    std::string error;
    std::unique_ptr<TraceReader> reader;
    error = TraceReader::open(rank0_, Limits{}, &reader).message();
    EXPECT_TRUE(reader) << error;
    auto ref = reader->payload(comm, op, peer, seq);
    EXPECT_TRUE(ref.has_value());
    return ref.value_or(PayloadRef{});
  }
  std::string dir_, rank0_;
};

TEST_F(EditApi, AppendsNewBlobReferenceAndEditKeepingTheOriginal) {
  const auto before = rltest::readBytes(rank0_ + "/pay-000000.rlp");
  const PayloadRef original = current(0, 0, -1, 0);
  std::vector<float> values = rltest::allReduceValues();
  values[5] = NAN;
  Edit edit;
  edit.tool = "test";
  edit.action = "nan";
  edit.detail = "element 5";
  edit.user = "tester";
  std::string error;
  ASSERT_TRUE(
      (error = appendEditedPayload(rank0_, original, values.data(), values.size() * 4, edit, 3).message()).empty())
      << error;
  EXPECT_EQ(rltest::readBytes(rank0_ + "/pay-000000.rlp"), before);
  ASSERT_TRUE(std::filesystem::exists(rank0_ + "/pay-000001.rlp"));

  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(rank0_, Limits{}, &reader).message();
  ASSERT_TRUE(reader) << error;
  EXPECT_FALSE(reader->indexRebuilt());  // the index was rewritten by the edit
  EXPECT_EQ(reader->manifest().payload_files, 2u);
  EXPECT_TRUE(reader->manifest().closed);
  auto ref = reader->payload(0, 0, -1, 0);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->file, 1u);
  EXPECT_EQ(ref->offset, kFileHeaderBytes);
  EXPECT_EQ(ref->count, 64u);
  std::vector<uint8_t> bytes;
  Problem problem;
  ASSERT_TRUE(reader->readPayload(*ref, &bytes, &problem)) << problem.describe();
  ASSERT_EQ(bytes.size(), 256u);
  EXPECT_EQ(memcmp(bytes.data(), values.data(), 20), 0);
  EXPECT_TRUE(std::isnan(reinterpret_cast<const float*>(bytes.data())[5]));
  // The original blob is still readable through the original reference.
  ASSERT_TRUE(reader->readPayload(original, &bytes, &problem)) << problem.describe();

  const auto records = rltest::scanRecords(rank0_);
  ASSERT_GE(records.size(), 2u);
  ASSERT_EQ(records[records.size() - 2].type, RecordType::kPayloadRef);
  ASSERT_EQ(records.back().type, RecordType::kEdit);
  const auto e = records.back().body.get().as<Edit>();
  EXPECT_EQ(e.commId, 0u);
  EXPECT_EQ(e.seq, 0u);
  EXPECT_EQ(e.tool, "test");
  EXPECT_EQ(e.user, "tester");
  EXPECT_GT(e.timeNs, 0);
  EXPECT_EQ(e.op, 0);  // the Edit names the call exactly
  EXPECT_EQ(e.peer, -1);
}

TEST_F(EditApi, EditsARecvByPeer) {
  const PayloadRef original = current(2, 9, 1, 0);  // comm 2 Recv from peer 1, seq 0
  ASSERT_EQ(original.count, 8u);
  std::vector<float> values(8, -1.0f);
  std::string error;
  ASSERT_TRUE((error = appendEditedPayload(rank0_, original, values.data(), 32, Edit{}, 3).message()).empty()) << error;
  const auto records = rltest::scanRecords(rank0_);
  const auto e = records.back().body.get().as<Edit>();
  EXPECT_EQ(e.commId, 2u);
  EXPECT_EQ(e.op, 9);
  EXPECT_EQ(e.peer, 1);
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(rank0_, Limits{}, &reader).message();
  ASSERT_TRUE(reader) << error;
  auto ref = reader->payload(2, 9, 1, 0);
  ASSERT_TRUE(ref);
  EXPECT_EQ(ref->file, 1u);
  EXPECT_EQ(ref->peer, 1);
  EXPECT_EQ(reader->payload(0, 0, -1, 0)->file, 0u);  // other calls keep their payloads
}

TEST_F(EditApi, KeepsUnknownManifestKeys) {
  // A newer 1.y writer may have added keys: an edit must carry them over.
  auto data = rltest::readBytes(rank0_ + "/manifest.msgpack");
  msgpack::object_handle h = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size());
  const msgpack::object& map = h.get();
  msgpack::sbuffer buf;
  msgpack::packer<msgpack::sbuffer> pk(buf);
  pk.pack_map(map.via.map.size + 1);
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    pk.pack(map.via.map.ptr[i].key);
    pk.pack(map.via.map.ptr[i].val);
  }
  pk.pack(std::string("future_key"));
  pk.pack(std::string("kept"));
  rltest::writeBytes(rank0_ + "/manifest.msgpack", std::vector<uint8_t>(buf.data(), buf.data() + buf.size()));

  const PayloadRef original = current(1, 0, -1, 0);
  std::vector<int32_t> ints(16, 7);
  std::string error;
  ASSERT_TRUE(
      (error = appendEditedPayload(rank0_, original, ints.data(), ints.size() * 4, Edit{}, 1).message()).empty())
      << error;
  data = rltest::readBytes(rank0_ + "/manifest.msgpack");
  h = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size());
  std::map<std::string, msgpack::object> keys;
  h.get().convert(keys);
  ASSERT_TRUE(keys.count("future_key"));
  EXPECT_EQ(keys.at("future_key").as<std::string>(), "kept");
  EXPECT_EQ(keys.at("payload_files").as<uint32_t>(), 2u);
  EXPECT_EQ(keys.at("closed").as<bool>(), true);
}

TEST_F(EditApi, RefusesPartialElementsAndStaleReferences) {
  const PayloadRef original = current(0, 0, -1, 0);
  std::vector<uint8_t> bytes(255);
  std::string error;
  EXPECT_FALSE(
      (error = appendEditedPayload(rank0_, original, bytes.data(), bytes.size(), Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("not a whole number of 4-byte elements"), std::string::npos) << error;
  // bfloat16: 2-byte elements
  const PayloadRef b16 = current(0, 0, -1, 1);
  EXPECT_FALSE((error = appendEditedPayload(rank0_, b16, bytes.data(), 63, Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("2-byte"), std::string::npos) << error;

  bytes.resize(256);
  ASSERT_TRUE((error = appendEditedPayload(rank0_, original, bytes.data(), bytes.size(), Edit{}, 3).message()).empty())
      << error;
  // `original` is no longer the call's payload: a second edit based on it would silently undo the first.
  EXPECT_FALSE(
      (error = appendEditedPayload(rank0_, original, bytes.data(), bytes.size(), Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("not the call's current payload"), std::string::npos) << error;
  PayloadRef missing = original;
  missing.seq = 99;
  EXPECT_FALSE((error = appendEditedPayload(rank0_, missing, bytes.data(), bytes.size(), Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("no payload recorded"), std::string::npos) << error;
}

TEST_F(EditApi, RefusesALastSegmentWithATruncatedFrame) {
  const PayloadRef original = current(0, 0, -1, 0);
  const std::string seg = rank0_ + "/seg-000000.rls";
  auto data = rltest::readBytes(seg);
  data.resize(data.size() - 3);  // a torn last frame, as a crash leaves it
  rltest::writeBytes(seg, data);
  std::vector<float> values(64, 1.0f);
  std::string error;
  EXPECT_FALSE((error = appendEditedPayload(rank0_, original, values.data(), 256, Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("seg-000000.rls: offset "), std::string::npos) << error;
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;
  EXPECT_FALSE(std::filesystem::exists(rank0_ + "/pay-000001.rlp"));  // nothing written
  EXPECT_EQ(rltest::readBytes(seg), data);
}

TEST_F(EditApi, RefusesACorruptLastSegmentAndUnknownDatatypes) {
  const PayloadRef original = current(0, 0, -1, 0);
  std::vector<float> values(64, 1.0f);
  std::string error;
  PayloadRef bogus = original;
  bogus.datatype = 42;
  EXPECT_FALSE((error = appendEditedPayload(rank0_, bogus, values.data(), 256, Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("not an NCCL datatype"), std::string::npos) << error;

  const std::string seg = rank0_ + "/seg-000000.rls";
  auto data = rltest::readBytes(seg);
  data[data.size() - 2] ^= 0xFF;  // inside the last frame's body
  rltest::writeBytes(seg, data);
  EXPECT_FALSE((error = appendEditedPayload(rank0_, original, values.data(), 256, Edit{}, 3).message()).empty());
  EXPECT_NE(error.find("corrupt"), std::string::npos) << error;
  EXPECT_NE(error.find("CRC-32 mismatch"), std::string::npos) << error;
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// decodePayloadStreaming (value replay's reader for blobs over TraceReader::kStreamingBlobBytes) against the whole-
// blob decoder: the same bytes from blobs of raw and of compressed zstd blocks, read in pieces of every size from the
// frame header's up; the same verdict on damaged, truncated and overlong blobs; the reader's refusals name the file
// and offset.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "trace_test_util.h"

namespace tracetest {
namespace {

constexpr size_t kPieces[] = {18, 1000, 65536, TraceReader::kStreamingPieceBytes};

BlobSource memorySource(const std::string& blob) {
  return [&blob](uint64_t at, uint8_t* into, size_t bytes) {
    if (at > blob.size() || bytes > blob.size() - at) return false;
    memcpy(into, blob.data() + at, bytes);
    return true;
  };
}

bool wholeDecode(const std::string& blob, const PayloadRef& ref, std::vector<uint8_t>* out, std::string* reason) {
  out->assign(ref.rawBytes, 0);
  return (*reason = decodePayloadInto(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), ref, Limits{},
                                      out->data(), out->size())
                        .message())
      .empty();
}

bool streamDecode(const std::string& blob, const PayloadRef& ref, size_t piece, std::vector<uint8_t>* out,
                  std::string* reason) {
  out->assign(ref.rawBytes, 0);
  return (*reason =
              decodePayloadStreaming(memorySource(blob), blob.size(), ref, Limits{}, out->data(), out->size(), piece)
                  .message())
      .empty();
}

class StreamingDecode : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/streaming-" + std::to_string(getpid());
    ASSERT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0);
    std::mt19937 random(7);
    // 3 MiB of random bytes (zstd stores them as raw blocks) and 3 MiB of gradient-like floats at level 3
    // (compressed blocks): both blobs larger than kStreamingBlobBytes.
    std::vector<uint8_t> raw(3u << 20);
    for (auto& b : raw) b = static_cast<uint8_t>(random());
    std::vector<uint8_t> floats(3u << 20);
    std::normal_distribution<float> gradient(0.0f, 1e-3f);
    for (size_t i = 0; i + 4 <= floats.size(); i += 4) {
      const float v = gradient(random);
      memcpy(&floats[i], &v, 4);
    }
    payloads_ = {raw, floats};
    int seq = 0;
    for (int level : {-1, 3}) {
      WriterOptions options;
      options.zstdLevel = level;
      std::string error;
      std::unique_ptr<TraceWriter> writer;
      error = TraceWriter::create(dir_ + "/level" + std::to_string(level), Manifest{}, options, &writer).message();
      ASSERT_NE(writer, nullptr) << error;
      PayloadRef ref;
      ref.seq = static_cast<uint64_t>(seq);
      ref.datatype = 0;
      ref.count = payloads_[seq].size();
      ASSERT_TRUE(writer->appendPayload(ref, payloads_[seq].data(), payloads_[seq].size()));
      ASSERT_TRUE(writer->close().isOk()) << writer->lastError();
      ++seq;
    }
  }
  void TearDown() override { EXPECT_EQ(system(("rm -rf '" + dir_ + "'").c_str()), 0); }
  // The one payload's reference and blob in the trace written at `level`.
  void blobOf(int level, std::unique_ptr<TraceReader>* reader, PayloadRef* ref, std::string* blob) {
    std::string error;
    error = TraceReader::open(dir_ + "/level" + std::to_string(level), Limits{}, reader).message();
    ASSERT_NE(*reader, nullptr) << error;
    const auto refs = (*reader)->payloads();
    ASSERT_EQ(refs.size(), 1u);
    *ref = refs[0];
    ASSERT_GT(ref->compressedBytes, TraceReader::kStreamingBlobBytes);
    *blob = readRange(dir_ + "/level" + std::to_string(level) + "/" + payloadName(ref->file), ref->offset,
                      ref->compressedBytes);
    ASSERT_EQ(blob->size(), ref->compressedBytes);
  }
  std::string dir_;
  std::vector<std::vector<uint8_t>> payloads_;
};

TEST_F(StreamingDecode, TheSameBytesAsTheWholeBlobInPiecesOfEverySize) {
  for (int level : {-1, 3}) {
    SCOPED_TRACE("level " + std::to_string(level));
    std::unique_ptr<TraceReader> reader;
    PayloadRef ref;
    std::string blob;
    ASSERT_NO_FATAL_FAILURE(blobOf(level, &reader, &ref, &blob));
    const std::vector<uint8_t>& want = payloads_[level == -1 ? 0 : 1];
    std::vector<uint8_t> whole;
    Problem problem;
    ASSERT_TRUE(reader->readPayload(ref, &whole, &problem)) << problem.describe();
    EXPECT_EQ(whole, want);
    std::vector<uint8_t> into(ref.rawBytes);
    ASSERT_TRUE(reader->readPayload(ref, into.data(), into.size(), &problem)) << problem.describe();  // streamed
    EXPECT_EQ(into, want);
    for (size_t piece : kPieces) {
      std::vector<uint8_t> out;
      std::string reason;
      EXPECT_TRUE(streamDecode(blob, ref, piece, &out, &reason)) << "piece " << piece << ": " << reason;
      EXPECT_EQ(out, want) << "piece " << piece;
    }
  }
}

TEST_F(StreamingDecode, RefusesWhatTheWholeBlobDecoderRefuses) {
  std::unique_ptr<TraceReader> reader;
  PayloadRef ref;
  std::string blob;
  ASSERT_NO_FATAL_FAILURE(blobOf(3, &reader, &ref, &blob));
  // One bit flipped at positions spread over the blob: the header, both sides of every piece boundary, the
  // checksum at the end.
  std::vector<size_t> positions;
  for (size_t pos = 0; pos < 24; ++pos) positions.push_back(pos);
  for (size_t at = TraceReader::kStreamingPieceBytes; at < blob.size(); at += TraceReader::kStreamingPieceBytes)
    for (size_t pos : {at - 2, at - 1, at, at + 1}) positions.push_back(pos);
  for (size_t pos = 0; pos < blob.size(); pos += blob.size() / 17) positions.push_back(pos);
  for (size_t back = 1; back <= 8; ++back) positions.push_back(blob.size() - back);
  std::vector<size_t> accepted;
  for (size_t pos : positions) {
    std::string damaged = blob;
    const int bit = pos == 4 ? 5 : static_cast<int>(pos % 8);  // not the frame header's unused bit
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
    std::vector<uint8_t> whole, streamed;
    std::string wholeWhy, streamWhy;
    const bool wholeOk = wholeDecode(damaged, ref, &whole, &wholeWhy);
    for (size_t piece : {size_t{1000}, TraceReader::kStreamingPieceBytes}) {
      const bool streamOk = streamDecode(damaged, ref, piece, &streamed, &streamWhy);
      EXPECT_EQ(streamOk, wholeOk) << "byte " << pos << ", piece " << piece << ": " << wholeWhy << " / " << streamWhy;
      if (streamOk)
        EXPECT_EQ(streamed, whole) << "byte " << pos;
      else
        EXPECT_FALSE(streamWhy.empty());
    }
    if (wholeOk) {
      // zstd ignores a few bits (unused ones of a header); the bytes must then be the payload's own.
      EXPECT_EQ(whole, payloads_[1]) << "byte " << pos;
      accepted.push_back(pos);
    }
  }
  EXPECT_LE(accepted.size(), 2u) << "flipped bits that left a valid blob: " << ::testing::PrintToString(accepted);

  std::vector<uint8_t> out;
  std::string why;
  // Shorter than its frame, and longer.
  PayloadRef shorter = ref;
  shorter.compressedBytes = blob.size() - 1;
  EXPECT_FALSE(streamDecode(blob.substr(0, blob.size() - 1), shorter, 65536, &out, &why));
  EXPECT_NE(why.find("damaged zstd frame"), std::string::npos) << why;
  PayloadRef longer = ref;
  longer.compressedBytes = blob.size() + 5;
  EXPECT_FALSE(streamDecode(blob + std::string(5, '\0'), longer, 65536, &out, &why));
  EXPECT_EQ(why, "blob holds 5 bytes after its frame");
  EXPECT_FALSE(wholeDecode(blob + std::string(5, '\0'), longer, &out, &why));
  // A source that fails, room of another size, a reference of another size.
  const BlobSource firstPieceOnly = [&blob](uint64_t at, uint8_t* into, size_t bytes) {
    if (at > 0) return false;
    memcpy(into, blob.data(), bytes);
    return true;
  };
  out.assign(ref.rawBytes, 0);
  EXPECT_FALSE(
      (why =
           decodePayloadStreaming(firstPieceOnly, blob.size(), ref, Limits{}, out.data(), out.size(), 65536).message())
          .empty());
  EXPECT_EQ(why, "short read");
  EXPECT_FALSE(
      (why = decodePayloadStreaming(memorySource(blob), blob.size(), ref, Limits{}, out.data(), out.size() - 1, 65536)
                 .message())
          .empty());
  EXPECT_NE(why.find("room for " + std::to_string(ref.rawBytes - 1)), std::string::npos) << why;
  EXPECT_FALSE(
      (why = decodePayloadStreaming(memorySource(blob), blob.size() - 1, ref, Limits{}, out.data(), out.size(), 65536)
                 .message())
          .empty());
  // A CRC-32 in the reference that is not the payload's.
  PayloadRef otherCrc = ref;
  otherCrc.rawCrc32 ^= 1;
  EXPECT_FALSE(streamDecode(blob, otherCrc, 65536, &out, &why));
  EXPECT_EQ(why, "CRC-32 of the decompressed bytes does not match");
}

// A frame (no checksum, as writers make them since 1.9) whose 2 bytes are a raw block followed by an empty
// compressed block, then an empty last raw block: zstd's one-shot decoder (and its streaming decoder, when it holds
// the whole frame) calls it corrupt, its block-by-block route accepts it (found by fuzz_payload). Every path gives
// one verdict, in memory and in pieces of every size, and what it accepts is the payload's bytes (rawCrc32).
TEST(StreamingDecodeVerdicts, AnEmptyCompressedBlockGetsOneVerdictOnEveryPath) {
  const std::string blob = std::string("\x28\xb5\x2f\xfd", 4) + std::string("\x20\x02", 2) +  // magic, header, size 2
                           std::string("\x10\x00\x00", 3) + std::string("\x07\x09", 2) +      // raw block of 2 bytes
                           std::string("\x04\x00\x00", 3) +                                   // empty compressed block
                           std::string("\x01\x00\x00", 3);                                    // empty last raw block
  PayloadRef ref;
  ref.rawBytes = 2;
  ref.compressedBytes = blob.size();
  ref.rawCrc32 = crc32Bytes("\x07\x09", 2);
  std::vector<uint8_t> whole, streamed, decoded;
  std::string why;
  const bool wholeOk = wholeDecode(blob, ref, &whole, &why);
  EXPECT_TRUE(wholeOk) << why;
  EXPECT_EQ(whole, (std::vector<uint8_t>{7, 9}));
  EXPECT_EQ(
      (why =
           decodePayload(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), ref, Limits{}, &decoded).message())
          .empty(),
      wholeOk);
  EXPECT_EQ(decoded, whole);
  for (size_t piece : {size_t{18}, size_t{19}, size_t{1000}}) {
    EXPECT_EQ(streamDecode(blob, ref, piece, &streamed, &why), wholeOk) << "piece " << piece << ": " << why;
    EXPECT_EQ(streamed, whole) << "piece " << piece;
  }
  ref.rawCrc32 ^= 1;  // and a CRC-32 that is not the bytes' is refused on every path
  EXPECT_FALSE(wholeDecode(blob, ref, &whole, &why));
  EXPECT_FALSE(streamDecode(blob, ref, 18, &streamed, &why));
}

// Format 1.10: a payload compressed straight out of the lender's memory is one zstd frame per MiB. Every
// path reads the same bytes from it, in memory and in pieces of every size (pieces that end inside a frame's header
// among them), and gives one verdict on blobs cut at a frame's end, overlong, or declaring another size in all.
TEST(StreamingDecodeFrames, ABlobOfAFramePerBlockReadsTheSameOnEveryPath) {
  const std::string dir = ::testing::TempDir() + "/frames-" + std::to_string(getpid());
  ASSERT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
  std::mt19937 random(3);
  std::normal_distribution<float> gradient(0.0f, 1e-3f);
  std::vector<float> values((3u << 20) / 4 + 5);  // 3 MiB and 20 bytes: 4 frames
  for (auto& v : values) v = gradient(random);
  {
    WriterOptions options;
    options.shuffle = WriterOptions::Shuffle::kAlways;
    std::string error;
    std::unique_ptr<TraceWriter> writer;
    error = TraceWriter::create(dir, Manifest{}, options, &writer).message();
    ASSERT_NE(writer, nullptr) << error;
    PayloadRef ref;
    ref.datatype = 7;  // float32
    ref.count = values.size();
    ASSERT_TRUE(writer->appendPayloadBorrowed(ref, values.data(), values.size() * 4, BackPressure::kWait, [] {}));
    ASSERT_TRUE(writer->close().isOk()) << writer->lastError();
  }
  std::string error;
  std::unique_ptr<TraceReader> reader;
  error = TraceReader::open(dir, Limits{}, &reader).message();
  ASSERT_NE(reader, nullptr) << error;
  ASSERT_EQ(reader->payloads().size(), 1u);
  const PayloadRef ref = reader->payloads()[0];
  const std::string blob = readRange(dir + "/" + payloadName(ref.file), ref.offset, ref.compressedBytes);
  const std::vector<size_t> frameEnds = payloadFrameEnds(dir, ref);
  ASSERT_EQ(frameEnds.size(), 4u);
  ASSERT_EQ(frameEnds.back(), blob.size());
  std::vector<uint8_t> want(values.size() * 4);
  memcpy(want.data(), values.data(), want.size());
  std::vector<uint8_t> whole, streamed;
  Problem problem;
  ASSERT_TRUE(reader->readPayload(ref, &whole, &problem)) << problem.describe();
  EXPECT_EQ(whole, want);
  std::vector<size_t> pieces(std::begin(kPieces), std::end(kPieces));
  pieces.push_back(frameEnds[0] + 2);  // the second frame's header cut by the piece's end
  for (size_t piece : pieces) {
    std::string why;
    EXPECT_TRUE(streamDecode(blob, ref, piece, &streamed, &why)) << "piece " << piece << ": " << why;
    EXPECT_EQ(streamed, want) << "piece " << piece;
  }
  // Refused alike: the last frame cut off, 5 bytes more, a reference that says a frame less or a byte more.
  struct Bad {
    std::string name, blob;
    PayloadRef ref;
  };
  PayloadRef cut = ref, longer = ref, fewer = ref, oneMore = ref;
  cut.compressedBytes = frameEnds[2];
  longer.compressedBytes = blob.size() + 5;
  fewer.rawBytes -= 20;
  oneMore.rawBytes += 1;
  const std::vector<Bad> bad = {{"cut", blob.substr(0, frameEnds[2]), cut},
                                {"longer", blob + std::string(5, '\0'), longer},
                                {"fewer", blob, fewer},
                                {"one more", blob, oneMore}};
  for (const Bad& b : bad) {
    std::string wholeWhy;
    EXPECT_FALSE(wholeDecode(b.blob, b.ref, &whole, &wholeWhy)) << b.name;
    EXPECT_FALSE(wholeWhy.empty()) << b.name;
    for (size_t piece : pieces) {
      std::string why;
      EXPECT_FALSE(streamDecode(b.blob, b.ref, piece, &streamed, &why)) << b.name << ", piece " << piece;
      EXPECT_FALSE(why.empty()) << b.name;
    }
  }
  std::string why;
  EXPECT_FALSE(wholeDecode(blob, oneMore, &whole, &why));
  EXPECT_EQ(why, "zstd frames declare " + std::to_string(ref.rawBytes) + " bytes in all, reference says " +
                     std::to_string(oneMore.rawBytes));
  EXPECT_FALSE(wholeDecode(blob, fewer, &whole, &why));  // the frames before the last hold the payload: then 1 more
  EXPECT_EQ(why, "blob holds " + std::to_string(blob.size() - frameEnds[2]) + " bytes after its frame");
  EXPECT_FALSE(wholeDecode(blob + std::string(5, '\0'), longer, &whole, &why));
  EXPECT_EQ(why, "blob holds 5 bytes after its frame");
  // Every frame must declare its content size, the second as the first, whichever path reads it.
  const std::string first(reinterpret_cast<const char*>(want.data()), 1000),
      second(reinterpret_cast<const char*>(want.data()) + 1000, 2000);
  const std::string sizeless = zstdFrame(first, 3, true, false) + zstdFrame(second, 3, /*contentSize=*/false, false);
  PayloadRef two;
  two.rawBytes = 3000;
  two.compressedBytes = sizeless.size();
  two.rawCrc32 = crc32Bytes(want.data(), 3000);
  EXPECT_FALSE(wholeDecode(sizeless, two, &whole, &why));
  EXPECT_EQ(why, "zstd frame without a content size");
  for (size_t piece : {size_t{18}, size_t{97}, size_t{65536}}) {
    EXPECT_FALSE(streamDecode(sizeless, two, piece, &streamed, &why)) << "piece " << piece;
    EXPECT_EQ(why, "zstd frame without a content size") << "piece " << piece;
  }
  const std::string sized = zstdFrame(first, 3, true, false) + zstdFrame(second, 3, true, false);  // and with it
  two.compressedBytes = sized.size();
  EXPECT_TRUE(wholeDecode(sized, two, &whole, &why)) << why;
  EXPECT_TRUE(streamDecode(sized, two, 18, &streamed, &why)) << why;
  EXPECT_EQ(streamed, std::vector<uint8_t>(want.begin(), want.begin() + 3000));
  EXPECT_EQ(system(("rm -rf '" + dir + "'").c_str()), 0);
}

// Found by fuzz_payload: a 15-byte zstd frame that declares 35 bytes and ends after none, followed by a
// legacy-format frame that declares 64, the reference's size. By the declared sizes (99 bytes) the blob is refused;
// decoded piece by piece it made 64 bytes with the right CRC, and was accepted when the blob came in one piece. Every
// path refuses it now: no frame may decode to other than what it declares.
TEST(StreamingDecodeFrames, AFrameThatDecodesToLessThanItDeclaresIsRefusedOnEveryPath) {
  const unsigned char bytes[] = {
      0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x23, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x27, 0xb5, 0x2f, 0xfd,
      0x20, 0x40, 0x00, 0x00, 0x00, 0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x40, 0x55, 0x01, 0x00, 0x02, 0x84, 0x09, 0x11, 0xe0,
      0xad, 0x19, 0x73, 0x0b, 0x52, 0xc1, 0x5a, 0x9d, 0x68, 0xba, 0x0e, 0x41, 0x98, 0x7c, 0x49, 0x52, 0x67, 0xbe, 0x5c,
      0x79, 0x72, 0xe4, 0xc7, 0x8d, 0x17, 0x27, 0x3e, 0x5c, 0x78, 0x70, 0xa0, 0x7a, 0x2a, 0xa7, 0x6a, 0x02, 0x00};
  const std::string blob(reinterpret_cast<const char*>(bytes), sizeof bytes);
  PayloadRef ref;
  ref.datatype = 0;  // int8
  ref.count = ref.rawBytes = 64;
  ref.rawCrc32 = 0xdb724133;
  ref.compressedBytes = blob.size();
  std::vector<uint8_t> out;
  std::string why;
  EXPECT_FALSE(wholeDecode(blob, ref, &out, &why));
  EXPECT_EQ(why, "zstd frames declare 99 bytes in all, reference says 64");
  for (size_t piece : {size_t{18}, size_t{24}, size_t{97}, size_t{65536}}) {
    EXPECT_FALSE(streamDecode(blob, ref, piece, &out, &why)) << "piece " << piece;
    EXPECT_FALSE(why.empty()) << "piece " << piece;
  }
  EXPECT_FALSE(streamDecode(blob, ref, 97, &out, &why));
  EXPECT_EQ(why, "zstd frame at byte 0 of the blob decodes to 0 bytes, declares 35");
  // The same first frame before a current-format frame of the whole payload: what the frames make adds up to the
  // reference and the CRC matches, what they declare does not.
  const std::string payload(64, 'p');
  const std::string current = blob.substr(0, 15) + zstdFrame(payload);
  ref.rawCrc32 = crc32Bytes(reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  ref.compressedBytes = current.size();
  EXPECT_FALSE(wholeDecode(current, ref, &out, &why));
  for (size_t piece : {size_t{18}, size_t{24}, size_t{97}, size_t{65536}}) {
    EXPECT_FALSE(streamDecode(current, ref, piece, &out, &why)) << "piece " << piece;
    EXPECT_EQ(why, "zstd frame at byte 0 of the blob decodes to 0 bytes, declares 35") << "piece " << piece;
  }
}

TEST_F(StreamingDecode, TheReaderNamesFileAndOffsetOfADamagedLargeBlob) {
  std::unique_ptr<TraceReader> reader;
  PayloadRef ref;
  std::string blob;
  ASSERT_NO_FATAL_FAILURE(blobOf(-1, &reader, &ref, &blob));
  const std::string path = dir_ + "/level-1/" + payloadName(ref.file);
  std::string file = readAll(path);
  file[ref.offset + blob.size() / 2] ^= 0x10;
  writeAll(path, file);
  std::vector<uint8_t> into(ref.rawBytes);
  Problem problem;
  EXPECT_FALSE(reader->readPayload(ref, into.data(), into.size(), &problem));
  EXPECT_EQ(problem.file, path);
  EXPECT_EQ(problem.offset, ref.offset);
  EXPECT_FALSE(problem.reason.empty());
  std::vector<uint8_t> whole;
  Problem wholeProblem;
  EXPECT_FALSE(reader->readPayload(ref, &whole, &wholeProblem));
  EXPECT_EQ(wholeProblem.file, path);
}

}  // namespace
}  // namespace tracetest

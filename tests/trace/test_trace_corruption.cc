// SPDX-License-Identifier: Apache-2.0
// Damaged trace directories (docs/trace-format.md, "Segment files", "Payload files", "index.msgpack", "Limits a
// reader enforces"): flipped bits and truncation at every position of a segment, wrong magic/version/index,
// absurd lengths, damaged payload blobs and decompression bombs, damaged index and manifest, missing segments.
// The reader must never crash, must report file, offset and reason, and must keep everything before the damage.
#define ZSTD_STATIC_LINKING_ONLY 1
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <zstd.h>

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "trace_test_util.h"

namespace {

using namespace tracetest;
using events::Call;
using events::Op;
using events::Stage;

constexpr int kAllReduce = static_cast<int>(Op::kAllReduce);
constexpr int kRecv = static_cast<int>(Op::kRecv);

// A closed trace of three segments (with an index) and two payload files; the fixture keeps a pristine copy and
// everything the reader sees in it.
class TraceCorruption : public testing::Test {
 protected:
  void SetUp() override {
    pristine_ = tmp_ / "pristine";
    dir_ = tmp_ / "rank0";
    std::mt19937_64 rng(42);
    WriterOptions options;
    options.segmentBytes = 300;
    options.payloadFileBytes = 600;
    auto writer = makeWriter(pristine_, options);
    ASSERT_NE(writer, nullptr);
    events::CommInit init;
    init.nranks = 4;
    init.rank = 1;
    init.how = "init";
    init.worldRanks = {0, 1, 2, 3};
    ASSERT_TRUE(writer->append(RecordType::kCommInit, init));
    for (uint64_t seq = 0; seq < 24; ++seq) {
      Call c;
      c.seq = seq;
      c.op = seq % 2 ? kRecv : kAllReduce;
      c.rootOrPeer = seq % 2 ? 1 : -1;
      c.datatype = 7;
      c.count = 40 + seq;
      c.timeNs = static_cast<int64_t>(1000 + seq);
      ASSERT_TRUE(writer->append(RecordType::kCall, c));
      if (seq % 3 == 0) {
        std::string bytes(c.count * 4, '\0');
        std::normal_distribution<float> grad(0.f, 1e-3f);
        for (size_t i = 0; i < c.count; ++i) {
          const float v = grad(rng);
          memcpy(&bytes[i * 4], &v, 4);
        }
        PayloadRef ref;
        ref.seq = seq;
        ref.op = c.op;
        ref.datatype = 7;
        ref.count = c.count;
        ref.peer = c.rootOrPeer;
        ASSERT_TRUE(writer->appendPayload(ref, bytes.data(), bytes.size()));
        blobs_[seq] = bytes;
      }
      if (seq % 4 == 3) ASSERT_TRUE(writer->flush().isOk());  // batches: the writer rolls segments over between them
    }
    Stage s;
    s.name = "step";
    s.step = 1;
    ASSERT_TRUE(writer->append(RecordType::kStage, s));
    ASSERT_TRUE(writer->close().isOk()) << writer->lastError();
    writer.reset();
    const size_t segments = listWithPrefix(pristine_, "seg-").size();
    ASSERT_GE(segments, 3u) << "the fixture needs at least three segments";
    ASSERT_GE(listWithPrefix(pristine_, "pay-").size(), 2u);
    copyDir(pristine_, dir_);
    auto reader = openReader(pristine_);
    ASSERT_NE(reader, nullptr);
    bool clean = false;
    records_ = scanAll(*reader, &clean);
    ASSERT_TRUE(clean) << problemsText(reader->problems());
    answers_ = answers(*reader, 1, 25);
    for (const Rec& r : records_)
      if (r.type == RecordType::kPayloadRef) refs_.push_back(r.as<PayloadRef>());
    for (uint32_t i = 0; i < segments; ++i) segments_.push_back(readAll(pristine_ + "/" + segmentName(i)));
    last_ = static_cast<uint32_t>(segments - 1);
  }

  std::string segPath(uint32_t i) const { return dir_ + "/" + segmentName(i); }
  void restore() { copyDir(pristine_, dir_); }

  // The records a reader must visit when segment `seg` is damaged in the frame starting at `frameOffset`
  // (0: the whole segment is lost; UINT64_MAX: nothing is lost).
  std::vector<Rec> expectedWith(uint32_t seg, uint64_t frameOffset) const {
    std::vector<Rec> out;
    for (const Rec& r : records_)
      if (r.where.segment != seg || r.where.offset < frameOffset) out.push_back(r);
    return out;
  }
  static void expectSameRecords(const std::vector<Rec>& got, const std::vector<Rec>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].type, want[i].type) << i;
      EXPECT_EQ(got[i].where.segment, want[i].where.segment) << i;
      EXPECT_EQ(got[i].where.offset, want[i].where.offset) << i;
      EXPECT_TRUE(got[i].packed == want[i].packed) << i;
    }
  }

  TempDir tmp_;
  std::string pristine_, dir_;
  std::map<uint64_t, std::string> blobs_;  // seq -> payload bytes
  std::vector<Rec> records_;
  std::vector<PayloadRef> refs_;
  std::vector<std::string> answers_;
  std::vector<std::string> segments_;  // pristine images
  uint32_t last_ = 0;                  // index of the last segment
};

// Where a single damaged byte at `pos` of an intact segment image shows: the offset of the problem (the file
// header field or the frame holding the byte), or nullopt when the reader rightly ignores it (the header's minor
// version and reserved word).
std::optional<uint64_t> problemOffsetFor(const std::string& image, size_t pos) {
  if (pos < 4) return 0;              // magic
  if (pos < 6) return 4;              // major version
  if (pos < 8) return std::nullopt;   // minor version: any 1.x is read
  if (pos < 12) return 8;             // file index
  if (pos < 16) return std::nullopt;  // reserved
  const auto frames = frameOffsets(image);
  for (size_t k = 0; k + 1 < frames.size(); ++k)
    if (pos >= frames[k] && pos < frames[k + 1]) return frames[k];
  ADD_FAILURE() << "position " << pos << " outside the frames";
  return 0;
}

// An answers() line "key: call [...] | payload [...]" as its call and payload parts ("" when absent).
std::pair<std::string, std::string> splitAnswer(const std::string& line) {
  const size_t colon = line.find(": "), bar = line.find(" | ");
  return {line.substr(colon + 2, bar - colon - 2), line.substr(bar + 3)};
}

// ------------------------------------------------------------------------------------------------ bit flips

TEST_F(TraceCorruption, EveryBitFlipInASegmentIsCaughtAtItsFrame) {
  const std::string& image = segments_[1];
  const auto frames = frameOffsets(image);
  ASSERT_EQ(frames.back(), image.size());
  ASSERT_GE(frames.size(), 5u);
  std::map<std::string, int> reasons;
  for (size_t pos = 0; pos < image.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      SCOPED_TRACE("byte " + std::to_string(pos) + " bit " + std::to_string(bit));
      std::string damaged = image;
      damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
      Problem problem;
      bool ok = false;
      const auto got = parseImage(damaged, 1, Limits{}, &problem, &ok);
      const auto where = problemOffsetFor(image, pos);
      std::vector<Rec> want;
      for (const Rec& r : records_)
        if (r.where.segment == 1 && (!where || r.where.offset < *where)) want.push_back(r);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_TRUE(got[i].packed == want[i].packed) << i;
      if (!where) {
        EXPECT_TRUE(ok) << problem.describe();
        continue;
      }
      ASSERT_FALSE(ok);
      EXPECT_EQ(problem.file, "image");
      EXPECT_EQ(problem.offset, *where);
      EXPECT_FALSE(problem.reason.empty());
      EXPECT_EQ(problem.describe(), "image: offset " + std::to_string(*where) + ": " + problem.reason);
      if (pos >= kFileHeaderBytes) {
        const size_t inFrame = pos - *where;
        if (inFrame >= 4) {
          // CRC field or body: CRC-32 catches every single-bit error.
          EXPECT_EQ(problem.reason, "CRC-32 mismatch");
          EXPECT_FALSE(problem.truncated);
        } else {
          // Length field: now too long for the file (reads as truncation), beyond the limit, or the CRC no longer
          // matches the shorter/longer body.
          const bool known = problem.reason == "CRC-32 mismatch" || problem.reason.rfind("truncated frame:", 0) == 0 ||
                             problem.reason.rfind("frame length ", 0) == 0;
          EXPECT_TRUE(known) << problem.reason;
          EXPECT_EQ(problem.truncated, problem.reason.rfind("truncated frame:", 0) == 0);
        }
      } else {
        EXPECT_FALSE(problem.truncated);
      }
      reasons[problem.reason.substr(0, 20)]++;
    }
  }
  EXPECT_GE(reasons.size(), 4u);  // magic, version, index, CRC, length kinds all seen
}

TEST_F(TraceCorruption, DamagedMiddleSegmentThroughTheReader) {
  // One byte at every position of the middle segment (a different bit each time), through TraceReader: the other
  // segments are read in full, the damaged one up to the damaged frame, one problem names file and offset, and
  // random access never returns a record other than the one stored.
  const std::string& image = segments_[1];
  for (size_t pos = 0; pos < image.size(); ++pos) {
    SCOPED_TRACE("byte " + std::to_string(pos));
    std::string damaged = image;
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << (pos % 8)));
    writeAll(segPath(1), damaged);
    std::string error;
    std::unique_ptr<TraceReader> reader;
    error = TraceReader::open(dir_, Limits{}, &reader).message();
    ASSERT_NE(reader, nullptr) << error;
    bool clean = true;
    const auto got = scanAll(*reader, &clean);
    const auto where = problemOffsetFor(image, pos);
    expectSameRecords(got, expectedWith(1, where ? *where : UINT64_MAX));
    if (!where) {
      EXPECT_TRUE(clean) << problemsText(reader->problems());
      continue;
    }
    EXPECT_FALSE(clean);
    ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
    const Problem& p = reader->problems()[0];
    EXPECT_EQ(p.file, segPath(1));
    EXPECT_EQ(p.offset, *where);
    EXPECT_FALSE(p.reason.empty());
    // The stored index is still used (same sizes); a damaged frame reads as absent, never as other content.
    const auto now = answers(*reader, 1, 25);
    ASSERT_EQ(now.size(), answers_.size());
    for (size_t i = 0; i < now.size(); ++i) {
      const auto [callNow, payloadNow] = splitAnswer(now[i]);
      const auto [callStored, payloadStored] = splitAnswer(answers_[i]);
      EXPECT_TRUE(callNow.empty() || callNow == callStored) << "got " << now[i] << "\nstored " << answers_[i];
      EXPECT_TRUE(payloadNow.empty() || payloadNow == payloadStored) << "got " << now[i] << "\nstored " << answers_[i];
    }
  }
  restore();
}

// ------------------------------------------------------------------------------------------------ truncation

TEST_F(TraceCorruption, TruncationAtEveryOffset) {
  const std::string& image = segments_[last_];
  const auto frames = frameOffsets(image);
  for (size_t cut = 0; cut < image.size(); ++cut) {
    SCOPED_TRACE("cut at " + std::to_string(cut));
    const std::string truncated = image.substr(0, cut);
    Problem problem;
    bool ok = false;
    const auto got = parseImage(truncated, last_, Limits{}, &problem, &ok);
    // Complete frames before the cut are all read.
    size_t complete = 0;
    for (size_t k = 0; k + 1 < frames.size(); ++k) complete += frames[k + 1] <= cut;
    if (cut < kFileHeaderBytes) complete = 0;
    EXPECT_EQ(got.size(), complete);
    const bool boundary = cut >= kFileHeaderBytes && std::find(frames.begin(), frames.end(), cut) != frames.end();
    const bool atHeaderEnd = cut == kFileHeaderBytes;
    if (boundary || atHeaderEnd) {
      EXPECT_TRUE(ok) << problem.describe();
      continue;
    }
    ASSERT_FALSE(ok);
    EXPECT_TRUE(problem.truncated) << problem.describe();
    EXPECT_EQ(problem.offset, cut < kFileHeaderBytes ? 0 : frames[complete]) << problem.describe();
  }
  // The same through the reader, cutting the last segment (what a crash leaves) and the middle one (the next
  // segment is still read).
  for (uint32_t seg : {last_, 1u}) {
    const std::string& img = segments_[seg];
    const auto offs = frameOffsets(img);
    for (size_t cut = 0; cut < img.size(); ++cut) {
      SCOPED_TRACE("segment " + std::to_string(seg) + " cut at " + std::to_string(cut));
      writeAll(segPath(seg), img.substr(0, cut));
      auto reader = openReader(dir_);
      ASSERT_NE(reader, nullptr);
      EXPECT_TRUE(reader->indexRebuilt());  // the size changed
      const auto got = scanAll(*reader);
      size_t k = 0;
      while (k + 1 < offs.size() && offs[k + 1] <= cut) ++k;
      const bool clean = cut == kFileHeaderBytes || (cut > kFileHeaderBytes && offs[k] == cut);
      expectSameRecords(got, expectedWith(seg, cut < kFileHeaderBytes ? 0 : offs[k]));
      if (clean) {
        // Cut between two frames: every frame left parses, but the closed manifest counts the records lost.
        ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
        EXPECT_FALSE(reader->problems()[0].truncated);
        EXPECT_EQ(reader->problems()[0].file, segPath(last_));
        EXPECT_NE(reader->problems()[0].reason.find(", but the closed manifest counts "), std::string::npos)
            << problemsText(reader->problems());
        continue;
      }
      ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
      EXPECT_TRUE(reader->problems()[0].truncated);
      EXPECT_EQ(reader->problems()[0].file, segPath(seg));
      EXPECT_EQ(reader->problems()[0].offset, cut < kFileHeaderBytes ? 0 : offs[k]);
      // Random access to what survived still works.
      for (const Rec& r : got)
        if (r.type == RecordType::kCall) {
          const Call c = r.as<Call>();
          auto back = reader->call(c.commId, c.op, c.rootOrPeer, c.seq);
          ASSERT_TRUE(back.has_value());
          EXPECT_EQ(*back, c);
        }
    }
    restore();
  }
}

// ------------------------------------------------------------------------------------------------ headers, lengths

TEST_F(TraceCorruption, WrongMagicVersionOrIndexInSegmentHeader) {
  struct Case {
    size_t at;
    std::string bytes;
    uint64_t offset;
    const char* reason;
  };
  const Case cases[] = {
      {0, std::string("RLPY"), 0, "bad magic"},  // a payload file's magic
      {0, std::string("\0\0\0\0", 4), 0, "bad magic"},
      {4, std::string("\0\0", 2), 4, "unsupported format version 0."},
      {4, std::string("\xff\xff", 2), 4, "unsupported format version 65535."},
      {8, std::string("\x02\0\0\0", 4), 8, "segment header says index 2, file name says 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    std::string damaged = segments_[1];
    damaged.replace(c.at, c.bytes.size(), c.bytes);
    writeAll(segPath(1), damaged);
    auto reader = openReader(dir_);
    ASSERT_NE(reader, nullptr);
    expectSameRecords(scanAll(*reader), expectedWith(1, 0));
    ASSERT_EQ(reader->problems().size(), 1u);
    EXPECT_EQ(reader->problems()[0].file, segPath(1));
    EXPECT_EQ(reader->problems()[0].offset, c.offset);
    EXPECT_NE(reader->problems()[0].reason.find(c.reason), std::string::npos) << reader->problems()[0].reason;
    EXPECT_FALSE(reader->problems()[0].truncated);
  }
  restore();
}

TEST_F(TraceCorruption, AbsurdFrameLengths) {
  const std::string& image = segments_[1];
  const auto frames = frameOffsets(image);
  const size_t victim = frames[2];  // the third frame
  struct Case {
    uint32_t length;
    bool truncated;
    const char* reason;
  };
  const Case cases[] = {
      {0xFFFFFFFFu, false, "frame length 4294967295 outside 1..16777216"},
      {0, false, "frame length 0 outside 1..16777216"},
      {(16u << 20) + 1, false, "outside 1..16777216"},
      {16u << 20, true, "truncated frame: header says 16777216 bytes"},  // plausible but past the end of the file
      {0x80000000u, false, "outside"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.reason);
    std::string damaged = image;
    memcpy(&damaged[victim], &c.length, 4);
    Problem problem;
    bool ok = true;
    const auto got = parseImage(damaged, 1, Limits{}, &problem, &ok);
    EXPECT_FALSE(ok);
    EXPECT_EQ(got.size(), 2u);
    EXPECT_EQ(problem.offset, victim);
    EXPECT_EQ(problem.truncated, c.truncated);
    EXPECT_NE(problem.reason.find(c.reason), std::string::npos) << problem.reason;
    // Through the reader with the (still size-consistent) stored index: random access to the damaged frame says
    // "absent", the rest is served.
    writeAll(segPath(1), damaged);
    auto reader = openReader(dir_);
    ASSERT_NE(reader, nullptr);
    EXPECT_FALSE(reader->indexRebuilt());
    const auto damagedRecords = expectedWith(1, victim);
    expectSameRecords(scanAll(*reader), damagedRecords);
    for (const Rec& r : records_) {
      if (r.type != RecordType::kCall) continue;
      const Call want = r.as<Call>();
      auto back = reader->call(want.commId, want.op, want.rootOrPeer, want.seq);
      if (r.where.segment == 1 && r.where.offset == victim) {
        EXPECT_FALSE(back.has_value());
      } else if (r.where.segment == 1 && r.where.offset > victim) {
        // Behind the damage: served from the stored index, or absent once a lookup made the reader rescan.
        if (back) EXPECT_EQ(*back, want);
      } else {
        ASSERT_TRUE(back.has_value()) << want.seq;
        EXPECT_EQ(*back, want);
      }
    }
  }
  restore();
}

TEST_F(TraceCorruption, BodyThatIsNotTypeAndRecord) {
  // Intact frames (CRC right) whose bodies break the [type, record] shape: corruption at that frame.
  const std::vector<std::pair<std::string, const char*>> bodies = {
      {std::string("\x93\x01\x02\x03", 4), "not [type, record]"},  // [1, 2, 3]
      {std::string("\x92\x01\x05", 3), "not [type, record]"},      // [1, 5]
      {std::string("\x92\xff\x90", 3), "not [type, record]"},      // [-1, []]
      {std::string("\x92\xa1x\x90", 4), "not [type, record]"},     // ["x", []]
      {std::string("\x92\x01\x90\x00", 4), "1 trailing bytes"},    // [1, []] then a byte
      {std::string("\x92\x01", 2), "undecodable record"},          // incomplete
      {std::string("\xc1", 1), "undecodable record"},              // reserved msgpack byte
      {std::string("\x92\xce\x80\x00\x00\x00\x90", 7), "record type out of range"},
      {std::string("\x92\x01\xdd\xff\xff\xff\xff", 7), "undecodable record"},  // array of 2^32-1 in 7 bytes
  };
  for (const auto& [b, reason] : bodies) {
    SCOPED_TRACE(reason);
    std::string image = segments_[1].substr(0, frameOffsets(segments_[1])[3]) + frame(b) + frame(body(5, Stage{}));
    Problem problem;
    bool ok = true;
    const auto got = parseImage(image, 1, Limits{}, &problem, &ok);
    EXPECT_FALSE(ok);
    EXPECT_EQ(got.size(), 3u);
    EXPECT_EQ(problem.offset, frameOffsets(segments_[1])[3]);
    EXPECT_FALSE(problem.truncated);
    EXPECT_NE(problem.reason.find(reason), std::string::npos) << problem.reason;
  }
  // A record of a known type with fields of the wrong types: the scan visits it, the index builder reports it.
  std::string image = segments_[1] + frame(std::string("\x92\x03\x92\xa1x\xa1y", 7));  // [3, ["x", "y"]]
  writeAll(segPath(1), image);
  auto reader = openReader(dir_);
  ASSERT_NE(reader, nullptr);
  ASSERT_EQ(reader->problems().size(), 1u);
  EXPECT_EQ(reader->problems()[0].offset, segments_[1].size());
  EXPECT_EQ(reader->problems()[0].reason.find("Call record"), 0u) << reader->problems()[0].reason;
  restore();
}

// ------------------------------------------------------------------------------------------------ payloads

std::string payPath(const std::string& dir, const PayloadRef& ref) { return dir + "/" + payloadName(ref.file); }

bool decode(const std::string& blob, const PayloadRef& ref, const Limits& limits, std::string* reason,
            std::vector<uint8_t>* out = nullptr) {
  std::vector<uint8_t> local;
  return (*reason =
              decodePayload(reinterpret_cast<const uint8_t*>(blob.data()), blob.size(), ref, limits, out ? out : &local)
                  .message())
      .empty();
}

TEST_F(TraceCorruption, EveryBitFlipInAPayloadBlobIsCaught) {
  ASSERT_FALSE(refs_.empty());
  const PayloadRef ref = refs_[1];
  const std::string blob = readRange(payPath(pristine_, ref), ref.offset, ref.compressedBytes);
  std::string reason;
  std::vector<uint8_t> out;
  ASSERT_TRUE(decode(blob, ref, Limits{}, &reason, &out)) << reason;
  ASSERT_EQ(std::string(out.begin(), out.end()), blobs_.at(ref.seq));
  std::set<std::string> kinds;
  size_t accepted = 0;
  for (size_t pos = 0; pos < blob.size(); ++pos)
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = blob;
      damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
      reason.clear();
      std::vector<uint8_t> back;
      if (decode(damaged, ref, Limits{}, &reason, &back)) {
        // Only bits zstd itself ignores (the frame header's unused bit) may leave the blob valid, and then the
        // bytes are the original ones.
        EXPECT_TRUE(std::string(back.begin(), back.end()) == blobs_.at(ref.seq)) << "byte " << pos << " bit " << bit;
        ++accepted;
        continue;
      }
      EXPECT_FALSE(reason.empty());
      kinds.insert(reason.substr(0, 12));
    }
  EXPECT_GE(kinds.size(), 3u);
  EXPECT_LE(accepted, 1u);  // bit 4 of the frame header descriptor
  // Through the reader: one byte at every position of the blob in its file.
  for (size_t pos = 0; pos < blob.size(); ++pos) {
    SCOPED_TRACE("byte " + std::to_string(pos));
    std::string file = readAll(payPath(pristine_, ref));
    const int bit = pos == 4 ? 5 : static_cast<int>(pos % 8);  // not the unused header bit (see above)
    file[ref.offset + pos] = static_cast<char>(file[ref.offset + pos] ^ (1 << bit));
    writeAll(payPath(dir_, ref), file);
    auto reader = openReader(dir_);
    ASSERT_NE(reader, nullptr);
    auto back = reader->payload(ref.commId, ref.op, ref.peer, ref.seq);
    ASSERT_TRUE(back.has_value());
    std::vector<uint8_t> bytes;
    Problem problem;
    EXPECT_FALSE(reader->readPayload(*back, &bytes, &problem));
    EXPECT_EQ(problem.file, payPath(dir_, ref));
    EXPECT_EQ(problem.offset, ref.offset);
    EXPECT_FALSE(problem.reason.empty());
    // Into caller memory (value replay's prefetcher), the same refusal.
    std::vector<uint8_t> room(ref.rawBytes);
    Problem intoProblem;
    EXPECT_FALSE(reader->readPayload(*back, room.data(), room.size(), &intoProblem));
    EXPECT_EQ(intoProblem.file, problem.file);
    EXPECT_EQ(intoProblem.offset, problem.offset);
    EXPECT_EQ(intoProblem.reason, problem.reason);
    // The neighbours in the same file are untouched, read either way.
    for (const PayloadRef& other : refs_) {
      if (other.file != ref.file || other.offset == ref.offset) continue;
      std::vector<uint8_t> ok;
      EXPECT_TRUE(reader->readPayload(other, &ok, &problem)) << problem.describe();
      std::vector<uint8_t> into(other.rawBytes);
      EXPECT_TRUE(reader->readPayload(other, into.data(), into.size(), &problem)) << problem.describe();
      EXPECT_EQ(into, ok);
    }
  }
  restore();
}

// Into caller memory: room that is not exactly the payload's size is refused, naming both sizes, and nothing is
// written past the room given.
TEST_F(TraceCorruption, APayloadReadIntoTheWrongRoomIsRefused) {
  ASSERT_FALSE(refs_.empty());
  auto reader = openReader(pristine_);
  ASSERT_NE(reader, nullptr);
  const PayloadRef ref = refs_[1];
  ASSERT_GT(ref.rawBytes, 1u);
  std::vector<uint8_t> room(ref.rawBytes + 8, 0xAB);
  Problem problem;
  EXPECT_FALSE(reader->readPayload(ref, room.data(), ref.rawBytes - 1, &problem));
  EXPECT_NE(problem.reason.find("room for " + std::to_string(ref.rawBytes - 1)), std::string::npos) << problem.reason;
  EXPECT_FALSE(reader->readPayload(ref, room.data(), ref.rawBytes + 1, &problem));
  ASSERT_TRUE(reader->readPayload(ref, room.data(), ref.rawBytes, &problem)) << problem.describe();
  EXPECT_EQ(std::string(room.begin(), room.begin() + static_cast<long>(ref.rawBytes)), blobs_.at(ref.seq));
  for (size_t i = ref.rawBytes; i < room.size(); ++i) EXPECT_EQ(room[i], 0xAB) << "byte " << i;
}

// The byte offset and size of the Frame_Content_Size field of a zstd frame header (RFC 8878 3.1.1.1).
std::pair<size_t, size_t> contentSizeField(const std::string& frame) {
  const uint8_t fhd = static_cast<uint8_t>(frame[4]);
  const int fcsFlag = fhd >> 6, single = (fhd >> 5) & 1, dictFlag = fhd & 3;
  size_t at = 5 + (single ? 0 : 1) + (dictFlag == 0 ? 0 : dictFlag == 1 ? 1 : dictFlag == 2 ? 2 : 4);
  const size_t sizes[4] = {static_cast<size_t>(single ? 1 : 0), 2, 4, 8};
  return {at, sizes[fcsFlag]};
}

// A tiny hand-made frame declaring `declared` bytes of content but holding one 5-byte raw block (and a checksum).
std::string lyingFrame(uint64_t declared) {
  std::string f("\x28\xb5\x2f\xfd", 4);
  f += static_cast<char>(0xC4);  // FCS 8 bytes, not single segment, checksum
  f += static_cast<char>(0x00);  // window descriptor: 1 KiB
  f.append(reinterpret_cast<const char*>(&declared), 8);
  f += std::string("\x29\x00\x00", 3);  // last block, raw, 5 bytes
  f += "bomb!";
  f += std::string("\x00\x00\x00\x00", 4);  // content checksum (wrong, never reached)
  return f;
}

TEST_F(TraceCorruption, PayloadBoundsAndDecompressionBombs) {
  const PayloadRef good = refs_[0];
  const std::string file = payPath(dir_, good);
  const uint64_t size = fileSize(file);
  // docs: every payload problem is reported at the PayloadRef's offset; it is a truncation only when the blob
  // starts inside the file and runs past its end.
  bool truncated = false;
  auto readWith = [&](const PayloadRef& ref, const Limits& limits = Limits{}) {
    auto reader = openReader(dir_, limits);
    std::vector<uint8_t> out;
    Problem problem;
    EXPECT_FALSE(reader->readPayload(ref, &out, &problem)) << "accepted";
    EXPECT_EQ(problem.file, payPath(dir_, ref));
    EXPECT_EQ(problem.offset, ref.offset);
    EXPECT_EQ(problem.describe().find(payPath(dir_, ref) + ": offset " + std::to_string(ref.offset) + ": "), 0u);
    truncated = problem.truncated;
    return problem.reason;
  };
  {  // offsets and sizes outside the file
    PayloadRef r = good;
    r.offset = size + 10;
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_FALSE(truncated);
    r = good;
    r.compressedBytes = size;
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_TRUE(truncated);
    r = good;
    r.offset = size - 3;
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_TRUE(truncated);
    r = good;
    r.offset = 4;  // inside the file header
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_FALSE(truncated);
    r = good;
    r.compressedBytes = UINT64_MAX;  // overflow of offset + size
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_TRUE(truncated);
    r = good;
    r.offset = UINT64_MAX - 2;
    EXPECT_NE(readWith(r).find("outside the file"), std::string::npos);
    EXPECT_FALSE(truncated);
    r = good;
    r.compressedBytes -= 1;  // one byte short of the frame
    EXPECT_FALSE(readWith(r).empty());
    EXPECT_FALSE(truncated);
    r = good;
    r.file = 99;  // no such file
    EXPECT_NE(readWith(r).find("cannot open"), std::string::npos);
  }
  {  // wrong declared sizes
    PayloadRef r = good;
    r.rawBytes += 1;
    EXPECT_NE(readWith(r).find("declares"), std::string::npos);
    r = good;
    r.rawCrc32 ^= 1;
    EXPECT_NE(readWith(r).find("CRC-32"), std::string::npos);
    // The frame itself lies about its content size (and the reference agrees with the lie).
    std::string blob = readRange(file, good.offset, good.compressedBytes);
    const auto [at, width] = contentSizeField(blob);
    ASSERT_GT(width, 0u);
    blob[at] = static_cast<char>(blob[at] + 1);
    appendBytes(file, blob);
    r = good;
    r.offset = size;
    r.rawBytes = good.rawBytes + 1;
    EXPECT_FALSE(readWith(r).empty());
    // A frame without a content size.
    const std::string noSize = zstdFrame(blobs_.at(good.seq), 3, /*contentSize=*/false);
    ASSERT_EQ(ZSTD_getFrameContentSize(noSize.data(), noSize.size()), ZSTD_CONTENTSIZE_UNKNOWN);
    const uint64_t at2 = fileSize(file);
    appendBytes(file, noSize);
    r = good;
    r.offset = at2;
    r.compressedBytes = noSize.size();
    EXPECT_NE(readWith(r).find("without a content size"), std::string::npos);
    // A frame without zstd's content checksum, as writers make them since format 1.9, reads (rawCrc32 checks it).
    const std::string noChecksum = zstdFrame(blobs_.at(good.seq), 3, true, /*checksum=*/false);
    const uint64_t at4 = fileSize(file);
    appendBytes(file, noChecksum);
    r = good;
    r.offset = at4;
    r.compressedBytes = noChecksum.size();
    {
      auto reader = openReader(dir_);
      std::vector<uint8_t> out;
      Problem problem;
      EXPECT_TRUE(reader->readPayload(r, &out, &problem)) << problem.describe();
      EXPECT_EQ(std::string(out.begin(), out.end()), blobs_.at(good.seq));
    }
    // ... and one of them whose bytes decode to others is caught by rawCrc32, with no zstd checksum to catch it first.
    r.rawCrc32 ^= 1;
    EXPECT_NE(readWith(r).find("CRC-32"), std::string::npos);
    // Two frames where one is expected.
    const std::string twice = zstdFrame(blobs_.at(good.seq)) + zstdFrame("x");
    const uint64_t at3 = fileSize(file);
    appendBytes(file, twice);
    r = good;
    r.offset = at3;
    r.compressedBytes = twice.size();
    EXPECT_NE(readWith(r).find("after its frame"), std::string::npos);
  }
  {  // decompression bombs
    const std::string zeros(64u << 20, '\0');
    const std::string bomb = zstdFrame(zeros, 1);
    ASSERT_LT(bomb.size(), 8192u);  // a real bomb: kilobytes declaring 64 MiB
    const uint64_t at = fileSize(file);
    appendBytes(file, bomb);
    PayloadRef r = good;
    r.offset = at;
    r.compressedBytes = bomb.size();
    r.rawBytes = zeros.size();
    r.rawCrc32 = crc32Bytes(zeros.data(), zeros.size());
    Limits small;
    small.maxPayloadBytes = 1u << 20;
    EXPECT_NE(readWith(r, small).find("exceeds the limit"), std::string::npos);
    r.rawBytes = 1000;  // the reference understates: the frame's declaration is checked first
    EXPECT_NE(readWith(r).find("declares 67108864 bytes"), std::string::npos);
    // A 26-byte frame declaring 2^60 bytes.
    const std::string liar = lyingFrame(1ull << 60);
    ASSERT_EQ(ZSTD_getFrameContentSize(liar.data(), liar.size()), 1ull << 60);
    const uint64_t at2 = fileSize(file);
    appendBytes(file, liar);
    r = good;
    r.offset = at2;
    r.compressedBytes = liar.size();
    r.rawBytes = 5;
    EXPECT_NE(readWith(r).find("declares"), std::string::npos);
    r.rawBytes = 1ull << 60;  // a reference claiming more than the limit
    EXPECT_NE(readWith(r).find("exceeds the limit"), std::string::npos);
    // The same through decodePayload directly, with a limit just below and at the claim.
    Limits justBelow;
    justBelow.maxPayloadBytes = 4;
    std::string reason;
    r.rawBytes = 5;
    EXPECT_FALSE(decode(liar, r, justBelow, &reason));
    EXPECT_NE(reason.find("exceeds the limit"), std::string::npos) << reason;
  }
  restore();
}

// HARDENING (payload/src/trace_format.cc, decodePayload): the only bound on the output buffer is Limits
// ::maxPayloadBytes (16 GiB by default). A 26-byte frame that declares N bytes, with a reference that agrees, makes
// the reader allocate and zero-fill N bytes (`out->resize(ref.rawBytes)`) before zstd finds the frame holds 5. Under
// default limits one crafted PayloadRef costs up to 16 GiB of RAM (and an OOM under libFuzzer/ASAN). zstd cannot
// expand a block by more than 128 KiB per 3-byte block header (or decompress streaming into a growing buffer), so a
// frame whose compressed size cannot produce its declared size could be refused before allocating.
TEST_F(TraceCorruption, TinyFrameDeclaringHugeSizeIsRefusedBeforeAllocating) {
  const std::string liar = lyingFrame(2ull << 30);
  PayloadRef r;
  r.compressedBytes = liar.size();
  r.rawBytes = 2ull << 30;
  rusage before, after;
  getrusage(RUSAGE_SELF, &before);
  std::string reason;
  EXPECT_FALSE(decode(liar, r, Limits{}, &reason));
  getrusage(RUSAGE_SELF, &after);
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 256 * 1024)
      << "KiB of peak RSS for a " << liar.size() << "-byte blob; reason: " << reason;
}

TEST_F(TraceCorruption, PayloadFileHeaderDamage) {
  const PayloadRef ref = refs_[0];
  const std::string file = payPath(dir_, ref);
  const std::string image = readAll(file);
  struct Case {
    size_t at;
    std::string bytes;
    const char* reason;
  };
  const Case cases[] = {
      {0, "RLSG", "bad header"},
      {4, std::string("\x02\x00", 2), "unsupported format version 2"},
      {8, std::string("\x07\x00\x00\x00", 4), "payload header says index 7"},
  };
  for (const Case& c : cases) {
    std::string damaged = image;
    damaged.replace(c.at, c.bytes.size(), c.bytes);
    writeAll(file, damaged);
    auto reader = openReader(dir_);
    std::vector<uint8_t> out;
    Problem problem;
    EXPECT_FALSE(reader->readPayload(ref, &out, &problem));
    EXPECT_EQ(problem.file, file);
    EXPECT_NE(problem.reason.find(c.reason), std::string::npos) << problem.reason;
  }
  writeAll(file, image.substr(0, 10));  // shorter than its header
  auto reader = openReader(dir_);
  std::vector<uint8_t> out;
  Problem problem;
  EXPECT_FALSE(reader->readPayload(ref, &out, &problem));
  EXPECT_NE(problem.reason.find("bad header"), std::string::npos) << problem.reason;
  restore();
}

// ------------------------------------------------------------------------------------------------ index

TEST_F(TraceCorruption, DamagedIndexIsRebuiltSilently) {
  const std::string path = dir_ + "/index.msgpack";
  const std::string index = readAll(path);
  msgpack::object_handle handle = msgpack::unpack(index.data(), index.size());
  auto map = handle.get().as<std::map<std::string, msgpack::object>>();
  msgpack::zone zone;
  auto packed = [&](const std::map<std::string, msgpack::object>& m) {
    msgpack::sbuffer b;
    msgpack::pack(b, m);
    return std::string(b.data(), b.size());
  };
  auto without = [&](const char* key) {
    auto m = map;
    m.erase(key);
    return packed(m);
  };
  auto with = [&](const char* key, msgpack::object value) {
    auto m = map;
    m[key] = value;
    return packed(m);
  };
  using Entry = std::tuple<uint64_t, uint64_t, int, int, uint32_t, uint64_t>;
  auto calls = map.at("calls").as<std::vector<Entry>>();
  auto segs = map.at("segments").as<std::vector<std::tuple<std::string, uint64_t>>>();
  auto callsBeyond = calls;
  std::get<5>(callsBeyond[0]) = 1ull << 40;
  auto callsBadSegment = calls;
  std::get<4>(callsBadSegment[0]) = 9;
  auto segsWrongSize = segs;
  std::get<1>(segsWrongSize[1]) += 1;
  auto segsWrongName = segs;
  std::get<0>(segsWrongName[1]) = "seg-000007.rls";
  auto segsShort = segs;
  segsShort.pop_back();
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"empty", ""},
      {"truncated", index.substr(0, index.size() / 2)},
      {"one byte short", index.substr(0, index.size() - 1)},
      {"garbage", std::string(200, '\x5a')},
      {"not a map", std::string("\x93\x01\x02\x03", 4)},
      {"nil", std::string("\xc0", 1)},
      {"no calls", without("calls")},
      {"no payloads", without("payloads")},
      {"no segments", without("segments")},
      {"no version", without("version_major")},
      {"major 2", with("version_major", msgpack::object(2, zone))},
      {"calls not an array", with("calls", msgpack::object("x", zone))},
      {"call beyond its segment", with("calls", msgpack::object(callsBeyond, zone))},
      {"call in a missing segment", with("calls", msgpack::object(callsBadSegment, zone))},
      {"segment size differs", with("segments", msgpack::object(segsWrongSize, zone))},
      {"segment name differs", with("segments", msgpack::object(segsWrongName, zone))},
      {"a segment not listed", with("segments", msgpack::object(segsShort, zone))},
      {"huge string", std::string("\xdb\xff\xff\xff\xff", 5)},
      {"huge binary", std::string("\xc6\xff\xff\xff\xff", 5)},
  };
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    writeAll(path, bytes);
    std::string error;
    std::unique_ptr<TraceReader> reader;
    error = TraceReader::open(dir_, Limits{}, &reader).message();
    ASSERT_NE(reader, nullptr) << error;
    EXPECT_TRUE(reader->indexRebuilt());
    EXPECT_TRUE(reader->problems().empty()) << problemsText(reader->problems());
    EXPECT_EQ(answers(*reader, 1, 25), answers_);
  }
  ::unlink(path.c_str());
  ASSERT_EQ(mkdir(path.c_str(), 0755), 0);  // not even a file
  {
    auto reader = openReader(dir_);
    ASSERT_NE(reader, nullptr);
    EXPECT_TRUE(reader->indexRebuilt());
    EXPECT_EQ(answers(*reader, 1, 25), answers_);
  }
  rmdir(path.c_str());
  restore();
}

// A 5-byte index whose array/map header claims 2^32-1 elements must not make msgpack allocate count *
// sizeof(object) up front (~96/192 GiB): loadIndex bounds element counts by the file size, as parseSegment and
// parseManifest do. (Up to f7d405d loadIndex used msgpack's default limits and ASan aborted here with out-of-memory.)
TEST_F(TraceCorruption, IndexWithHugeElementCountsIsRebuiltWithoutAllocating) {
  const std::string path = dir_ + "/index.msgpack";
  const std::vector<std::pair<const char*, std::string>> cases = {
      {"huge array header", std::string("\xdd\xff\xff\xff\xff", 5)},
      {"huge map header", std::string("\xdf\xff\xff\xff\xff", 5)},
      {"map whose calls array is huge", std::string("\x81\xa5"
                                                    "calls"
                                                    "\xdd\x7f\xff\xff\xff",
                                                    12)},
  };
  for (const auto& [name, bytes] : cases) {
    SCOPED_TRACE(name);
    writeAll(path, bytes);
    std::string error;
    std::unique_ptr<TraceReader> reader;
    error = TraceReader::open(dir_, Limits{}, &reader).message();
    ASSERT_NE(reader, nullptr) << error;
    EXPECT_TRUE(reader->indexRebuilt());
    EXPECT_EQ(answers(*reader, 1, 25), answers_);
  }
  restore();
}

// A sparse index of gigabytes (a valid header, then zeros: each a msgpack 0) is larger than its segments can need:
// rebuilt without being read, in no time and without gigabytes of memory.
TEST_F(TraceCorruption, SparseIndexOfGigabytesIsRebuiltWithoutReadingIt) {
  const std::string path = dir_ + "/index.msgpack";
  writeAll(path, std::string("\x81\xa8payloads\xdd\xff\xff\xff\xff", 14));
  ASSERT_EQ(truncate(path.c_str(), 1ll << 32), 0);
  // Bytes this process has read (/proc/self/io rchar): the index must be judged by its size, not read.
  auto bytesRead = [] {
    std::ifstream io("/proc/self/io");
    std::string key;
    uint64_t value = 0;
    while (io >> key >> value)
      if (key == "rchar:") return value;
    return uint64_t{0};
  };
  const uint64_t before = bytesRead();
  std::unique_ptr<TraceReader> reader;
  const Status opened = TraceReader::open(dir_, Limits{}, &reader);
  ASSERT_TRUE(opened.isOk()) << opened.message();
  EXPECT_TRUE(reader->indexRebuilt());
  EXPECT_LT(bytesRead() - before, 64u << 20);
  EXPECT_EQ(answers(*reader, 1, 25), answers_);
  restore();
}

// WEAKNESS (docs/trace-format.md "index.msgpack" + payload/src/trace_reader.cc): index.msgpack has no checksum.
// Entries are verified when a lookup uses them (and a bad one triggers a rebuild), but a lookup that MISSES is
// trusted: one flipped bit in an entry's commId/seq/op/peer files it under another key and the real call then reads
// as absent, silently, though the segments hold it. On this fixture 492 of 2992 single-bit flips lose a call or a
// payload (at ca5008f, before entries were verified, 219 flips even served another call's record). The spec allows
// this ("Otherwise each entry is checked when a lookup first uses it"); it contradicts "Nothing is lost" only for a
// damaged index. Fix: a CRC-32 of the index body stored in the index (rebuild on mismatch).
TEST_F(TraceCorruption, EveryBitFlipInTheIndexIsHarmless) {
  const std::string path = dir_ + "/index.msgpack";
  const std::string index = readAll(path);
  size_t wrong = 0, otherRecord = 0;
  auto firstDifference = [&](const std::vector<std::string>& now) {
    size_t i = 0;
    while (i < now.size() && now[i] == answers_[i]) ++i;
    return i;
  };
  for (size_t pos = 0; pos < index.size(); ++pos)
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = index;
      damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
      writeAll(path, damaged);
      std::string error;
      std::unique_ptr<TraceReader> reader;
      error = TraceReader::open(dir_, Limits{}, &reader).message();
      ASSERT_NE(reader, nullptr) << error;
      const auto now = answers(*reader, 1, 25);
      if (now == answers_) continue;
      ++wrong;
      bool other = false;
      for (size_t i = 0; i < now.size(); ++i) {
        if (now[i] == answers_[i]) continue;
        const auto [callNow, payloadNow] = splitAnswer(now[i]);
        const auto [callStored, payloadStored] = splitAnswer(answers_[i]);
        const bool wrongRecord =
            (!callNow.empty() && callNow != callStored) || (!payloadNow.empty() && payloadNow != payloadStored);
        if ((wrongRecord && !other) || (wrong <= 3 && i == firstDifference(now)))
          ADD_FAILURE() << "byte " << pos << " bit " << bit
                        << (wrongRecord ? " serves another record" : " loses a record") << ":\n  got    " << now[i]
                        << "\n  stored " << answers_[i];
        other = other || wrongRecord;
      }
      otherRecord += other;
    }
  EXPECT_EQ(wrong, 0u) << "of " << index.size() * 8 << " single-bit flips changed what call()/payload() answer";
  EXPECT_EQ(otherRecord, 0u) << "of them made call()/payload() return a record filed under another call";
  restore();
}

// ------------------------------------------------------------------------------------------------ manifest

TEST_F(TraceCorruption, DamagedManifestFailsOpenWithFileOffsetAndReason) {
  const std::string path = dir_ + "/manifest.msgpack";
  const std::string manifest = readAll(path);
  auto expectRefused = [&](const std::string& what) {
    std::string error;
    std::unique_ptr<TraceReader> none;
    error = TraceReader::open(dir_, Limits{}, &none).message();
    EXPECT_EQ(none, nullptr) << what;
    // The whole map's problems at offset 0; one key's named by the key (docs/trace-format.md).
    const bool named = error.find(path + ": offset 0: ") == 0 || error.find(path + ": key '") == 0;
    EXPECT_TRUE(named) << what << ": " << error;
    EXPECT_GT(error.size(), (path + ": offset 0: ").size()) << what;
  };
  for (size_t cut = 0; cut < manifest.size(); ++cut) {
    writeAll(path, manifest.substr(0, cut));
    expectRefused("cut at " + std::to_string(cut));
  }
  writeAll(path, std::string("\x93\x01\x02\x03", 4));
  expectRefused("an array");
  writeAll(path, std::string(64, '\xff'));
  expectRefused("garbage");
  {
    msgpack::sbuffer b;
    msgpack::pack(b, std::map<std::string, std::string>{{"format", "something-else"}});
    writeAll(path, std::string(b.data(), b.size()));
    expectRefused("other format");
  }
  {
    msgpack::sbuffer b;
    msgpack::pack(b, std::map<std::string, std::string>{{"format", "ranklens-trace"}, {"rank", "three"}});
    writeAll(path, std::string(b.data(), b.size()));
    expectRefused("a field of the wrong type");
    std::unique_ptr<TraceReader> none;
    const std::string error = TraceReader::open(dir_, Limits{}, &none).message();
    EXPECT_EQ(error.find(path + ": key 'rank': "), 0u) << error;  // named by its key, not a byte offset
  }
  {
    msgpack::sbuffer b;
    msgpack::pack(b, std::map<int, int>{{1, 2}});
    writeAll(path, std::string(b.data(), b.size()));
    expectRefused("integer keys");
  }
  // Every single-bit flip: open either succeeds or fails naming file, offset and reason; never crashes.
  size_t refused = 0;
  for (size_t pos = 0; pos < manifest.size(); ++pos)
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = manifest;
      damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << bit));
      writeAll(path, damaged);
      std::string error;
      std::unique_ptr<TraceReader> reader;
      error = TraceReader::open(dir_, Limits{}, &reader).message();
      if (reader) continue;
      ++refused;
      EXPECT_TRUE(error.find(path + ": offset 0: ") == 0 || error.find(path + ": key '") == 0) << error;
    }
  EXPECT_GT(refused, 0u);
  // A missing manifest: the error names the expected path.
  ::unlink(path.c_str());
  std::string error;
  std::unique_ptr<TraceReader> none;
  error = TraceReader::open(dir_, Limits{}, &none).message();
  EXPECT_EQ(none, nullptr);
  EXPECT_NE(error.find(path), std::string::npos) << error;
  restore();
}

// ------------------------------------------------------------------------------------------------ missing files

TEST_F(TraceCorruption, MissingMiddleSegmentIsAProblemNamingIt) {
  ASSERT_EQ(::unlink(segPath(1).c_str()), 0);
  auto reader = openReader(dir_);
  ASSERT_NE(reader, nullptr);
  EXPECT_TRUE(reader->indexRebuilt());
  EXPECT_EQ(reader->segmentCount(), 1u);
  ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
  EXPECT_EQ(reader->problems()[0].file, segPath(1));
  EXPECT_NE(reader->problems()[0].reason.find("missing"), std::string::npos) << reader->problems()[0].reason;
  EXPECT_NE(reader->problems()[0].reason.find(segmentName(2)), std::string::npos) << reader->problems()[0].reason;
  // Segment 0 is read in full; segments after the gap are not.
  std::vector<Rec> want;
  for (const Rec& r : records_)
    if (r.where.segment == 0) want.push_back(r);
  expectSameRecords(scanAll(*reader), want);
  ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());  // still reported after scan()
  restore();
  // The first segment missing: nothing is read, the problem names seg-000000.rls.
  ASSERT_EQ(::unlink(segPath(0).c_str()), 0);
  reader = openReader(dir_);
  ASSERT_NE(reader, nullptr);
  EXPECT_EQ(reader->segmentCount(), 0u);
  EXPECT_TRUE(scanAll(*reader).empty());
  ASSERT_FALSE(reader->problems().empty());
  EXPECT_EQ(reader->problems()[0].file, segPath(0));
  restore();
}

TEST_F(TraceCorruption, UnreadableSegmentIsAProblem) {
  // A directory where a segment should be: reported, the next segments still read.
  ASSERT_EQ(::unlink(segPath(1).c_str()), 0);
  ASSERT_EQ(mkdir(segPath(1).c_str(), 0755), 0);
  auto reader = openReader(dir_);
  ASSERT_NE(reader, nullptr);
  expectSameRecords(scanAll(*reader), expectedWith(1, 0));
  ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
  EXPECT_EQ(reader->problems()[0].file, segPath(1));
  ASSERT_EQ(rmdir(segPath(1).c_str()), 0);
  // A dangling symlink.
  ASSERT_EQ(symlink("/nonexistent/ranklens", segPath(1).c_str()), 0);
  reader = openReader(dir_);
  ASSERT_NE(reader, nullptr);
  expectSameRecords(scanAll(*reader), expectedWith(1, 0));
  ASSERT_EQ(reader->problems().size(), 1u) << problemsText(reader->problems());
  EXPECT_EQ(reader->problems()[0].file, segPath(1));
  ::unlink(segPath(1).c_str());
  restore();
}

}  // namespace

// SPDX-License-Identifier: Apache-2.0
// Pure, bounded parsers of the trace format (segments, payload blobs, manifest) and small shared helpers. These are
// what the fuzz targets exercise: no I/O, no allocation beyond the configured limits.
#include <isa-l/crc.h>
#include <sanitizer/asan_interface.h>
#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader, ZSTD_d_stableOutBuffer; zstd is linked statically
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>

#include "ranklens/trace.h"
#include "trace_io.h"

extern char** environ;

namespace ranklens {
namespace trace {

// Strict UTF-8 (trace_io.h declares it; here, with the format, so that the parsers the fuzzers build need no file
// I/O): as Python decodes it: no overlong forms, no surrogates, nothing above U+10FFFF.
bool validUtf8(const char* text, size_t size) {
  const auto* p = reinterpret_cast<const unsigned char*>(text);
  size_t i = 0;
  while (i < size) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n = 0;
    uint32_t low = 0, cp = 0;
    if ((c & 0xE0) == 0xC0)
      n = 1, low = 0x80, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
      n = 2, low = 0x800, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
      n = 3, low = 0x10000, cp = c & 0x07;
    else
      return false;
    if (size - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if (cp < low || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

const char* recordTypeName(RecordType type) {
  switch (type) {
    case RecordType::kCommInit:
      return "CommInit";
    case RecordType::kCommEnd:
      return "CommEnd";
    case RecordType::kCall:
      return "Call";
    case RecordType::kGroupEnd:
      return "GroupEnd";
    case RecordType::kStage:
      return "Stage";
    case RecordType::kGroupBegin:
      return "GroupBegin";
    case RecordType::kTiming:
      return "Timing";
    case RecordType::kPayloadRef:
      return "PayloadRef";
    case RecordType::kEdit:
      return "Edit";
    case RecordType::kCommBinding:
      return "CommBinding";
    case RecordType::kFlightRecorderEntry:
      return "FlightRecorderEntry";
  }
  return "Unknown";
}

uint32_t crc32Bytes(const void* data, size_t size) {
  return crc32_gzip_refl(0, static_cast<const unsigned char*>(data), size);  // zlib's crc32(), any length
}

namespace {

// One block between raw order and planes, through a block-sized scratch (in cache; one per thread). Widths 2 and 4
// (bf16/fp16, fp32: nearly every payload) move 16 elements at a time with SSE2 byte packs and unpacks, about 3x
// faster than byte by byte; the rest, and other processors, byte by byte.
template <int W>
void toPlanesBytes(const uint8_t* in, uint8_t* out, size_t elements, size_t from) {
  for (size_t i = from; i < elements; ++i)
    for (int b = 0; b < W; ++b) out[b * elements + i] = in[i * W + b];
}
template <int W>
void fromPlanesBytes(const uint8_t* in, uint8_t* out, size_t elements, size_t from) {
  for (size_t i = from; i < elements; ++i)
    for (int b = 0; b < W; ++b) out[i * W + b] = in[b * elements + i];
}

template <int W>
void toPlanes(const uint8_t* in, uint8_t* out, size_t elements) {
  size_t i = 0;
#if defined(__SSE2__)
  const __m128i low = _mm_set1_epi16(0x00ff);
  auto even = [&](__m128i a, __m128i b) { return _mm_packus_epi16(_mm_and_si128(a, low), _mm_and_si128(b, low)); };
  auto odd = [](__m128i a, __m128i b) { return _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)); };
  auto load = [](const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  auto store = [](uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); };
  if constexpr (W == 2) {
    for (; i + 16 <= elements; i += 16) {
      const __m128i x0 = load(in + 2 * i), x1 = load(in + 2 * i + 16);
      store(out + i, even(x0, x1));
      store(out + elements + i, odd(x0, x1));
    }
  } else if constexpr (W == 4) {
    for (; i + 16 <= elements; i += 16) {
      const __m128i x0 = load(in + 4 * i), x1 = load(in + 4 * i + 16), x2 = load(in + 4 * i + 32),
                    x3 = load(in + 4 * i + 48);
      const __m128i e01 = even(x0, x1), o01 = odd(x0, x1), e23 = even(x2, x3), o23 = odd(x2, x3);  // bytes 0,2 / 1,3
      store(out + i, even(e01, e23));
      store(out + elements + i, even(o01, o23));
      store(out + 2 * elements + i, odd(e01, e23));
      store(out + 3 * elements + i, odd(o01, o23));
    }
  }
#endif
  toPlanesBytes<W>(in, out, elements, i);
}

template <int W>
void fromPlanes(const uint8_t* in, uint8_t* out, size_t elements) {
  size_t i = 0;
#if defined(__SSE2__)
  auto load = [](const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  auto store = [](uint8_t* p, __m128i v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v); };
  if constexpr (W == 2) {
    for (; i + 16 <= elements; i += 16) {
      const __m128i p0 = load(in + i), p1 = load(in + elements + i);
      store(out + 2 * i, _mm_unpacklo_epi8(p0, p1));
      store(out + 2 * i + 16, _mm_unpackhi_epi8(p0, p1));
    }
  } else if constexpr (W == 4) {
    for (; i + 16 <= elements; i += 16) {
      const __m128i p0 = load(in + i), p1 = load(in + elements + i), p2 = load(in + 2 * elements + i),
                    p3 = load(in + 3 * elements + i);
      const __m128i lo01 = _mm_unpacklo_epi8(p0, p1), hi01 = _mm_unpackhi_epi8(p0, p1);
      const __m128i lo23 = _mm_unpacklo_epi8(p2, p3), hi23 = _mm_unpackhi_epi8(p2, p3);
      store(out + 4 * i, _mm_unpacklo_epi16(lo01, lo23));
      store(out + 4 * i + 16, _mm_unpackhi_epi16(lo01, lo23));
      store(out + 4 * i + 32, _mm_unpacklo_epi16(hi01, hi23));
      store(out + 4 * i + 48, _mm_unpackhi_epi16(hi01, hi23));
    }
  }
#endif
  fromPlanesBytes<W>(in, out, elements, i);
}

// Applies `convert` (toPlanes or fromPlanes for `width`) to every block of `data` in place; `after` sees each block
// as it ends up, while it is still in cache.
template <typename After>
void eachBlock(uint8_t* data, size_t bytes, int width, bool toStored, After&& after) {
  static thread_local std::unique_ptr<uint8_t[]> scratch(new uint8_t[kShuffleBlockBytes]);
  for (size_t at = 0; at < bytes; at += kShuffleBlockBytes) {
    const size_t length = std::min(kShuffleBlockBytes, bytes - at);
    const size_t elements = width > 0 ? length / static_cast<size_t>(width) : 0;
    uint8_t* block = data + at;
    if (elements > 0) {
      uint8_t* tmp = scratch.get();
      switch (width) {
        case 2:
          toStored ? toPlanes<2>(block, tmp, elements) : fromPlanes<2>(block, tmp, elements);
          break;
        case 4:
          toStored ? toPlanes<4>(block, tmp, elements) : fromPlanes<4>(block, tmp, elements);
          break;
        case 8:
          toStored ? toPlanes<8>(block, tmp, elements) : fromPlanes<8>(block, tmp, elements);
          break;
      }
      std::memcpy(block, tmp, elements * static_cast<size_t>(width));  // the tail stays where it is
    }
    after(block, length);
  }
}

}  // namespace

void shuffleBlocks(uint8_t* data, size_t bytes, int width) {
  if (width == 0 || !validShuffle(width)) return;
  eachBlock(data, bytes, width, true, [](const uint8_t*, size_t) {});
}

void unshuffleBlocks(uint8_t* data, size_t bytes, int width) {
  if (width == 0 || !validShuffle(width)) return;
  eachBlock(data, bytes, width, false, [](const uint8_t*, size_t) {});
}

namespace {
// Unshuffles a decoded payload in place (width 0: leaves it) and returns the CRC-32 of the result, each block
// checksummed while still in cache.
uint32_t restoreAndChecksum(uint8_t* data, size_t bytes, int width) {
  if (width == 0 || !validShuffle(width)) return crc32Bytes(data, bytes);
  uint32_t crc = 0;
  eachBlock(data, bytes, width, false,
            [&crc](const uint8_t* block, size_t length) { crc = crc32_gzip_refl(crc, block, length); });
  return crc;
}
}  // namespace

uint32_t shuffleCopyAndChecksum(uint8_t* dst, const uint8_t* src, size_t bytes, int width, uint32_t crc) {
  if (!validShuffle(width)) width = 0;
  for (size_t at = 0; at < bytes; at += kShuffleBlockBytes) {
    const size_t length = std::min(kShuffleBlockBytes, bytes - at);
    const size_t elements = width > 0 ? length / static_cast<size_t>(width) : 0;
    const uint8_t* in = src + at;
    uint8_t* out = dst + at;
    crc = crc32_gzip_refl(crc, in, length);  // the block is in cache for the pass below
    switch (width) {
      case 2:
        toPlanes<2>(in, out, elements);
        break;
      case 4:
        toPlanes<4>(in, out, elements);
        break;
      case 8:
        toPlanes<8>(in, out, elements);
        break;
    }
    const size_t done = elements * static_cast<size_t>(width);
    std::memcpy(out + done, in + done, length - done);  // the tail (everything, as it is, for width 0)
  }
  return crc;
}

uint64_t indexByteLimit(uint64_t segmentBytes) { return 8 * segmentBytes + (1u << 20); }

const Problem* firstLoss(const std::vector<Problem>& problems) {
  for (const Problem& p : problems)
    if (!p.skipped) return &p;
  return nullptr;
}

std::string Problem::describe() const { return file + ": offset " + std::to_string(offset) + ": " + reason; }

static std::string indexed(const char* prefix, uint32_t index, const char* suffix) {
  char name[64];
  snprintf(name, sizeof(name), "%s-%06u.%s", prefix, index, suffix);
  return name;
}
std::string segmentName(uint32_t index) { return indexed("seg", index, "rls"); }
std::string payloadName(uint32_t index) { return indexed("pay", index, "rlp"); }

std::string machineDifference(const Manifest& recorded, const Manifest& replayed) {
  std::string out;
  auto differs = [&out](const char* what, const std::string& a, const std::string& b) {
    if (a.empty() || b.empty() || a == b) return;
    out += (out.empty() ? "" : "; ") + std::string(what) + " " + a + " against " + b;
  };
  differs("CPU", recorded.cpu_model, replayed.cpu_model);
  differs("CPUs", recorded.cpus > 0 ? std::to_string(recorded.cpus) : "",
          replayed.cpus > 0 ? std::to_string(replayed.cpus) : "");
  differs("GPU", recorded.gpu_name, replayed.gpu_name);
  return out;
}

std::vector<Incomparable> stepTimeIncomparable(const Manifest& recorded, const Manifest& replayed) {
  std::vector<Incomparable> out;
  if (replayed.gpu_name.empty())
    out.push_back(
        {"host device", "the replay ran on the host device, which accounts GPU time instead of waiting for it"});
  else if (replayed.writer.find("(structure") != std::string::npos)
    out.push_back({"structure fidelity", "the replay was at structure fidelity, which holds no call for its duration"});
  if (recorded.shared_gpu)
    out.push_back({"shared-GPU recording",
                   "the recorded ranks shared a GPU (--share-gpu), so its step times are not a "
                   "lone rank's"});
  if (!replayed.gpu_name.empty() && !recorded.gpu_name.empty() && recorded.gpu_name != replayed.gpu_name)
    out.push_back({"recorded on " + recorded.gpu_name,
                   "the recording ran on " + recorded.gpu_name + ", the replay on " + replayed.gpu_name});
  const bool cpuDiffers =
      !recorded.cpu_model.empty() && !replayed.cpu_model.empty() && recorded.cpu_model != replayed.cpu_model;
  const bool cpusDiffer = recorded.cpus > 0 && replayed.cpus > 0 && recorded.cpus != replayed.cpus;
  if (cpuDiffers || cpusDiffer)
    out.push_back({"other host",
                   "the hosts differ (" +
                       (cpuDiffers ? recorded.cpu_model + " against " + replayed.cpu_model
                                   : std::to_string(recorded.cpus) + " CPUs against " + std::to_string(replayed.cpus)) +
                       "), and a host-bound step runs at its machine's speed"});
  return out;
}

std::optional<uint64_t> counterValue(const Manifest& manifest, const char* name) {
  const auto it = manifest.counters.find(name);
  if (it == manifest.counters.end()) return std::nullopt;
  return it->second;
}

std::vector<std::pair<const char*, uint64_t>> payloadsNotStored(const Manifest& manifest) {
  const std::pair<const char*, const char*> reasons[] = {
      {counter::kPayloadsSkippedStagingFull, "for a full staging"},
      {counter::kPayloadsSkippedTooLarge, "larger than all of staging"},
      {counter::kPayloadsSkippedCaptured, "in calls captured into a CUDA graph"},
      {counter::kPayloadCopyFailures, "whose copy off the GPU failed"}};
  std::vector<std::pair<const char*, uint64_t>> out;
  for (const auto& [name, why] : reasons)
    if (const uint64_t n = counterValue(manifest, name).value_or(0); n > 0) out.emplace_back(why, n);
  if (manifest.payloads_dropped > 0) out.emplace_back("refused by the trace writer", manifest.payloads_dropped);
  return out;
}

CompressionLoad compressionLoad(const Manifest& manifest) {
  CompressionLoad load;
  auto counter = [&](const char* name, uint64_t* value) {
    const std::optional<uint64_t> v = counterValue(manifest, name);
    if (v) *value = *v;
    return v.has_value();
  };
  uint64_t threads = 0, activeNs = 0;
  if (!counter(counter::kPayloadThreads, &threads) || !counter(counter::kPayloadActiveNs, &activeNs)) return load;
  double* wall[] = {&load.copySeconds, &load.compressSeconds, &load.writeSeconds};  // kPayloadStages' order
  for (int i = 0; i < 3; ++i) {
    uint64_t ns = 0, cpuNs = 0;
    if (!counter(counter::kPayloadStages[i].wallNs, &ns) || !counter(counter::kPayloadStages[i].cpuNs, &cpuNs))
      return load;
    *wall[i] = ns / 1e9;
    load.cpuSeconds += cpuNs / 1e9;
  }
  load.known = true;
  load.threads = threads;
  load.activeSeconds = activeNs / 1e9;
  const double busy = load.copySeconds + load.compressSeconds + load.writeSeconds;
  if (threads > 0 && activeNs > 0)
    load.busyShare = std::min(1.0, busy / (static_cast<double>(threads) * load.activeSeconds));
  if (manifest.payload_raw_bytes >= CompressionLoad::kBytesForARate)
    load.cpuSecondsPerGB = load.cpuSeconds / (manifest.payload_raw_bytes / 1e9);
  return load;
}

std::map<std::string, std::string> captureEnvironment() {
  static const char* kExact[] = {"RANK",       "WORLD_SIZE", "LOCAL_RANK",          "LOCAL_WORLD_SIZE",
                                 "GROUP_RANK", "NODE_RANK",  "CUDA_VISIBLE_DEVICES"};
  static const char* kPrefixes[] = {
      "MASTER_", "TORCH_",     "NCCL_", "RANKLENS_", "TORCHELASTIC_", "SLURM_", "OMPI_COMM_WORLD_",
      "PMI_",    "DEEPSPEED_", "DS_",   "MEGATRON_", "TP_",           "PP_",    "DP_",
      "CP_",     "EP_"};
  std::map<std::string, std::string> out;
  for (char** e = environ; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    bool keep = false;
    for (const char* exact : kExact) keep = keep || name == exact;
    for (const char* setting : kProcessSettingVariables) keep = keep || name == setting;
    for (const char* prefix : kPrefixes) keep = keep || name.rfind(prefix, 0) == 0;
    if (keep) out[name] = entry.substr(eq + 1);
  }
  return out;
}

namespace {

uint32_t readU32(const uint8_t* p) {
  uint32_t v;
  memcpy(&v, p, 4);  // the format is little-endian, as are the machines RankLens runs on
  return v;
}
uint16_t readU16(const uint8_t* p) {
  uint16_t v;
  memcpy(&v, p, 2);
  return v;
}

msgpack::unpack_limit bodyLimits(uint32_t maxBytes) {
  // Element counts can never exceed the body's byte count; nesting in our records is at most 3 deep.
  return msgpack::unpack_limit(maxBytes, maxBytes, maxBytes, maxBytes, maxBytes, 8);
}

}  // namespace

bool parseSegment(const uint8_t* data, size_t size, uint32_t segmentIndex, const std::string& name,
                  const Limits& limits, const RecordVisitor& visit, Problem* problem) {
  auto fail = [&](uint64_t offset, std::string reason, bool truncated) {
    if (problem) *problem = Problem{name, offset, std::move(reason), truncated};
    return false;
  };
  if (size < kFileHeaderBytes) return fail(0, "truncated file header (" + std::to_string(size) + " bytes)", true);
  if (readU32(data) != kSegmentMagic) return fail(0, "not a RankLens segment file (bad magic)", false);
  const uint16_t major = readU16(data + 4), minor = readU16(data + 6);
  if (major != kFormatMajor)
    return fail(4,
                "unsupported format version " + std::to_string(major) + "." + std::to_string(minor) +
                    " (this reader: " + std::to_string(kFormatMajor) + ".x)",
                false);
  if (readU32(data + 8) != segmentIndex)
    return fail(8,
                "segment header says index " + std::to_string(readU32(data + 8)) + ", file name says " +
                    std::to_string(segmentIndex),
                false);
  size_t offset = kFileHeaderBytes;
  while (offset < size) {
    const size_t remaining = size - offset;
    if (remaining < kFrameHeaderBytes)
      return fail(offset, "truncated frame header (" + std::to_string(remaining) + " bytes at end of file)", true);
    const uint32_t length = readU32(data + offset), crc = readU32(data + offset + 4);
    if (length == 0 || length > limits.maxRecordBytes)
      return fail(offset,
                  "frame length " + std::to_string(length) + " outside 1.." + std::to_string(limits.maxRecordBytes),
                  false);
    if (length > remaining - kFrameHeaderBytes)
      return fail(offset,
                  "truncated frame: header says " + std::to_string(length) + " bytes, " +
                      std::to_string(remaining - kFrameHeaderBytes) + " remain",
                  true);
    const uint8_t* body = data + offset + kFrameHeaderBytes;
    if (crc32Bytes(body, length) != crc) return fail(offset, "CRC-32 mismatch", false);
    try {
      size_t used = 0;
      msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(body), length, used, nullptr,
                                                      nullptr, bodyLimits(limits.maxRecordBytes));
      const msgpack::object& obj = handle.get();
      if (used != length)
        return fail(offset, "frame body has " + std::to_string(length - used) + " trailing bytes", false);
      if (obj.type != msgpack::type::ARRAY || obj.via.array.size != 2 ||
          obj.via.array.ptr[0].type != msgpack::type::POSITIVE_INTEGER ||
          obj.via.array.ptr[1].type != msgpack::type::ARRAY)
        return fail(offset, "frame body is not [type, record]", false);
      const uint64_t type = obj.via.array.ptr[0].via.u64;
      if (type > 0x7fffffff) return fail(offset, "record type out of range", false);
      if (visit && !visit(static_cast<RecordType>(type), obj.via.array.ptr[1], Location{segmentIndex, offset}))
        return true;
    } catch (const std::exception& e) {
      return fail(offset, std::string("undecodable record: ") + e.what(), false);
    }
    offset += kFrameHeaderBytes + length;
  }
  return true;
}

namespace {

// One zstd frame's header (`head`: up to `headBytes` bytes from the frame's start, at byte `offset` of the blob),
// with `before` bytes of the payload declared by the frames ahead of it: it must declare its content size, and no
// more than the rest of ref.rawBytes. Every frame of a blob (format 1.10: one per MiB of payload) is checked so, on
// every path, before it is decoded. Its content size goes to `content`.
Status checkFrame(const uint8_t* head, size_t headBytes, uint64_t offset, uint64_t before, const PayloadRef& ref,
                  uint64_t* content) {
  auto fail = [](std::string text) { return Status::corrupt(std::move(text)); };
  // A skippable frame (magic 0x184D2A50..5F) holds bytes no checksum covers and that are not the payload: zstd
  // reports its content size as 0, so it would otherwise pass as an empty frame. Writers never write one; refused.
  if (headBytes >= 4) {
    uint32_t magic = 0;
    memcpy(&magic, head, 4);
    if ((magic & 0xFFFFFFF0u) == 0x184D2A50u)
      return fail(offset == 0 ? std::string("skippable zstd frame (refused: writers never write one)")
                              : "skippable zstd frame at byte " + std::to_string(offset) +
                                    " of the blob (refused: writers never write one)");
  }
  const unsigned long long declared = ZSTD_getFrameContentSize(head, headBytes);
  if (declared == ZSTD_CONTENTSIZE_ERROR)
    return fail(offset == 0 ? std::string("not a zstd frame")
                            : "not a zstd frame at byte " + std::to_string(offset) + " of the blob");
  if (declared == ZSTD_CONTENTSIZE_UNKNOWN) return fail("zstd frame without a content size");
  if (declared > ref.rawBytes - before) {
    const std::string reference = ", reference says " + std::to_string(ref.rawBytes);
    return fail(offset == 0 ? "zstd frame declares " + std::to_string(declared) + " bytes" + reference
                            : "zstd frames declare " + std::to_string(before + declared) + " bytes in all" + reference);
  }
  *content = declared;
  return Status::ok();
}

// The bounds of a `size`-byte payload blob that its first frame's header shows (`head`: its first `headBytes` bytes,
// the header among them), checked against `ref` and `limits` before anything is allocated or decoded for it. The
// first frame's content size goes to `firstDeclared`.
Status checkFrameHeader(const uint8_t* head, size_t headBytes, size_t size, const PayloadRef& ref, const Limits& limits,
                        uint64_t* firstDeclared) {
  auto fail = [](std::string text) { return Status::corrupt(std::move(text)); };
  if (size != ref.compressedBytes)
    return fail("blob is " + std::to_string(size) + " bytes, reference says " + std::to_string(ref.compressedBytes));
  if (!validShuffle(ref.shuffle))
    return fail("byte shuffle of width " + std::to_string(ref.shuffle) + " (known: 0, 2, 4, 8; a newer writer?)");
  if (ref.rawBytes > limits.maxPayloadBytes)
    return fail("payload of " + std::to_string(ref.rawBytes) + " bytes exceeds the limit of " +
                std::to_string(limits.maxPayloadBytes));
  RL_CHECK(checkFrame(head, headBytes, 0, 0, ref, firstDeclared));
  ZSTD_frameHeader header;
  if (ZSTD_getFrameHeader(&header, head, headBytes) != 0) return fail("damaged zstd frame header");
  // zstd cannot expand more than ~32768x (a 4-byte RLE block stands for 128 KiB): refuse a blob that claims more
  // before allocating what it claims.
  if (ref.rawBytes > static_cast<uint64_t>(size) * 32768 + (128u << 10))
    return fail("zstd frame of " + std::to_string(size) + " bytes cannot hold the " + std::to_string(ref.rawBytes) +
                " bytes it declares");
  return Status::ok();
}

// Every bound of a payload blob checked against `ref` and `limits`, before anything is allocated for it: its frames
// end where the blob ends, each declaring its content size, ref.rawBytes in all.
Status checkPayloadFrame(const uint8_t* data, size_t size, const PayloadRef& ref, const Limits& limits,
                         uint64_t* firstDeclared) {
  RL_CHECK(checkFrameHeader(data, size, size, ref, limits, firstDeclared));
  auto fail = [](std::string text) { return Status::corrupt(std::move(text)); };
  uint64_t declared = 0, content = *firstDeclared;  // the first frame's header is checked (checkFrameHeader)
  size_t at = 0, frames = 0;
  while (at < size && (declared < ref.rawBytes || frames == 0)) {
    if (frames > 0) RL_CHECK(checkFrame(data + at, size - at, at, declared, ref, &content));
    const size_t frameSize = ZSTD_findFrameCompressedSize(data + at, size - at);
    if (ZSTD_isError(frameSize)) return fail(std::string("damaged zstd frame: ") + ZSTD_getErrorName(frameSize));
    declared += content;
    at += frameSize;
    ++frames;
  }
  if (declared != ref.rawBytes)
    return fail("zstd frame" + std::string(frames > 1 ? "s declare " : " declares ") + std::to_string(declared) +
                " bytes" + (frames > 1 ? " in all" : "") + ", reference says " + std::to_string(ref.rawBytes));
  if (at != size) return fail("blob holds " + std::to_string(size - at) + " bytes after its frame");
  return Status::ok();
}

// Decodes a blob whose first frame header was checked (declaring `firstDeclared` bytes) from the pieces
// `next(&piece, &bytes)` hands out in order
// (false: one could not be read; `size` in all), straight into `out` (ref.rawBytes long), and checks the size and
// CRC-32 of what came out; each later frame's header is read through `peek(offset, into, bytes)` and checked
// (checkFrame) before it is decoded. Every path decodes every payload here, so that they give one verdict.
template <typename Next, typename Peek>
Status inflateStreaming(Next&& next, Peek&& peek, uint64_t size, const PayloadRef& ref, uint64_t firstDeclared,
                        uint8_t* out, size_t outBytes) {
  auto fail = [](std::string text) { return Status::corrupt(std::move(text)); };
  const uint8_t* piece = nullptr;
  size_t pieceBytes = 0;
  if (!next(&piece, &pieceBytes)) return fail("short read");
  uint64_t taken = pieceBytes;
  static thread_local std::unique_ptr<ZSTD_DCtx, size_t (*)(ZSTD_DCtx*)> dctx(ZSTD_createDCtx(), ZSTD_freeDCtx);
  if (!dctx) return fail("zstd: cannot create a decompression context");
  ZSTD_DCtx_reset(dctx.get(), ZSTD_reset_session_and_parameters);
  // Straight into `out`, which is the whole payload (declared and checked above): zstd keeps no window of its own,
  // so a frame whose window is the whole payload needs no memory beyond it.
  ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_stableOutBuffer, 1);
  ZSTD_DCtx_setParameter(dctx.get(), ZSTD_d_windowLogMax, ZSTD_WINDOWLOG_MAX);
  ZSTD_outBuffer output = {out, outBytes, 0};
  // zstd's streaming decoder decodes a frame it holds whole in one call as its one-shot decoder does, and that refuses
  // frames the block-by-block route accepts (an empty compressed block, an RLE block in a frame of no content; found
  // by fuzz_payload): the header alone comes first, so that every frame goes block by block, however it is cut into
  // pieces.
  // So for each frame of the blob (format 1.10: one per MiB of payload): a frame that starts within a piece is shown
  // its header alone first.
  auto headerOnly = [&](size_t from) {
    const size_t header = ZSTD_frameHeaderSize(piece + from, pieceBytes - from);
    return ZSTD_isError(header) ? pieceBytes : std::min(from + header, pieceBytes);
  };
  ZSTD_inBuffer input = {piece, headerOnly(0), 0};
  // Each frame must decode to the size its header declares (checked against the payload's before it was decoded):
  // zstd's streaming decoder let a frame that declared 35 bytes end after none (fuzz_payload), which left the whole
  // blob's verdict (by the declared sizes) and the piecewise one apart.
  uint64_t frameAt = 0, frameStart = 0, frameDeclared = firstDeclared;
  uint32_t crc = 0;
  for (;;) {
    const size_t before = output.pos, consumedBefore = input.pos;
    const size_t left = ZSTD_decompressStream(dctx.get(), &output, &input);
    if (ZSTD_isError(left)) return fail(std::string("zstd: ") + ZSTD_getErrorName(left));
    // A shuffled payload is restored and checksummed once whole: zstd reads back what it wrote into `out` (its window
    // is `out` itself), so no byte may change before the frame ends.
    if (ref.shuffle == 0) crc = crc32_gzip_refl(crc, out + before, output.pos - before);
    if (left == 0) {  // a frame ended (zstd's checksum verified, where it has one)
      if (output.pos - frameStart != frameDeclared)
        return fail("zstd frame at byte " + std::to_string(frameAt) + " of the blob decodes to " +
                    std::to_string(output.pos - frameStart) + " bytes, declares " + std::to_string(frameDeclared));
      const uint64_t after = (size - taken) + (pieceBytes - input.pos);
      if (output.pos == ref.rawBytes || after == 0) {  // the payload is whole, or the blob ends: nothing may follow
        if (after > 0) return fail("blob holds " + std::to_string(after) + " bytes after its frame");
        break;
      }
      const uint64_t at = taken - pieceBytes + input.pos;  // where the next frame starts in the blob
      uint8_t head[ZSTD_FRAMEHEADERSIZE_MAX];
      const size_t headBytes = static_cast<size_t>(std::min<uint64_t>(sizeof head, size - at));
      uint64_t content = 0;
      if (!peek(at, head, headBytes)) return fail("short read");
      RL_CHECK(checkFrame(head, headBytes, at, output.pos, ref, &content));
      frameAt = at;
      frameStart = output.pos;
      frameDeclared = content;
      if (input.pos < pieceBytes) {  // the next frame starts in this piece
        input.size = headerOnly(input.pos);
        continue;
      }
    }
    if (input.pos == input.size && input.size < pieceBytes) {
      input.size = pieceBytes;  // the rest of the piece, after a frame's header
    } else if (input.pos == input.size) {
      if (taken == size)
        return fail(std::string("damaged zstd frame: ") + ZSTD_getErrorString(ZSTD_error_srcSize_wrong));
      if (!next(&piece, &pieceBytes)) return fail("short read");
      taken += pieceBytes;
      input = {piece, left == 0 ? headerOnly(0) : pieceBytes, 0};  // left 0: a frame starts the piece
    } else if (output.pos == before && input.pos == consumedBefore) {
      return fail("zstd: no progress (the frame needs more room than the payload's size)");
    }
  }
  if (output.pos != ref.rawBytes)
    return fail("decompressed " + std::to_string(output.pos) + " bytes, expected " + std::to_string(ref.rawBytes));
  if (ref.shuffle != 0) crc = restoreAndChecksum(out, outBytes, ref.shuffle);
  if (crc != ref.rawCrc32) return fail("CRC-32 of the decompressed bytes does not match");
  return Status::ok();
}

// A checked frame in memory into `out` (ref.rawBytes long): one piece for inflateStreaming, which decodes blobs read
// piece by piece too, so that every path gives one verdict.
Status inflateChecked(const uint8_t* data, size_t size, const PayloadRef& ref, uint64_t firstDeclared, uint8_t* out) {
  auto onePiece = [data, size](const uint8_t** piece, size_t* bytes) {
    *piece = data;
    *bytes = size;
    return true;
  };
  auto peek = [data](uint64_t at, uint8_t* into, size_t bytes) {
    memcpy(into, data + at, bytes);
    return true;
  };
  return inflateStreaming(onePiece, peek, size, ref, firstDeclared, out, static_cast<size_t>(ref.rawBytes));
}

}  // namespace

Status decodePayload(const uint8_t* data, size_t size, const PayloadRef& ref, const Limits& limits,
                     std::vector<uint8_t>* out) {
  uint64_t firstDeclared = 0;
  RL_CHECK(checkPayloadFrame(data, size, ref, limits, &firstDeclared));
  try {
    out->resize(ref.rawBytes);
  } catch (const std::bad_alloc&) {
    return Status::corrupt("cannot allocate " + std::to_string(ref.rawBytes) + " bytes");
  }
  return inflateChecked(data, size, ref, firstDeclared, out->data());
}

Status decodePayloadInto(const uint8_t* data, size_t size, const PayloadRef& ref, const Limits& limits, uint8_t* out,
                         size_t outBytes) {
  uint64_t firstDeclared = 0;
  RL_CHECK(checkPayloadFrame(data, size, ref, limits, &firstDeclared));
  if (outBytes != ref.rawBytes)
    return Status::corrupt("payload of " + std::to_string(ref.rawBytes) + " bytes, room for " +
                           std::to_string(outBytes));
  return inflateChecked(data, size, ref, firstDeclared, out);
}

Status decodePayloadStreaming(const BlobSource& read, size_t size, const PayloadRef& ref, const Limits& limits,
                              uint8_t* out, size_t outBytes, size_t chunkBytes) {
  auto fail = [](std::string text) { return Status::corrupt(std::move(text)); };
  if (outBytes != ref.rawBytes)
    return fail("payload of " + std::to_string(ref.rawBytes) + " bytes, room for " + std::to_string(outBytes));
  // A piece per thread, kept (the frame header, at most ZSTD_FRAMEHEADERSIZE_MAX bytes, comes in the first piece).
  static thread_local std::vector<uint8_t> piece;
  const size_t pieceBytes = std::max<size_t>(chunkBytes, ZSTD_FRAMEHEADERSIZE_MAX);
  try {
    if (piece.size() < pieceBytes) piece.resize(pieceBytes);
  } catch (const std::bad_alloc&) {
    return fail("cannot allocate " + std::to_string(pieceBytes) + " bytes to read the blob");
  }
  // Poisoned past what it holds, so that AddressSanitizer still sees a read past the piece (no-ops in other builds).
  auto fill = [&](uint64_t at, size_t bytes) {
    ASAN_UNPOISON_MEMORY_REGION(piece.data(), piece.size());
    const bool ok = read(at, piece.data(), bytes);
    ASAN_POISON_MEMORY_REGION(piece.data() + bytes, piece.size() - bytes);
    return ok;
  };
  struct Unpoison {
    std::vector<uint8_t>& v;
    ~Unpoison() { ASAN_UNPOISON_MEMORY_REGION(v.data(), v.size()); }
  } unpoison{piece};
  uint64_t taken = std::min<uint64_t>(size, pieceBytes);
  if (!fill(0, static_cast<size_t>(taken))) return fail("short read");
  uint64_t firstDeclared = 0;
  RL_CHECK(checkFrameHeader(piece.data(), static_cast<size_t>(taken), size, ref, limits, &firstDeclared));
  bool first = true;
  auto nextPiece = [&](const uint8_t** at, size_t* bytes) {
    if (!first) {
      const size_t next = static_cast<size_t>(std::min<uint64_t>(size - taken, pieceBytes));
      if (!fill(taken, next)) return false;
      taken += next;
      *bytes = next;
    } else {
      *bytes = static_cast<size_t>(taken);
    }
    first = false;
    *at = piece.data();
    return true;
  };
  return inflateStreaming(nextPiece, read, size, ref, firstDeclared, out, outBytes);
}

namespace {

bool isManifestKey(const std::string& key) {
  static const std::set<std::string> known = {"format",
                                              "version_major",
                                              "version_minor",
                                              "rank",
                                              "world_size",
                                              "local_rank",
                                              "host",
                                              "pid",
                                              "gpu_name",
                                              "gpu_uuid",
                                              "nccl_version",
                                              "mode",
                                              "writer",
                                              "start_time_ns",
                                              "end_time_ns",
                                              "env",
                                              "closed",
                                              "records_written",
                                              "records_dropped",
                                              "payloads_written",
                                              "payloads_dropped",
                                              "payload_raw_bytes",
                                              "payload_compressed_bytes",
                                              "segments",
                                              "payload_files",
                                              "counters",
                                              "cpu_model",
                                              "cpus",
                                              "shared_gpu"};
  return known.count(key) != 0;
}

// No msgpack bin and no str that is not valid UTF-8, anywhere in `o` (map keys included).
Status strictText(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::BIN:
      return Status::corrupt("msgpack bin where a str is expected");
    case msgpack::type::STR:
      if (validUtf8(o.via.str.ptr, o.via.str.size)) return Status::ok();
      return Status::corrupt("str that is not valid UTF-8");
    case msgpack::type::ARRAY:
      for (uint32_t i = 0; i < o.via.array.size; ++i) RL_CHECK(strictText(o.via.array.ptr[i]));
      return Status::ok();
    case msgpack::type::MAP:
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        RL_CHECK(strictText(o.via.map.ptr[i].key));
        RL_CHECK(strictText(o.via.map.ptr[i].val));
      }
      return Status::ok();
    default:
      return Status::ok();
  }
}

// No map in `o` holds a key twice (keys compared as their msgpack bytes' type and value: str keys by text).
Status noRepeatedKeys(const msgpack::object& o) {
  if (o.type == msgpack::type::ARRAY) {
    for (uint32_t i = 0; i < o.via.array.size; ++i) RL_CHECK(noRepeatedKeys(o.via.array.ptr[i]));
  } else if (o.type == msgpack::type::MAP) {
    std::set<std::string> seen;  // each key as its msgpack bytes: n log n for a hostile map of a million keys
    for (uint32_t i = 0; i < o.via.map.size; ++i) {
      const msgpack::object& k = o.via.map.ptr[i].key;
      msgpack::sbuffer packed;
      msgpack::pack(packed, k);
      if (!seen.emplace(packed.data(), packed.size()).second)
        return Status::corrupt(k.type == msgpack::type::STR
                                   ? "key '" + std::string(k.via.str.ptr, k.via.str.size) + "' repeated"
                                   : std::string("a map key repeated"));
      RL_CHECK(noRepeatedKeys(o.via.map.ptr[i].val));
    }
  }
  return Status::ok();
}

// One entry of a manifest map, before the whole map is converted: a str key of valid UTF-8, not seen before (a
// repeated key is refused, not resolved to its first or last value: docs/trace-format.md), no repeated key nested in
// its value (env, counters), and a known key's value of the right type and range, so that the failure names the key.
Status checkManifestEntry(const msgpack::object_kv& entry, std::set<std::string>* seen, std::string* key) {
  const msgpack::object& k = entry.key;
  if (k.type != msgpack::type::STR || !validUtf8(k.via.str.ptr, k.via.str.size))
    return Status::corrupt("manifest has a key that is not a str of valid UTF-8");
  *key = std::string(k.via.str.ptr, k.via.str.size);
  const std::string where = "manifest key '" + *key + "'";
  if (!seen->insert(*key).second) return Status::corrupt(where + ": repeated");
  RL_CHECK(noRepeatedKeys(entry.val).withContext(where));
  if (!isManifestKey(*key)) return Status::ok();  // unknown keys are ignored
  RL_CHECK(strictText(entry.val).withContext(where));
  // Converted alone, so that a value of the wrong type or range names its key.
  msgpack::object_kv one = entry;
  msgpack::object single;
  single.type = msgpack::type::MAP;
  single.via.map.size = 1;
  single.via.map.ptr = &one;
  try {
    Manifest probe;
    single.convert(probe);
  } catch (const std::exception& e) {
    return Status::corrupt(where + ": wrong type or out of range (" + e.what() + ")");
  }
  return Status::ok();
}

Status convertManifest(const msgpack::object& map, Manifest* out) {
  // format and version_major are required: a map without them is not a manifest of any version.
  bool hasFormat = false, hasMajor = false;
  std::set<std::string> seen;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    std::string key;
    RL_CHECK(checkManifestEntry(map.via.map.ptr[i], &seen, &key));
    hasFormat = hasFormat || key == "format";
    hasMajor = hasMajor || key == "version_major";
  }
  if (!hasFormat || !hasMajor) return Status::corrupt("manifest lacks 'format' or 'version_major'");
  Manifest manifest;
  map.convert(manifest);
  if (manifest.format != kFormatName)
    return Status::corrupt("manifest key 'format': '" + manifest.format + "', expected '" + kFormatName +
                           "' (not a RankLens trace manifest)");
  if (manifest.version_major != kFormatMajor)
    return Status::corrupt("manifest key 'version_major': unsupported format version " +
                           std::to_string(manifest.version_major) + "." + std::to_string(manifest.version_minor) +
                           " (this reader: " + std::to_string(kFormatMajor) + ".x)");
  *out = std::move(manifest);
  return Status::ok();
}

}  // namespace

Status parseManifest(const uint8_t* data, size_t size, Manifest* out) {
  try {
    size_t used = 0;
    msgpack::object_handle handle =
        msgpack::unpack(reinterpret_cast<const char*>(data), size, used, nullptr, nullptr,
                        bodyLimits(static_cast<uint32_t>(std::min<size_t>(size, 16u << 20))));
    if (handle.get().type != msgpack::type::MAP) return Status::corrupt("manifest is not a msgpack map");
    return convertManifest(handle.get(), out);
  } catch (const std::exception& e) {
    return Status::corrupt(std::string("undecodable manifest: ") + e.what());
  }
}

}  // namespace trace
}  // namespace ranklens

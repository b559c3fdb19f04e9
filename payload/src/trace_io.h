// SPDX-License-Identifier: Apache-2.0
// File helpers shared by the trace writer, reader and tools (internal to payload/).
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "ranklens/status.h"

namespace ranklens {
namespace trace {

// Strict UTF-8 (as Python decodes it): no overlong forms, no surrogates, nothing above U+10FFFF. docs/trace-format.md:
// a str holding anything else is a field of the wrong type.
bool validUtf8(const char* text, size_t size);

// An allocator whose value-initialisation leaves bytes as they are: a Blob is sized to ZSTD_compressBound (about the
// payload's size) before zstd writes into it, and zero-filling that first took about 6% of the compression threads'
// time (a perf profile of the recorder's compression threads).
template <typename T>
struct UninitialisedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  UninitialisedAllocator() = default;
  template <typename U>
  UninitialisedAllocator(const UninitialisedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};
// A compressed payload blob.
using Blob = std::vector<uint8_t, UninitialisedAllocator<uint8_t>>;

int64_t realtimeNanoseconds();
// Appends one frame (u32 length, u32 CRC-32, body) to `out`.
void appendFrame(std::string* out, const char* body, size_t size);
// One payload blob: a zstd frame with the content size (and, since format 1.9, without zstd's content checksum),
// compressed with `cctx` (reset here) at `level`; `planes`: the bytes are byte planes (shuffleBlocks), which take
// planesMatchFinder's table at the fast levels.
Status compressBlob(void* cctx, int level, bool planes, const void* data, size_t size, Blob* out);
// How much of a payload compressBlobFrom puts in each zstd frame (whole 256 KiB shuffle blocks): smaller frames
// compress faster from cache, larger ones decode faster (zstd builds its tables anew for each frame). On GPT-2 small
// DDP's gradients (one H200) 256 KiB and 1 MiB recorded alike, and value replays of 1 MiB-frame traces waited
// for decoding once where 256 KiB ones waited 9-12 times; bench/payload_blob_frames compares them on any host.
constexpr size_t kPayloadFrameBytes = 1u << 20;
// A blob of `size` bytes at `data` stored as planes of `width` (0: as they are), and their CRC-32 in `crc`, without a
// copy of the payload: each `frameBytes` goes, block by block, through shuffleCopyAndChecksum into a buffer that stays
// in cache and is compressed from there as a zstd frame of its own (format 1.10: a blob is one or more frames, their
// content in order). Record mode's large payloads are compressed so straight out of staging (a copy and its reading
// back cost a full-capture recording about a third of its compression threads' CPU).
Status compressBlobFrom(void* cctx, int level, const uint8_t* data, size_t size, int width, Blob* out, uint32_t* crc,
                        size_t frameBytes = kPayloadFrameBytes);
// Parses <prefix>NNNNNN<suffix> (exactly six decimal digits, as segmentName/payloadName write them).
bool parseIndexedName(const char* name, const char* prefix, const char* suffix, uint32_t* index);
Status makeDirectories(const std::string& path);
// Writes `path` through `path.tmp` + rename: readers see the old or the new content, never a mix.
Status writeFileAtomically(const std::string& path, const void* data, size_t size);
// Reads a whole file, refusing files larger than `maxBytes`.
Status readFile(const std::string& path, uint64_t maxBytes, std::vector<uint8_t>* out);

// An append-only file with the 16-byte RankLens header; appends are whole write(2) calls.
class AppendFile {
 public:
  AppendFile() = default;
  ~AppendFile() { close(); }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  Status create(const std::string& path, uint32_t magic, uint32_t index);
  // Opens an existing file for appending (edits); checks nothing beyond existence.
  Status openExisting(const std::string& path);
  Status append(const void* data, size_t size);
  uint64_t size() const { return size_; }
  void close();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace trace
}  // namespace ranklens

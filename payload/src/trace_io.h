// SPDX-License-Identifier: Apache-2.0
// File helpers shared by the trace writer, reader and tools (internal to payload/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ranklens {
namespace trace {

int64_t realtimeNanoseconds();
// Appends one frame (u32 length, u32 CRC-32, body) to `out`.
void appendFrame(std::string* out, const char* body, size_t size);
// One payload blob: a zstd frame with the content size and zstd's checksum, compressed with `cctx` (reset here) at
// `level`. False with `error` on failure.
bool compressBlob(void* cctx, int level, const void* data, size_t size, std::vector<uint8_t>* out, std::string* error);
// Parses <prefix>NNNNNN<suffix> (exactly six decimal digits, as segmentName/payloadName write them).
bool parseIndexedName(const char* name, const char* prefix, const char* suffix, uint32_t* index);
bool makeDirectories(const std::string& path, std::string* error);
// Writes `path` through `path.tmp` + rename: readers see the old or the new content, never a mix.
bool writeFileAtomically(const std::string& path, const void* data, size_t size, std::string* error);
// Reads a whole file, refusing files larger than `maxBytes`.
bool readFile(const std::string& path, uint64_t maxBytes, std::vector<uint8_t>* out, std::string* error);

// An append-only file with the 16-byte RankLens header; appends are whole write(2) calls.
class AppendFile {
 public:
  AppendFile() = default;
  ~AppendFile() { close(); }
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  bool create(const std::string& path, uint32_t magic, uint32_t index, std::string* error);
  // Opens an existing file for appending (edits); checks nothing beyond existence.
  bool openExisting(const std::string& path, std::string* error);
  bool append(const void* data, size_t size, std::string* error);
  uint64_t size() const { return size_; }
  void close();

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

}  // namespace trace
}  // namespace ranklens

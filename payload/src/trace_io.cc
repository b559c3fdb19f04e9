// SPDX-License-Identifier: Apache-2.0
#include "trace_io.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <ctime>

#include <zstd.h>

#include "ranklens/trace.h"

namespace ranklens {
namespace trace {

int64_t realtimeNanoseconds() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void appendFrame(std::string* out, const char* body, size_t size) {
  const uint32_t length = static_cast<uint32_t>(size), crc = crc32Bytes(body, size);
  out->append(reinterpret_cast<const char*>(&length), 4);
  out->append(reinterpret_cast<const char*>(&crc), 4);
  out->append(body, size);
}

namespace {
void setBlobParameters(ZSTD_CCtx* cctx, int level, bool planes) {
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_and_parameters);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, level);
  if (planes && planesMatchFinder(level)) {
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_hashLog, kPlanesHashLog);
    ZSTD_CCtx_setParameter(cctx, ZSTD_c_minMatch, kPlanesMinMatch);
  }
  // No zstd content checksum (format 1.9): rawCrc32, of every byte, checks what a reader decodes; without zstd's
  // XXH64 over the same bytes real gradients as planes compressed 5-13% faster and decompressed 34-37% faster
  // (bench/payload_codec_choices --checksum both measures it).
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 0);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_contentSizeFlag, 1);
}
}  // namespace

Status compressBlobFrom(void* context, int level, const uint8_t* data, size_t size, int width, Blob* out, uint32_t* crc,
                        size_t frameBytes) {
  if (size == 0) {  // compressBlob's empty frame, which every zstd decoder takes
    *crc = 0;
    return compressBlob(context, level, false, data, 0, out);
  }
  auto* cctx = static_cast<ZSTD_CCtx*>(context);
  setBlobParameters(cctx, level, validShuffle(width) && width != 0);
  // Whole shuffle blocks per frame, so that a frame's planes are the format's (shuffleBlocks).
  frameBytes = std::max(kShuffleBlockBytes, frameBytes / kShuffleBlockBytes * kShuffleBlockBytes);
  static thread_local std::vector<uint8_t> buffer;
  if (buffer.size() < std::min(frameBytes, size)) buffer.resize(std::min(frameBytes, size));
  const size_t frames = (size + frameBytes - 1) / frameBytes;
  out->resize(frames * ZSTD_compressBound(std::min(frameBytes, size)));
  size_t written = 0;
  *crc = 0;
  // A frame at a time, compressed in one call from the buffer while it is in cache: zstd's streaming API would copy
  // every block into a window of its own first (a quarter more of these threads' time on gradient planes).
  for (size_t at = 0; at < size; at += frameBytes) {
    const size_t length = std::min(frameBytes, size - at);
    for (size_t block = 0; block < length; block += kShuffleBlockBytes)
      *crc = shuffleCopyAndChecksum(buffer.data() + block, data + at + block,
                                    std::min(kShuffleBlockBytes, length - block), width, *crc);
    const size_t n = ZSTD_compress2(cctx, out->data() + written, out->size() - written, buffer.data(), length);
    if (ZSTD_isError(n)) {
      out->clear();
      return Status::internalError(std::string("zstd: ") + ZSTD_getErrorName(n));
    }
    written += n;
  }
  out->resize(written);
  return Status::ok();
}

Status compressBlob(void* context, int level, bool planes, const void* data, size_t size, Blob* out) {
  auto* cctx = static_cast<ZSTD_CCtx*>(context);
  setBlobParameters(cctx, level, planes);
  static const uint8_t kEmpty = 0;
  out->resize(ZSTD_compressBound(size));
  const size_t n = ZSTD_compress2(cctx, out->data(), out->size(), size ? data : &kEmpty, size);
  if (ZSTD_isError(n)) {
    out->clear();
    return Status::internalError(std::string("zstd: ") + ZSTD_getErrorName(n));
  }
  out->resize(n);
  return Status::ok();
}

bool parseIndexedName(const char* name, const char* prefix, const char* suffix, uint32_t* index) {
  const size_t plen = strlen(prefix), slen = strlen(suffix), len = strlen(name);
  if (len != plen + 6 + slen || strncmp(name, prefix, plen) != 0 || strcmp(name + plen + 6, suffix) != 0) return false;
  uint32_t value = 0;
  for (size_t i = plen; i < plen + 6; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    value = value * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  *index = value;
  return true;
}

Status makeDirectories(const std::string& path) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if ((i == path.size() || path[i] == '/') && !partial.empty()) {
      if (mkdir(partial.c_str(), 0777) != 0 && errno != EEXIST)
        return Status::systemError(partial + ": cannot create directory: " + strerror(errno));
    }
    if (i < path.size()) partial += path[i];
  }
  return Status::ok();
}

static bool writeAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

Status writeFileAtomically(const std::string& path, const void* data, size_t size) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0 || !writeAll(fd, data, size) || ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    Status failed = Status::systemError(path + ": cannot write: " + strerror(errno));
    if (fd >= 0) ::unlink(tmp.c_str());
    return failed;
  }
  return Status::ok();
}

Status readFile(const std::string& path, uint64_t maxBytes, std::vector<uint8_t>* out) {
  // O_NONBLOCK: a FIFO (or a device) in place of a trace file would otherwise block the open until a writer comes,
  // and with it every reader; it is refused below as what it is. (Reads of a regular file ignore the flag.)
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return Status::systemError(path + ": cannot open: " + strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::corrupt(path + ": not a regular file" +
                           (S_ISFIFO(st.st_mode) ? std::string(" (a FIFO): a trace's files are regular files; replace "
                                                               "it with the file it stands for")
                                                 : std::string()));
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return Status::corrupt(path + ": " + std::to_string(st.st_size) + " bytes exceeds the limit of " +
                           std::to_string(maxBytes));
  }
  try {
    out->resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {  // a sparse or damaged file claiming more than this machine can hold
    ::close(fd);
    return Status::corrupt(path + ": " + std::to_string(st.st_size) +
                           " bytes: not enough memory to read it (a "
                           "trace's files are far smaller: is it sparse or damaged? rlpayload verify checks the rest)");
  }
  size_t done = 0;
  while (done < out->size()) {
    ssize_t n = ::read(fd, out->data() + done, out->size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  out->resize(done);  // a file shrinking under us reads as truncated, which the parsers report
  return Status::ok();
}

Status AppendFile::create(const std::string& path, uint32_t magic, uint32_t index) {
  close();
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) return Status::systemError(path + ": cannot create: " + strerror(errno));
  uint8_t header[kFileHeaderBytes] = {};
  const uint16_t major = kFormatMajor, minor = kFormatMinor;
  memcpy(header, &magic, 4);
  memcpy(header + 4, &major, 2);
  memcpy(header + 6, &minor, 2);
  memcpy(header + 8, &index, 4);
  size_ = 0;
  return append(header, sizeof(header));
}

Status AppendFile::openExisting(const std::string& path) {
  close();
  path_ = path;
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  struct stat st;
  if (fd_ < 0 || fstat(fd_, &st) != 0)
    return Status::systemError(path + ": cannot open for appending: " + strerror(errno));
  size_ = static_cast<uint64_t>(st.st_size);
  return Status::ok();
}

Status AppendFile::append(const void* data, size_t size) {
  if (!writeAll(fd_, data, size)) return Status::systemError(path_ + ": write failed: " + strerror(errno));
  size_ += size;
  return Status::ok();
}

void AppendFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

uint64_t hostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), pageBytes = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && pageBytes > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageBytes) : 0;
}

bool hostMemoryInfo(uint64_t* availableBytes, uint64_t* totalBytes) {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  uint64_t value = 0, available = 0, total = 0;
  while (meminfo >> key >> value) {
    std::getline(meminfo, unit);
    if (key == "MemTotal:")
      total = value * 1024;
    else if (key == "MemAvailable:")
      available = value * 1024;
  }
  if (total == 0 || available == 0) return false;
  *availableBytes = available;
  *totalBytes = total;
  return true;
}

void describeHost(Manifest* manifest) {
  char host[256] = "";
  gethostname(host, sizeof(host) - 1);
  manifest->host = host;
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t value = line.find_first_not_of(" \t", line.find(':') + 1);  // (no ':': from 0, the whole line)
    if (value != std::string::npos) manifest->cpu_model = line.substr(value);
    break;
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) manifest->cpus = CPU_COUNT(&set);
}

}  // namespace trace
}  // namespace ranklens

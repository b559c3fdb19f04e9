// SPDX-License-Identifier: Apache-2.0
// appendEditedPayload: replace a call's payload without losing anything. The new bytes go to a NEW payload file
// (existing payload files are never touched), then one write(2) appends a superseding PayloadRef and an Edit record
// to the last segment, then the index and the manifest are rewritten atomically. Each step is made durable (fsync)
// before the next one depends on it, so a crash at any point leaves the old or the new value readable.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>

#include "ranklens/trace.h"
#include "trace_io.h"

namespace ranklens {
namespace trace {
namespace {

// fsync by path (AppendFile does not expose its descriptor); a directory makes a new name in it durable.
bool syncPath(const std::string& path, bool directory, std::string* error) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    *error = path + ": cannot sync to disk: " + strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  ::close(fd);
  return true;
}

template <typename Record>
std::string frameOf(RecordType type, const Record& record) {
  msgpack::sbuffer body;
  packRecordBody(&body, type, record);
  std::string frame;
  appendFrame(&frame, body.data(), body.size());
  return frame;
}

// Rewrites the manifest map with `payload_files` replaced, keeping every other key (known or not) as it was.
bool updateManifest(const std::string& path, uint32_t payloadFiles, std::string* error) {
  std::vector<uint8_t> data;
  if (!readFile(path, 16u << 20, &data, error)) return false;
  try {
    size_t used = 0;
    msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size(), used);
    const msgpack::object& map = handle.get();
    if (map.type != msgpack::type::MAP) {
      *error = path + ": offset 0: manifest is not a msgpack map";
      return false;
    }
    bool present = false;
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const msgpack::object& key = map.via.map.ptr[i].key;
      present = present || (key.type == msgpack::type::STR && key.as<std::string>() == "payload_files");
    }
    msgpack::sbuffer out;
    msgpack::packer<msgpack::sbuffer> pk(out);
    pk.pack_map(map.via.map.size + (present ? 0 : 1));
    for (uint32_t i = 0; i < map.via.map.size; ++i) {
      const msgpack::object_kv& kv = map.via.map.ptr[i];
      pk.pack(kv.key);
      if (kv.key.type == msgpack::type::STR && kv.key.as<std::string>() == "payload_files")
        pk.pack(payloadFiles);
      else
        pk.pack(kv.val);
    }
    if (!present) {
      pk.pack(std::string("payload_files"));
      pk.pack(payloadFiles);
    }
    return writeFileAtomically(path, out.data(), out.size(), error);
  } catch (const std::exception& e) {
    *error = path + ": offset 0: undecodable manifest: " + e.what();
    return false;
  }
}

// An exclusive advisory lock on the rank directory: two editors never interleave.
class DirectoryLock {
 public:
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  bool acquire(const std::string& dir, std::string* error) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) {
      *error = dir + ": cannot open: " + strerror(errno);
      return false;
    }
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      *error = dir + ": " +
               (errno == EWOULDBLOCK ? std::string("another edit of this rank directory is in progress")
                                     : std::string("cannot lock: ") + strerror(errno));
      return false;
    }
    return true;
  }

 private:
  int fd_ = -1;
};

std::string callName(const PayloadRef& ref) {
  std::string name = "comm " + std::to_string(ref.commId) + " " + events::opName(static_cast<events::Op>(ref.op));
  if (ref.op == static_cast<int>(events::Op::kSend) || ref.op == static_cast<int>(events::Op::kRecv))
    name += " peer " + std::to_string(ref.peer);
  return name + " seq " + std::to_string(ref.seq);
}

}  // namespace

bool appendEditedPayload(const std::string& rankDir, const PayloadRef& original, const void* data, size_t bytes,
                         const Edit& edit, int zstdLevel, std::string* error) {
  std::string sink;
  if (error == nullptr) error = &sink;
  // --- checks that need no file
  const size_t elem = events::datatypeBytes(original.datatype);
  if (elem == 0) {
    *error = rankDir + ": " + callName(original) + ": datatype " + std::to_string(original.datatype) +
             " is not an NCCL datatype";
    return false;
  }
  if (bytes % elem != 0) {
    *error = rankDir + ": " + callName(original) + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
             std::to_string(elem) + "-byte elements";
    return false;
  }
  if (data == nullptr && bytes != 0) {
    *error = rankDir + ": no data given";
    return false;
  }
  if (zstdLevel < ZSTD_minCLevel() || zstdLevel > ZSTD_maxCLevel()) {
    *error = rankDir + ": zstd level " + std::to_string(zstdLevel) + " outside " + std::to_string(ZSTD_minCLevel()) +
             ".." + std::to_string(ZSTD_maxCLevel());
    return false;
  }

  DirectoryLock lock;
  if (!lock.acquire(rankDir, error)) return false;

  // --- the manifest: must parse; a trace whose writer may still be running is not edited
  const std::string manifestPath = rankDir + "/manifest.msgpack";
  Manifest manifest;
  {
    std::vector<uint8_t> bytesRead;
    std::string reason;
    if (!readFile(manifestPath, 16u << 20, &bytesRead, error)) return false;
    if (!parseManifest(bytesRead.data(), bytesRead.size(), &manifest, &reason)) {
      *error = manifestPath + ": offset 0: " + reason;
      return false;
    }
  }
  if (!manifest.closed && manifest.pid > 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    if (manifest.host == host && (kill(static_cast<pid_t>(manifest.pid), 0) == 0 || errno == EPERM)) {
      *error = rankDir + ": the trace is not closed and its writer (pid " + std::to_string(manifest.pid) +
               " on this host) is still running; edit it after the writer has closed it";
      return false;
    }
  }

  // --- the files present: contiguous segments (append to the last), the next free payload index
  std::map<uint32_t, std::string> segments;
  uint32_t nextPayload = manifest.payload_files;
  {
    DIR* d = opendir(rankDir.c_str());
    if (d == nullptr) {
      *error = rankDir + ": cannot list: " + strerror(errno);
      return false;
    }
    while (dirent* e = readdir(d)) {
      uint32_t index = 0;
      if (parseIndexedName(e->d_name, "seg-", ".rls", &index))
        segments[index] = e->d_name;
      else if (parseIndexedName(e->d_name, "pay-", ".rlp", &index))
        nextPayload = std::max(nextPayload, index + 1);
    }
    closedir(d);
  }
  if (segments.empty()) {
    *error = rankDir + "/" + segmentName(0) + ": no segment file to append the edit to";
    return false;
  }
  uint32_t expected = 0;
  for (const auto& [index, name] : segments) {
    if (index != expected) {
      *error = rankDir + "/" + segmentName(expected) + ": segment missing (next present: " + name +
               "); readers stop before it, so an edit appended later would be invisible: repair the trace first";
      return false;
    }
    ++expected;
  }
  if (nextPayload > kMaxFileIndex) {
    *error = rankDir + ": no payload file index left (" + payloadName(kMaxFileIndex) + " exists)";
    return false;
  }
  const uint32_t lastIndex = segments.rbegin()->first;
  const std::string lastSegment = rankDir + "/" + segments.rbegin()->second;

  // --- the last segment must end with an intact frame: appending after a torn or corrupt frame would hide the edit
  // from every reader (they stop at the damage).
  Limits limits;
  std::vector<uint8_t> segmentImage;
  if (!readFile(lastSegment, ~0ull, &segmentImage, error)) return false;
  Problem problem;
  if (!parseSegment(segmentImage.data(), segmentImage.size(), lastIndex, lastSegment, limits, nullptr, &problem)) {
    *error = problem.describe() +
             (problem.truncated ? " (the last segment ends with a truncated frame, as a crash leaves it)"
                                : " (the last segment is corrupt)") +
             "; refusing to append an edit after it, because readers stop at the damage and would never see it";
    return false;
  }

  // --- `original` must be the call's current payload (an edit made since would otherwise be silently undone)
  {
    auto reader = TraceReader::open(rankDir, limits, error);
    if (!reader) return false;
    auto current = reader->payload(original.commId, original.op, original.peer, original.seq);
    if (!current) {
      *error = rankDir + ": " + callName(original) + ": no payload recorded for this call";
      return false;
    }
    if (current->file != original.file || current->offset != original.offset ||
        current->compressedBytes != original.compressedBytes || current->rawCrc32 != original.rawCrc32 ||
        current->op != original.op || current->datatype != original.datatype || current->peer != original.peer) {
      *error = rankDir + ": " + callName(original) + ": the given reference (" + payloadName(original.file) +
               " offset " + std::to_string(original.offset) + ") is not the call's current payload (" +
               payloadName(current->file) + " offset " + std::to_string(current->offset) + "); re-read it and retry";
      return false;
    }
  }

  // --- compress: one zstd frame with the content size, as the writer makes them
  Blob blob;
  {
    std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
    std::string why;
    if (cctx == nullptr || !compressBlob(cctx.get(), zstdLevel, /*planes=*/false, data, bytes, &blob, &why)) {
      *error = rankDir + ": " + (cctx ? why : std::string("zstd: cannot create a compression context"));
      return false;
    }
  }

  PayloadRef ref = original;
  ref.count = bytes / elem;
  ref.rawBytes = bytes;
  ref.file = nextPayload;
  ref.offset = kFileHeaderBytes;
  ref.compressedBytes = blob.size();
  ref.rawCrc32 = crc32Bytes(bytes ? data : "", bytes);
  ref.zstdLevel = zstdLevel;
  ref.shuffle = 0;  // the edited bytes are stored as they are, whatever the original blob did
  Edit provenance = edit;
  provenance.commId = original.commId;  // the Edit names the call it changed, whatever the caller filled in
  provenance.seq = original.seq;
  provenance.op = original.op;
  provenance.peer = original.peer;
  if (provenance.timeNs == 0) provenance.timeNs = realtimeNanoseconds();
  const std::string refFrame = frameOf(RecordType::kPayloadRef, ref);
  const std::string editFrame = frameOf(RecordType::kEdit, provenance);
  const WriterOptions writerDefaults;
  if (editFrame.size() - kFrameHeaderBytes > writerDefaults.maxRecordBytes) {
    *error = rankDir + ": the Edit record would be " + std::to_string(editFrame.size() - kFrameHeaderBytes) +
             " bytes, over the " + std::to_string(writerDefaults.maxRecordBytes) +
             "-byte record limit (detail too long)";
    return false;
  }

  // --- 1. the segment is opened first and must still be the size that was checked
  AppendFile segment;
  if (!segment.openExisting(lastSegment, error)) return false;
  if (segment.size() != segmentImage.size()) {
    *error = lastSegment + ": changed while the edit was prepared (" + std::to_string(segmentImage.size()) + " -> " +
             std::to_string(segment.size()) + " bytes); is a writer still running?";
    return false;
  }
  // --- 2. the blob, in a new payload file, durable before anything refers to it. First the journal (kEditJournal):
  // an edit killed from here on leaves it, so that verify can say "interrupted edit" and how to finish or roll back,
  // instead of calling the trace damaged (its counters then disagree with its files, though nothing was lost).
  const std::string payloadPath = rankDir + "/" + payloadName(nextPayload);
  const std::string journalPath = rankDir + "/" + kEditJournal;
  {
    const std::string journal = "segment " + lastSegment.substr(lastSegment.rfind('/') + 1) + " " +
                                std::to_string(segmentImage.size()) + "\npayload " + payloadName(nextPayload) +
                                "\ncall " + callName(original) + "\n";
    if (!writeFileAtomically(journalPath, journal.data(), journal.size(), error)) return false;
  }
  // A test hook: stop as a killed edit would, after the named step (payload: the blob written, reference: the
  // reference appended), to check what verify says of it.
  const char* stopAfter = getenv("RANKLENS_TEST_EDIT_STOP_AFTER");
  const std::string stop = stopAfter ? stopAfter : "";
  {
    AppendFile payload;
    if (!payload.create(payloadPath, kPayloadMagic, nextPayload, error) ||
        !payload.append(blob.data(), blob.size(), error)) {
      payload.close();
      ::unlink(payloadPath.c_str());
      ::unlink(journalPath.c_str());
      return false;
    }
    payload.close();
    if (!syncPath(payloadPath, false, error) || !syncPath(rankDir, true, error)) return false;
  }
  if (stop == "payload") _exit(137);
  // --- 3. reference + provenance in one write(2): a crash leaves none or a torn tail (readers report it, and the
  // previous reference stays in effect)
  const std::string frames = refFrame + editFrame;
  if (!segment.append(frames.data(), frames.size(), error)) return false;
  segment.close();
  if (!syncPath(lastSegment, false, error)) return false;
  if (stop == "reference") _exit(137);

  // --- 4. the caches: index and manifest (a reader rebuilds a stale index, so a crash here loses nothing)
  std::string why;
  if (!rebuildIndex(rankDir, limits, &why)) {
    *error = "the edit of " + callName(original) + " is recorded, but the index could not be rewritten: " + why;
    return false;
  }
  if (!updateManifest(manifestPath, std::max(manifest.payload_files, nextPayload + 1), &why)) {
    *error = "the edit of " + callName(original) + " is recorded, but the manifest could not be updated: " + why;
    return false;
  }
  ::unlink(journalPath.c_str());
  return true;
}

}  // namespace trace
}  // namespace ranklens

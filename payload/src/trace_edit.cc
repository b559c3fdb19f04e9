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
#include <fstream>
#include <map>
#include <sstream>
#include <memory>

#include "ranklens/trace.h"
#include "trace_io.h"

namespace ranklens {
namespace trace {
namespace {

// fsync by path (AppendFile does not expose its descriptor); a directory makes a new name in it durable.
Status syncPath(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    Status failed = Status::systemError(path + ": cannot sync to disk: " + strerror(errno));
    if (fd >= 0) ::close(fd);
    return failed;
  }
  ::close(fd);
  return Status::ok();
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
Status updateManifest(const std::string& path, uint32_t payloadFiles) {
  std::vector<uint8_t> data;
  RL_CHECK(readFile(path, 16u << 20, &data));
  try {
    size_t used = 0;
    msgpack::object_handle handle = msgpack::unpack(reinterpret_cast<const char*>(data.data()), data.size(), used);
    const msgpack::object& map = handle.get();
    if (map.type != msgpack::type::MAP) return Status::corrupt(path + ": offset 0: manifest is not a msgpack map");
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
    return writeFileAtomically(path, out.data(), out.size());
  } catch (const std::exception& e) {
    return Status::corrupt(path + ": offset 0: undecodable manifest: " + e.what());
  }
}

// An exclusive advisory lock on the rank directory: two editors never interleave.
class DirectoryLock {
 public:
  ~DirectoryLock() {
    if (fd_ >= 0) ::close(fd_);  // closing releases the flock
  }
  Status acquire(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ < 0) return Status::systemError(dir + ": cannot open: " + strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0)
      return errno == EWOULDBLOCK ? Status::invalidUsage(dir + ": another edit of this rank directory is in progress")
                                  : Status::systemError(dir + ": cannot lock: " + strerror(errno));
    return Status::ok();
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

// Checks of the arguments that need no file.
Status checkEditArguments(const std::string& rankDir, const PayloadRef& original, const void* data, size_t bytes,
                          int zstdLevel) {
  const size_t elem = events::datatypeBytes(original.datatype);
  if (elem == 0)
    return Status::invalidArgument(rankDir + ": " + callName(original) + ": datatype " +
                                   std::to_string(original.datatype) + " is not an NCCL datatype");
  if (bytes % elem != 0)
    return Status::invalidArgument(rankDir + ": " + callName(original) + ": " + std::to_string(bytes) +
                                   " bytes is not a whole number of " + std::to_string(elem) + "-byte elements");
  if (data == nullptr && bytes != 0) return Status::invalidArgument(rankDir + ": no data given");
  if (zstdLevel < ZSTD_minCLevel() || zstdLevel > ZSTD_maxCLevel())
    return Status::invalidArgument(rankDir + ": zstd level " + std::to_string(zstdLevel) + " outside " +
                                   std::to_string(ZSTD_minCLevel()) + ".." + std::to_string(ZSTD_maxCLevel()));
  return Status::ok();
}

// The manifest: it must parse, and a trace whose writer may still be running is not edited.
Status readEditableManifest(const std::string& rankDir, const std::string& manifestPath, Manifest* manifest) {
  std::vector<uint8_t> bytesRead;
  RL_CHECK(readFile(manifestPath, 16u << 20, &bytesRead));
  if (Status parsed = parseManifest(bytesRead.data(), bytesRead.size(), manifest); !parsed.isOk())
    return Status::corrupt(manifestPath + ": offset 0: " + parsed.message());
  if (!manifest->closed && manifest->pid > 0) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    if (manifest->host == host && (kill(static_cast<pid_t>(manifest->pid), 0) == 0 || errno == EPERM))
      return Status::invalidUsage(rankDir + ": the trace is not closed and its writer (pid " +
                                  std::to_string(manifest->pid) +
                                  " on this host) is still running; edit it after the writer has closed it");
  }
  return Status::ok();
}

// Where an edit goes: the last of the contiguous segments (its frames appended to), and the next free payload index
// (a new payload file holds the blob).
struct EditTarget {
  uint32_t lastIndex = 0;
  std::string lastSegment;  // path
  uint32_t nextPayload = 0;
};

Status findEditTarget(const std::string& rankDir, const Manifest& manifest, EditTarget* target) {
  std::map<uint32_t, std::string> segments;
  uint32_t nextPayload = manifest.payload_files;
  DIR* d = opendir(rankDir.c_str());
  if (d == nullptr) return Status::systemError(rankDir + ": cannot list: " + strerror(errno));
  while (dirent* e = readdir(d)) {
    uint32_t index = 0;
    if (parseIndexedName(e->d_name, "seg-", ".rls", &index))
      segments[index] = e->d_name;
    else if (parseIndexedName(e->d_name, "pay-", ".rlp", &index))
      nextPayload = std::max(nextPayload, index + 1);
  }
  closedir(d);
  if (segments.empty())
    return Status::corrupt(rankDir + "/" + segmentName(0) + ": no segment file to append the edit to");
  uint32_t expected = 0;
  for (const auto& [index, name] : segments) {
    if (index != expected)
      return Status::corrupt(rankDir + "/" + segmentName(expected) + ": segment missing (next present: " + name +
                             "); readers stop before it, so an edit appended later would be invisible: repair the "
                             "trace first");
    ++expected;
  }
  if (nextPayload > kMaxFileIndex)
    return Status::invalidUsage(rankDir + ": no payload file index left (" + payloadName(kMaxFileIndex) + " exists)");
  target->lastIndex = segments.rbegin()->first;
  target->lastSegment = rankDir + "/" + segments.rbegin()->second;
  target->nextPayload = nextPayload;
  return Status::ok();
}

// The last segment must end with an intact frame: appending after a torn or corrupt frame would hide the edit from
// every reader (they stop at the damage). Its size goes to `size`, to check that nothing appends meanwhile.
Status checkLastSegmentIntact(const EditTarget& target, const Limits& limits, uint64_t* size) {
  std::vector<uint8_t> segmentImage;
  RL_CHECK(readFile(target.lastSegment, ~0ull, &segmentImage));
  Problem problem;
  if (!parseSegment(segmentImage.data(), segmentImage.size(), target.lastIndex, target.lastSegment, limits, nullptr,
                    &problem))
    return Status::corrupt(
        problem.describe() +
        (problem.truncated ? " (the last segment ends with a truncated frame, as a crash leaves it)"
                           : " (the last segment is corrupt)") +
        "; refusing to append an edit after it, because readers stop at the damage and would never see it");
  *size = segmentImage.size();
  return Status::ok();
}

// `original` must be the call's current payload: an edit made since would otherwise be silently undone.
Status checkCurrentPayload(const std::string& rankDir, const PayloadRef& original, const Limits& limits) {
  std::unique_ptr<TraceReader> reader;
  RL_CHECK(TraceReader::open(rankDir, limits, &reader));
  auto current = reader->payload(original.commId, original.op, original.peer, original.seq);
  if (!current)
    return Status::invalidUsage(rankDir + ": " + callName(original) + ": no payload recorded for this call");
  if (current->file != original.file || current->offset != original.offset ||
      current->compressedBytes != original.compressedBytes || current->rawCrc32 != original.rawCrc32 ||
      current->op != original.op || current->datatype != original.datatype || current->peer != original.peer)
    return Status::invalidUsage(rankDir + ": " + callName(original) + ": the given reference (" +
                                payloadName(original.file) + " offset " + std::to_string(original.offset) +
                                ") is not the call's current payload (" + payloadName(current->file) + " offset " +
                                std::to_string(current->offset) + "); re-read it and retry");
  return Status::ok();
}

// The new bytes as one zstd frame with the content size, as the writer makes them (stored as they are, whatever
// the original blob did), and the PayloadRef + Edit frames that make them the call's payload.
Status prepareEdit(const std::string& rankDir, const PayloadRef& original, const void* data, size_t bytes,
                   const Edit& edit, int zstdLevel, uint32_t nextPayload, Blob* blob, std::string* frames) {
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  if (cctx == nullptr) return Status::systemError(rankDir + ": zstd: cannot create a compression context");
  RL_CHECK(compressBlob(cctx.get(), zstdLevel, /*planes=*/false, data, bytes, blob).withContext(rankDir));
  PayloadRef ref = original;
  ref.count = bytes / events::datatypeBytes(original.datatype);
  ref.rawBytes = bytes;
  ref.file = nextPayload;
  ref.offset = kFileHeaderBytes;
  ref.compressedBytes = blob->size();
  ref.rawCrc32 = crc32Bytes(bytes ? data : "", bytes);
  ref.zstdLevel = zstdLevel;
  ref.shuffle = 0;
  Edit provenance = edit;
  provenance.commId = original.commId;  // the Edit names the call it changed, whatever the caller filled in
  provenance.seq = original.seq;
  provenance.op = original.op;
  provenance.peer = original.peer;
  if (provenance.timeNs == 0) provenance.timeNs = realtimeNanoseconds();
  const std::string editFrame = frameOf(RecordType::kEdit, provenance);
  const WriterOptions writerDefaults;
  if (editFrame.size() - kFrameHeaderBytes > writerDefaults.maxRecordBytes)
    return Status::invalidArgument(
        rankDir + ": the Edit record would be " + std::to_string(editFrame.size() - kFrameHeaderBytes) +
        " bytes, over the " + std::to_string(writerDefaults.maxRecordBytes) + "-byte record limit (detail too long)");
  *frames = frameOf(RecordType::kPayloadRef, ref) + editFrame;
  return Status::ok();
}

// The blob in a new payload file, durable before anything refers to it (the file and its name); removed again if it
// cannot be written whole.
Status writeEditBlob(const std::string& rankDir, const std::string& payloadPath, uint32_t index, const Blob& blob,
                     const std::string& journalPath) {
  AppendFile payload;
  Status written = payload.create(payloadPath, kPayloadMagic, index);
  if (written.isOk()) written = payload.append(blob.data(), blob.size());
  payload.close();
  if (!written.isOk()) {
    ::unlink(payloadPath.c_str());
    ::unlink(journalPath.c_str());
    return written;
  }
  RL_CHECK(syncPath(payloadPath, false));
  return syncPath(rankDir, true);
}

EditInterruptHook editInterruptHook = nullptr;

void interruptedAfter(const char* step) {
  if (editInterruptHook != nullptr) editInterruptHook(step);
}

}  // namespace

void setEditInterruptHookForTesting(EditInterruptHook hook) { editInterruptHook = hook; }

Status appendEditedPayload(const std::string& rankDir, const PayloadRef& original, const void* data, size_t bytes,
                           const Edit& edit, int zstdLevel) {
  RL_CHECK(checkEditArguments(rankDir, original, data, bytes, zstdLevel));
  DirectoryLock lock;
  RL_CHECK(lock.acquire(rankDir));
  const std::string manifestPath = rankDir + "/manifest.msgpack";
  // An earlier in-place edit that was stopped midway must be rolled back first: this one would append after its
  // half and take its payload file's number.
  if (InterruptedEdit earlier; findInterruptedEdit(rankDir, &earlier))
    return Status::invalidUsage(earlier.describe() + ". Nothing was changed by this edit");
  Manifest manifest;
  RL_CHECK(readEditableManifest(rankDir, manifestPath, &manifest));
  EditTarget target;
  RL_CHECK(findEditTarget(rankDir, manifest, &target));
  const Limits limits;
  uint64_t segmentBytes = 0;
  RL_CHECK(checkLastSegmentIntact(target, limits, &segmentBytes));
  RL_CHECK(checkCurrentPayload(rankDir, original, limits));
  Blob blob;
  std::string frames;
  RL_CHECK(prepareEdit(rankDir, original, data, bytes, edit, zstdLevel, target.nextPayload, &blob, &frames));

  // --- 1. the segment is opened first and must still be the size that was checked
  AppendFile segment;
  RL_CHECK(segment.openExisting(target.lastSegment));
  if (segment.size() != segmentBytes)
    return Status::invalidUsage(target.lastSegment + ": changed while the edit was prepared (" +
                                std::to_string(segmentBytes) + " -> " + std::to_string(segment.size()) +
                                " bytes); is a writer still running?");
  // --- 2. the blob, in a new payload file, durable before anything refers to it. First the journal (kEditJournal):
  // an edit killed from here on leaves it, so that verify can say "interrupted edit" and how to finish or roll back,
  // instead of calling the trace damaged (its counters then disagree with its files, though nothing was lost).
  const std::string payloadPath = rankDir + "/" + payloadName(target.nextPayload);
  const std::string journalPath = rankDir + "/" + kEditJournal;
  const std::string journal = "segment " + target.lastSegment.substr(target.lastSegment.rfind('/') + 1) + " " +
                              std::to_string(segmentBytes) + "\npayload " + payloadName(target.nextPayload) +
                              "\ncall " + callName(original) + "\n";
  RL_CHECK(writeFileAtomically(journalPath, journal.data(), journal.size()));
  RL_CHECK(writeEditBlob(rankDir, payloadPath, target.nextPayload, blob, journalPath));
  interruptedAfter("payload");
  // --- 3. reference + provenance in one write(2): a crash leaves none or a torn tail (readers report it, and the
  // previous reference stays in effect)
  RL_CHECK(segment.append(frames.data(), frames.size()));
  segment.close();
  RL_CHECK(syncPath(target.lastSegment, false));
  interruptedAfter("reference");

  // --- 4. the caches: index and manifest (a reader rebuilds a stale index, so a crash here loses nothing)
  if (Status indexed = rebuildIndex(rankDir, limits); !indexed.isOk())
    return Status::error(indexed.code(),
                         "the edit of " + callName(original) +
                             " is recorded, but the index could not be rewritten: " + indexed.message());
  if (Status updated = updateManifest(manifestPath, std::max(manifest.payload_files, target.nextPayload + 1));
      !updated.isOk())
    return Status::error(updated.code(),
                         "the edit of " + callName(original) +
                             " is recorded, but the manifest could not be updated: " + updated.message());
  ::unlink(journalPath.c_str());
  return Status::ok();
}

std::string InterruptedEdit::describe() const {
  return journal + ": interrupted edit of " + call +
         " (an in-place rlpayload inject was stopped), not damage: nothing recorded is lost. To roll it back, "
         "truncate " +
         segment + " to " + std::to_string(segmentBytes) + " bytes and remove " + payload + ", index.msgpack and " +
         kEditJournal + "; to finish it, roll it back and run the same inject again";
}

bool findInterruptedEdit(const std::string& rankDir, InterruptedEdit* edit) {
  std::ifstream journal(rankDir + "/" + kEditJournal);
  if (!journal.is_open()) return false;
  *edit = InterruptedEdit{};
  edit->journal = rankDir + "/" + kEditJournal;
  std::string line, word;
  while (std::getline(journal, line)) {
    std::istringstream in(line);
    in >> word;
    if (word == "segment")
      in >> edit->segment >> edit->segmentBytes;
    else if (word == "payload")
      in >> edit->payload;
    else if (word == "call")
      std::getline(in >> std::ws, edit->call);
  }
  return true;
}

}  // namespace trace
}  // namespace ranklens

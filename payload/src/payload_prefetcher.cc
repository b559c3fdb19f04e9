// SPDX-License-Identifier: Apache-2.0
#include "ranklens/payload_prefetcher.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ranklens/free_list.h"
#include "ranklens/thread_name.h"

namespace ranklens {
namespace trace {

uint64_t autoArenaBytes(uint64_t largestStepBytes, uint64_t hostMemoryBytes) {
  uint64_t most = 8ull << 30;
  if (hostMemoryBytes > 0) most = std::min(most, std::max<uint64_t>(hostMemoryBytes / 8, 1u << 20));
  const uint64_t least = std::min<uint64_t>(512ull << 20, most);
  const uint64_t wanted = largestStepBytes > (UINT64_MAX / 4) ? UINT64_MAX : 4 * largestStepBytes;
  return std::clamp(wanted, least, most);
}

void setRecordedDeviceMemory(const Manifest& manifest, DeviceStageSizing* in) {
  const std::optional<uint64_t> total = counterValue(manifest, counter::kDeviceMemoryTotal);
  const std::optional<uint64_t> leastFree = counterValue(manifest, counter::kDeviceMemoryLeastFree);
  if (!total || !leastFree) return;
  in->recordedTotalBytes = *total;
  in->recordedLeastFreeBytes = *leastFree;
}

uint64_t autoDeviceStageBytes(const DeviceStageSizing& in, std::string* basis) {
  constexpr uint64_t kMiB = 1ull << 20, kGiB = 1ull << 30;
  auto mib = [](uint64_t bytes) { return std::to_string((bytes + (1u << 19)) >> 20) + " MiB"; };
  std::string why;
  uint64_t bytes = 256 * kMiB;
  if (in.recordedTotalBytes == 0 || in.recordedLeastFreeBytes > in.recordedTotalBytes) {
    why = "the recording does not say how much device memory the job used";
  } else {
    const uint64_t peakUse = in.recordedTotalBytes - in.recordedLeastFreeBytes;
    const uint64_t total = in.totalBytes > 0 ? in.totalBytes : in.recordedTotalBytes;
    const uint64_t margin = std::max(2 * kGiB, total / 10);
    const uint64_t headroom = total > peakUse + margin ? total - peakUse - margin : 0;
    const uint64_t twoSteps = in.largestStepBytes > UINT64_MAX / 2 ? UINT64_MAX : 2 * in.largestStepBytes;
    bytes = std::min(std::max(twoSteps, 64 * kMiB), headroom / 2);
    why = "the recorded job used up to " + mib(peakUse) + " of " + mib(in.recordedTotalBytes) + ", this GPU has " +
          mib(total) + "; two steps of payloads are " + mib(twoSteps);
  }
  if (bytes > in.arenaBytes) {
    bytes = in.arenaBytes;
    why += "; no more than the pinned memory payloads are decoded into";
  }
  if (in.freeBytes > 0 && bytes > in.freeBytes / 2) {
    bytes = in.freeBytes / 2;
    why += "; half of the " + mib(in.freeBytes) + " free now";
  }
  if (bytes < 16 * kMiB) {
    bytes = 0;
    why += "; too little to stage payloads on the device";
  }
  if (basis) *basis = why;
  return bytes;
}

struct PayloadPrefetcher::Impl {
  enum class State { kDecoding, kReady, kFailed, kAcquired, kReleased };
  // A ready payload's way into device memory: enqueuing (a worker is calling upload() without the lock), in flight
  // (its token not yet passed), done (on the device; its pinned memory is given back while nobody uses it), or host
  // only (larger than the device arena).
  enum class Upload { kNone, kEnqueuing, kInFlight, kDone, kHostOnly };
  struct Entry {
    State state = State::kDecoding;
    uint8_t* data = nullptr;  // pinned host memory (nullptr once only the device copy is kept)
    size_t bytes = 0;
    size_t reserved = 0;  // arena bytes held (0 for an own allocation)
    bool own = false;
    std::string error;
    std::function<bool()> copied;
    Upload upload = Upload::kNone;
    uint64_t token = 0;
    uint8_t* device = nullptr;
    size_t deviceReserved = 0;
  };

  const Recording& recording;
  Options options;
  Alloc alloc;
  Free freeFn;
  DeviceStage stage;
  uint8_t* arena = nullptr;
  FreeList freeBlocks;  // of the arena
  uint8_t* deviceArena = nullptr;
  FreeList deviceBlocks;
  bool uploading = false;                  // a device arena exists and no upload has failed
  std::vector<const RecordedCall*> order;  // recording.payloadOrder(), less those over options.maxPayloadBytes
  std::unordered_map<const RecordedCall*, size_t> positions;
  std::map<size_t, Entry> entries;  // by position in `order`
  // What the workers look after, so that a pass is not a scan of every entry under the lock the calling thread needs
  // (a timing replay holds thousands of small payloads): uploads in flight in the order they went up, released
  // entries, and the first position that may still need an upload.
  static constexpr int kCopyPollsPending = 4;
  std::deque<size_t> uploadQueue;
  std::set<size_t> released;
  size_t uploadCursor = 0;
  size_t nextToSchedule = 0;
  PrefetchStats stats;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  // Workers waiting for arena memory: a release wakes them. Otherwise a release wakes nobody (a wake-up is a system
  // call on the calling thread, and waking every worker on every call cost a host-bound replay ~18 us per call):
  // idle workers come by on their own within their wait (reclaim()).
  int spaceWaiters = 0;
  std::vector<std::thread> workers;

  Impl(const Recording& r, const Options& o, Alloc a, Free f, DeviceStage d)
      : recording(r), options(o), alloc(std::move(a)), freeFn(std::move(f)), stage(std::move(d)) {}

  bool reserve(size_t bytes, uint8_t** out, size_t* reserved) {
    size_t offset = 0;
    if (arena == nullptr || !freeBlocks.take(bytes, &offset)) return false;
    *out = arena + offset;
    *reserved = FreeList::rounded(bytes);
    return true;
  }

  // Gives the entry's pinned memory back (its device copy, if any, stays).
  void releaseHost(Entry& e) {
    if (e.own)
      freeFn(e.data);
    else if (e.reserved)
      freeBlocks.give(static_cast<size_t>(e.data - arena), e.reserved);
    e.data = nullptr;
    e.reserved = 0;
    e.own = false;
  }

  // Only for entries without an upload under way (uploadBusy() false): an upload still reads both memories.
  void drop(std::map<size_t, Entry>::iterator it) {
    Entry& e = it->second;
    releaseHost(e);
    if (e.deviceReserved) deviceBlocks.give(static_cast<size_t>(e.device - deviceArena), e.deviceReserved);
    entries.erase(it);
  }

  // Whether the entry's upload still reads its pinned memory; a completed one is noted (and counted) here.
  bool uploadBusy(Entry& e) {
    if (e.upload == Upload::kEnqueuing) return true;
    if (e.upload != Upload::kInFlight) return false;
    if (!stage.passed(e.token)) return true;
    e.upload = Upload::kDone;
    e.token = 0;
    stats.uploaded++;
    stats.bytesUploaded += e.bytes;
    if (e.state == State::kReady) releaseHost(e);  // nobody reads the pinned copy any more: decode further ahead
    return false;
  }

  // Passed over or unusable: dropped now, or once its upload has completed.
  void discard(std::map<size_t, Entry>::iterator it) {
    if (!uploadBusy(it->second)) return drop(it);
    it->second.state = State::kReleased;
    it->second.copied = nullptr;
    released.insert(it->first);
  }

  // Enqueues the upload of the first ready payload not yet on its way to the device, when the device arena has room
  // for it (payloads go up in call order: a later one never takes the room of an earlier one). False when there was
  // none to consider.
  bool startUpload(std::unique_lock<std::mutex>& lock) {
    if (!uploading) return false;
    // Entries before the cursor are on their way up, or will never go (acquired, released, failed, too large).
    auto from = entries.lower_bound(uploadCursor);
    while (from != entries.end() && !(from->second.upload == Upload::kNone &&
                                      (from->second.state == State::kDecoding || from->second.state == State::kReady)))
      ++from;
    uploadCursor = from == entries.end() ? (entries.empty() ? uploadCursor : entries.rbegin()->first + 1) : from->first;
    auto it = std::find_if(from, entries.end(), [](const auto& kv) {
      return kv.second.state == State::kReady && kv.second.upload == Upload::kNone && kv.second.data != nullptr &&
             !kv.second.own;
    });
    if (it == entries.end()) return false;
    Entry& e = it->second;
    if (FreeList::rounded(e.bytes) > stage.arenaBytes) {  // never fits: restored from pinned memory
      e.upload = Upload::kHostOnly;
      return true;
    }
    size_t offset = 0;
    if (!deviceBlocks.take(e.bytes, &offset)) return false;
    e.device = deviceArena + offset;
    e.deviceReserved = FreeList::rounded(e.bytes);
    e.upload = Upload::kEnqueuing;  // keeps the entry (and both memories) in place while the lock is released
    uint8_t* device = e.device;
    const uint8_t* host = e.data;
    const size_t bytes = e.bytes;
    lock.unlock();
    uint64_t token = 0;
    const bool ok = stage.upload(device, host, bytes, &token);
    lock.lock();
    Entry& same = entries.at(it->first);
    if (ok) {
      same.upload = Upload::kInFlight;
      same.token = token;
      uploadQueue.push_back(it->first);
    } else {
      deviceBlocks.give(offset, same.deviceReserved);
      same.device = nullptr;
      same.deviceReserved = 0;
      same.upload = Upload::kNone;
      stats.uploadFailures++;
      uploading = false;  // the replay goes on from pinned memory
    }
    return true;
  }

  // Released entries whose copy has completed give their memory back. Returns whether any is still in flight.
  // Every query is a CUDA call made under the lock, and a timing replay holds thousands of small payloads (DeepSpeed
  // ZeRO-3: 4,000 of 1.5-6 KiB): querying them all on every pass kept the lock from the calling thread for about
  // 0.3 ms per call. Uploads go up in call order on one stream: a pass stops at the first pending one. Calls release
  // their payloads in call order, but their copies run on the program's streams, one of which may lag: a pass polls
  // copies until kCopyPollsPending of them were still pending; what completed behind them is noticed later.
  bool reclaim() {
    while (!uploadQueue.empty()) {
      auto it = entries.find(uploadQueue.front());
      if (it != entries.end() && it->second.upload == Upload::kInFlight && uploadBusy(it->second)) break;
      uploadQueue.pop_front();
    }
    int copiesPending = 0;
    for (auto p = released.begin(); p != released.end();) {
      auto it = entries.find(*p);
      if (it == entries.end() || it->second.state != State::kReleased) {
        p = released.erase(p);
        continue;
      }
      Entry& e = it->second;
      if (e.copied && copiesPending < kCopyPollsPending) {
        if (e.copied())
          e.copied = nullptr;  // a fence answers true once
        else
          ++copiesPending;
      }
      if (!e.copied && e.upload != Upload::kEnqueuing && e.upload != Upload::kInFlight) {
        drop(it);
        p = released.erase(p);
        continue;
      }
      ++p;
    }
    return !released.empty();
  }

  // Decodes the payload of entry `position` (already inserted with memory reserved) straight into that memory,
  // without holding the lock: nothing else touches an entry while it is kDecoding (no eviction, no discard).
  void decode(std::unique_lock<std::mutex>& lock, size_t position) {
    const RecordedCall* call = order[position];
    Entry& e = entries.at(position);  // std::map: the reference outlives other insertions
    uint8_t* const dst = e.data;
    const size_t bytes = e.bytes;
    lock.unlock();
    Problem problem;
    const bool ok = recording.readPayload(*call->payload, dst, bytes, &problem);
    lock.lock();
    if (ok) {
      e.state = State::kReady;
      stats.decoded++;
      stats.bytesDecoded += e.bytes;
    } else {
      e.state = State::kFailed;
      e.error = problem.describe();
      stats.failures++;
    }
    cv.notify_all();
  }

  // Decoded ahead but passed over: the program skipped those calls.
  void discardPassedOver(size_t position) {
    for (auto it = entries.begin(); it != entries.end() && it->first < position;) {
      auto next = std::next(it);
      if (it->second.state == State::kReady || it->second.state == State::kFailed) {
        stats.skipped++;
        discard(it);
      }
      it = next;
    }
  }

  // The payload at `position` (`bytes` long), which no worker has taken on, decoded on the program's thread: room
  // first (evict what was decoded furthest ahead, then wait for copies in flight; else an own allocation). Returns
  // early, with nothing to do, when a worker takes it on while this waits for room without the lock.
  Status stageHere(std::unique_lock<std::mutex>& lock, size_t position, size_t bytes) {
    Entry e;
    e.bytes = bytes;
    while (!reserve(e.bytes, &e.data, &e.reserved)) {
      if (FreeList::rounded(e.bytes) > options.arenaBytes || arena == nullptr) break;
      // (only entries that hold pinned memory and that no upload reads)
      auto victim = std::find_if(entries.rbegin(), entries.rend(), [&](auto& kv) {
        return kv.first > position && !uploadBusy(kv.second) && kv.second.reserved > 0 &&
               (kv.second.state == State::kReady || kv.second.state == State::kFailed);
      });
      if (victim != entries.rend()) {
        stats.evicted++;
        drop(std::next(victim).base());
        continue;
      }
      if (!reclaim()) {
        bool decoding = std::any_of(entries.begin(), entries.end(),
                                    [](const auto& kv) { return kv.second.state == State::kDecoding; });
        if (!decoding) break;  // fragmented by acquired entries: use an own allocation
      }
      cv.wait_for(lock, std::chrono::microseconds(200));
      // A worker took it on: decoding it here too would write into the worker's memory beside it.
      if (entries.count(position)) return Status::ok();
    }
    if (e.data == nullptr) {
      stats.oversized++;
      e.data = static_cast<uint8_t*>(alloc(std::max<size_t>(e.bytes, 1)));
      e.own = true;
      if (e.data == nullptr)
        return Status::systemError("cannot allocate " + std::to_string(e.bytes) +
                                   " bytes of pinned memory for a payload");
    }
    entries.emplace(position, std::move(e));
    nextToSchedule = std::max(nextToSchedule, position + 1);  // else a worker decodes it again once released
    decode(lock, position);
    return Status::ok();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      const bool inFlight = reclaim();
      bool started = false, starved = false;
      while (startUpload(lock)) started = true;
      while (nextToSchedule < order.size() && entries.count(nextToSchedule)) ++nextToSchedule;
      if (nextToSchedule < order.size()) {
        const size_t bytes = order[nextToSchedule]->payload->rawBytes;
        Entry e;
        e.bytes = bytes;
        if (FreeList::rounded(bytes) > options.arenaBytes) {
          ++nextToSchedule;  // too large for the arena: acquire() decodes it into its own allocation
          continue;
        }
        if (reserve(bytes, &e.data, &e.reserved)) {
          const size_t position = nextToSchedule++;
          entries[position] = std::move(e);
          decode(lock, position);
          started = true;
        } else {
          starved = true;
        }
      }
      if (!started) {
        spaceWaiters += starved;
        cv.wait_for(lock,
                    inFlight || !uploadQueue.empty() ? std::chrono::microseconds(200) : std::chrono::milliseconds(20));
        spaceWaiters -= starved;
      }
    }
  }
};

PayloadPrefetcher::PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free,
                                     DeviceStage device)
    : impl_(std::make_unique<Impl>(recording, options, std::move(alloc), std::move(free), std::move(device))) {
  Impl& im = *impl_;
  for (const RecordedCall* call : recording.payloadOrder())
    if (options.maxPayloadBytes == 0 || call->payload->rawBytes <= options.maxPayloadBytes) im.order.push_back(call);
  for (size_t i = 0; i < im.order.size(); ++i) im.positions[im.order[i]] = i;
  if (im.order.empty()) return;
  im.arena = static_cast<uint8_t*>(im.alloc(options.arenaBytes));
  if (im.arena) im.freeBlocks.reset(options.arenaBytes);
  if (im.arena && im.stage.arenaBytes >= FreeList::kAlign && im.stage.alloc && im.stage.upload && im.stage.passed) {
    im.deviceArena = static_cast<uint8_t*>(im.stage.alloc(im.stage.arenaBytes));
    if (im.deviceArena) im.deviceBlocks.reset(im.stage.arenaBytes);
    im.uploading = im.deviceArena != nullptr;
  }
  const int threads = std::max(1, options.threads);
  for (int i = 0; i < threads && im.arena; ++i)
    im.workers.emplace_back([&im] {
      nameThisThread("RankLens Fetch");
      im.work();
    });
}

PayloadPrefetcher::PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free)
    : PayloadPrefetcher(recording, options, std::move(alloc), std::move(free), DeviceStage()) {}

PayloadPrefetcher::~PayloadPrefetcher() {
  Impl& im = *impl_;
  {
    std::lock_guard<std::mutex> lock(im.mu);
    im.stopping = true;
  }
  im.cv.notify_all();
  for (auto& t : im.workers) t.join();
  std::unique_lock<std::mutex> lock(im.mu);
  // Memory a copy may still read from is never freed: wait a little for the copies, else leak it.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  auto uploadsBusy = [&im] {
    bool any = false;
    for (auto& kv : im.entries) any = im.uploadBusy(kv.second) || any;
    return any;
  };
  while ((im.reclaim() || uploadsBusy()) && std::chrono::steady_clock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lock.lock();
  }
  bool busy = false;
  for (auto it = im.entries.begin(); it != im.entries.end();) {
    if (it->second.state == Impl::State::kReleased || it->second.state == Impl::State::kAcquired ||
        im.uploadBusy(it->second)) {
      busy = true;
      ++it;
    } else {
      auto next = std::next(it);
      im.drop(it);
      it = next;
    }
  }
  if (im.arena && !busy) im.freeFn(im.arena);
  if (im.deviceArena && !busy) im.stage.free(im.deviceArena);
}

Status PayloadPrefetcher::acquire(const RecordedCall* call, Staged* out) {
  Impl& im = *impl_;
  auto where = im.positions.find(call);
  if (where == im.positions.end()) return Status::invalidUsage("the call has no recorded payload");
  const size_t position = where->second;
  std::unique_lock<std::mutex> lock(im.mu);
  im.discardPassedOver(position);
  auto it = im.entries.find(position);
  bool waited = false;
  if (it == im.entries.end()) {
    // The program has moved past the payloads before this one: the workers go on from here (they may still take
    // this one on while stageHere waits for room), never back to one the program skipped or has used.
    im.nextToSchedule = std::max(im.nextToSchedule, position);
    im.stats.waits++;
    waited = true;
    RL_CHECK(im.stageHere(lock, position, call->payload->rawBytes));
    it = im.entries.find(position);
  }
  if (it->second.state == Impl::State::kDecoding) {
    if (!waited) im.stats.waits++;
    im.cv.wait(lock, [&] { return im.entries.at(position).state != Impl::State::kDecoding; });
    it = im.entries.find(position);
  }
  if (it->second.state == Impl::State::kFailed) {
    Status failed = Status::corrupt(it->second.error);
    im.discard(it);
    return failed;
  }
  Impl::Entry& e = it->second;
  im.uploadBusy(e);  // an upload that has just completed is used
  e.state = Impl::State::kAcquired;
  out->onDevice = e.upload == Impl::Upload::kDone;
  out->data = out->onDevice ? e.device : e.data;
  out->bytes = e.bytes;
  if (out->onDevice) im.stats.fromDevice++;
  return Status::ok();
}

void PayloadPrefetcher::release(const RecordedCall* call, std::function<bool()> copied) {
  Impl& im = *impl_;
  auto where = im.positions.find(call);
  if (where == im.positions.end()) return;
  std::lock_guard<std::mutex> lock(im.mu);
  auto it = im.entries.find(where->second);
  if (it == im.entries.end()) return;
  it->second.state = Impl::State::kReleased;
  it->second.copied = std::move(copied);
  im.released.insert(it->first);
  if (im.spaceWaiters > 0) im.cv.notify_all();
}

PrefetchStats PayloadPrefetcher::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

bool PayloadPrefetcher::arenaReady() const { return impl_->arena != nullptr; }

bool PayloadPrefetcher::deviceReady() const { return impl_->deviceArena != nullptr; }

}  // namespace trace
}  // namespace ranklens

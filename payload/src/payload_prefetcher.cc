// SPDX-License-Identifier: Apache-2.0
#include "ranklens/payload_prefetcher.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ranklens/free_list.h"

namespace ranklens {
namespace trace {

struct PayloadPrefetcher::Impl {
  enum class State { kDecoding, kReady, kFailed, kAcquired, kReleased };
  struct Entry {
    State state = State::kDecoding;
    uint8_t* data = nullptr;
    size_t bytes = 0;
    size_t reserved = 0;  // arena bytes held (0 for an own allocation)
    bool own = false;
    std::string error;
    std::function<bool()> copied;
  };

  const Recording& recording;
  Options options;
  Alloc alloc;
  Free freeFn;
  uint8_t* arena = nullptr;
  FreeList freeBlocks;  // of the arena
  std::vector<const RecordedCall*> order;  // recording.payloadOrder(), less those over options.maxPayloadBytes
  std::unordered_map<const RecordedCall*, size_t> positions;
  std::map<size_t, Entry> entries;  // by position in `order`
  size_t nextToSchedule = 0;
  PrefetchStats stats;
  mutable std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::vector<std::thread> workers;

  Impl(const Recording& r, const Options& o, Alloc a, Free f)
      : recording(r), options(o), alloc(std::move(a)), freeFn(std::move(f)) {}

  bool reserve(size_t bytes, uint8_t** out, size_t* reserved) {
    size_t offset = 0;
    if (arena == nullptr || !freeBlocks.take(bytes, &offset)) return false;
    *out = arena + offset;
    *reserved = FreeList::rounded(bytes);
    return true;
  }

  void drop(std::map<size_t, Entry>::iterator it) {
    Entry& e = it->second;
    if (e.own) freeFn(e.data);
    else if (e.reserved) freeBlocks.give(static_cast<size_t>(e.data - arena), e.reserved);
    entries.erase(it);
  }

  // Released entries whose copy has completed give their memory back. Returns whether any is still in flight.
  bool reclaim() {
    bool inFlight = false;
    for (auto it = entries.begin(); it != entries.end();) {
      if (it->second.state == State::kReleased) {
        if (!it->second.copied || it->second.copied()) {
          auto next = std::next(it);
          drop(it);
          it = next;
          continue;
        }
        inFlight = true;
      }
      ++it;
    }
    return inFlight;
  }

  // Decodes the payload of entry `position` (already inserted with memory reserved) without holding the lock.
  void decode(std::unique_lock<std::mutex>& lock, size_t position) {
    const RecordedCall* call = order[position];
    lock.unlock();
    static thread_local std::vector<uint8_t> scratch;
    Problem problem;
    const bool ok = recording.readPayload(*call->payload, &scratch, &problem);
    lock.lock();
    Entry& e = entries[position];
    if (ok && scratch.size() == e.bytes) {
      memcpy(e.data, scratch.data(), scratch.size());
      e.state = State::kReady;
      stats.decoded++;
      stats.bytesDecoded += e.bytes;
    } else {
      e.state = State::kFailed;
      e.error = ok ? problem.file + ": payload of " + std::to_string(scratch.size()) + " bytes, its reference says " +
                         std::to_string(e.bytes)
                   : problem.describe();
      stats.failures++;
    }
    if (scratch.capacity() > (64u << 20)) std::vector<uint8_t>().swap(scratch);
    cv.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu);
    while (!stopping) {
      const bool inFlight = reclaim();
      while (nextToSchedule < order.size() && entries.count(nextToSchedule)) ++nextToSchedule;
      bool started = false;
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
        }
      }
      if (!started) cv.wait_for(lock, inFlight ? std::chrono::microseconds(200) : std::chrono::milliseconds(20));
    }
  }
};

PayloadPrefetcher::PayloadPrefetcher(const Recording& recording, const Options& options, Alloc alloc, Free free)
    : impl_(std::make_unique<Impl>(recording, options, std::move(alloc), std::move(free))) {
  Impl& im = *impl_;
  for (const RecordedCall* call : recording.payloadOrder())
    if (options.maxPayloadBytes == 0 || call->payload->rawBytes <= options.maxPayloadBytes) im.order.push_back(call);
  for (size_t i = 0; i < im.order.size(); ++i) im.positions[im.order[i]] = i;
  if (im.order.empty()) return;
  im.arena = static_cast<uint8_t*>(im.alloc(options.arenaBytes));
  if (im.arena) im.freeBlocks.reset(options.arenaBytes);
  const int threads = std::max(1, options.threads);
  for (int i = 0; i < threads && im.arena; ++i) im.workers.emplace_back([&im] { im.work(); });
}

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
  while (im.reclaim() && std::chrono::steady_clock::now() < deadline) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    lock.lock();
  }
  bool busy = false;
  for (auto it = im.entries.begin(); it != im.entries.end();) {
    if (it->second.state == Impl::State::kReleased || it->second.state == Impl::State::kAcquired) {
      busy = true;
      ++it;
    } else {
      auto next = std::next(it);
      im.drop(it);
      it = next;
    }
  }
  if (im.arena && !busy) im.freeFn(im.arena);
}

bool PayloadPrefetcher::acquire(const RecordedCall* call, Staged* out, std::string* error) {
  Impl& im = *impl_;
  auto where = im.positions.find(call);
  if (where == im.positions.end()) {
    *error = "the call has no recorded payload";
    return false;
  }
  const size_t position = where->second;
  std::unique_lock<std::mutex> lock(im.mu);
  // Decoded ahead but passed over: the program skipped those calls.
  for (auto it = im.entries.begin(); it != im.entries.end() && it->first < position;) {
    auto next = std::next(it);
    if (it->second.state == Impl::State::kReady || it->second.state == Impl::State::kFailed) {
      im.stats.skipped++;
      im.drop(it);
    }
    it = next;
  }
  auto it = im.entries.find(position);
  if (it == im.entries.end()) {
    im.stats.waits++;
    Impl::Entry e;
    e.bytes = call->payload->rawBytes;
    // Room: evict what was decoded furthest ahead, then wait for copies in flight; else an own allocation.
    while (!im.reserve(e.bytes, &e.data, &e.reserved)) {
      if (FreeList::rounded(e.bytes) > im.options.arenaBytes || im.arena == nullptr) break;
      auto victim = std::find_if(im.entries.rbegin(), im.entries.rend(), [&](const auto& kv) {
        return kv.first > position && (kv.second.state == Impl::State::kReady || kv.second.state == Impl::State::kFailed);
      });
      if (victim != im.entries.rend()) {
        im.stats.evicted++;
        im.drop(std::next(victim).base());
        continue;
      }
      if (!im.reclaim()) {
        bool decoding = std::any_of(im.entries.begin(), im.entries.end(),
                                    [](const auto& kv) { return kv.second.state == Impl::State::kDecoding; });
        if (!decoding) break;  // fragmented by acquired entries: use an own allocation
      }
      im.cv.wait_for(lock, std::chrono::microseconds(200));
    }
    if (e.data == nullptr) {
      im.stats.oversized++;
      e.data = static_cast<uint8_t*>(im.alloc(std::max<size_t>(e.bytes, 1)));
      e.own = true;
      if (e.data == nullptr) {
        *error = "cannot allocate " + std::to_string(e.bytes) + " bytes of pinned memory for a payload";
        return false;
      }
    }
    it = im.entries.emplace(position, std::move(e)).first;
    if (im.nextToSchedule == position) ++im.nextToSchedule;
    im.decode(lock, position);
    it = im.entries.find(position);
  } else if (it->second.state == Impl::State::kDecoding) {
    im.stats.waits++;
    im.cv.wait(lock, [&] { return im.entries.at(position).state != Impl::State::kDecoding; });
    it = im.entries.find(position);
  }
  if (it->second.state == Impl::State::kFailed) {
    *error = it->second.error;
    im.drop(it);
    return false;
  }
  it->second.state = Impl::State::kAcquired;
  out->data = it->second.data;
  out->bytes = it->second.bytes;
  return true;
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
  im.cv.notify_all();
}

PrefetchStats PayloadPrefetcher::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

bool PayloadPrefetcher::arenaReady() const { return impl_->arena != nullptr; }

}  // namespace trace
}  // namespace ranklens

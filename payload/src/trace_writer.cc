// SPDX-License-Identifier: Apache-2.0
// TraceWriter: bounded queue -> one writer thread (segment frames, write(2) only) + zstd compression workers, which
// append the blobs they compress to payload files of their own. Records are written in the order they were accepted; a
// payload's reference is written after its blob.
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "ranklens/trace.h"
#include "ranklens/thread_name.h"
#include "trace_io.h"

namespace ranklens {
namespace trace {

namespace {

// Whether a lent payload is copied in before it is compressed: only `payload_shuffle: auto`, which decides on a
// sample of the copy; on and off compress straight out of the lender's memory (compressBlobFrom). The pool's path
// and the writer's queue accounting (a copy takes queue room, a lent payload does not) both follow it.
bool copiesLentPayload(WriterOptions::Shuffle shuffle) { return shuffle == WriterOptions::Shuffle::kAuto; }

// A payload's blob once a compression worker has compressed it and appended it to a payload file: what its PayloadRef
// needs.
struct Written {
  uint32_t rawCrc32 = 0;
  int shuffle = 0;  // PayloadRef.shuffle
  uint32_t file = 0;
  uint64_t offset = 0, compressedBytes = 0;
  Status compressed;  // failed: not compressed (the payload is dropped and counted)
  Status stored;      // failed: not written (the trace's error, as for a segment write)
};

// Payload files, written by the compression workers each into one of its own: writes into one file serialise on its
// inode (one tmpfs file took 2.3-2.9 GB/s from one thread or two; two files, one each, 5.5 GB/s), which made the
// single writer thread the bound of a full-payload recording. A worker opens the next free index when it first
// writes and when its file is full, so the indices stay contiguous.
class PayloadFiles {
 public:
  PayloadFiles(std::string dir, uint64_t fileBytes) : dir_(std::move(dir)), fileBytes_(fileBytes) {}
  struct Open {  // one worker's file
    AppendFile file;
    uint32_t index = 0;
    bool open = false;
  };
  bool append(Open* to, const Blob& blob, Written* where) {
    if (!to->open || (to->file.size() > kFileHeaderBytes && to->file.size() + blob.size() > fileBytes_)) {
      to->file.close();
      to->open = false;
      const uint32_t index = next_.fetch_add(1);
      if (index > kMaxFileIndex) {
        where->stored = Status::invalidUsage(dir_ + ": " + std::to_string(kMaxFileIndex + 1) +
                                             " payload files: raise WriterOptions.payloadFileBytes");
        return false;
      }
      where->stored = to->file.create(dir_ + "/" + payloadName(index), kPayloadMagic, index);
      if (!where->stored.isOk()) return false;
      to->index = index;
      to->open = true;
    }
    where->file = to->index;
    where->offset = to->file.size();
    where->compressedBytes = blob.size();
    where->stored = to->file.append(blob.data(), blob.size());
    return where->stored.isOk();
  }
  // Files created (the highest index + 1).
  uint32_t count() const { return std::min(next_.load(), kMaxFileIndex + 1); }

 private:
  const std::string dir_;
  const uint64_t fileBytes_;
  std::atomic<uint32_t> next_{0};
};

// Large buffers kept for reuse, by capacity, up to `limit` bytes in all: a fresh 39 MB vector is a fresh mmap whose
// page faults cost the thread that fills it more than the copy or the compression into it, and whose munmap costs the
// thread that frees it.
template <typename Buffer>
class SpareBuffers {
 public:
  static constexpr size_t kReusedFrom = 1u << 20;  // smaller buffers come cheaply from malloc's free lists
  explicit SpareBuffers(size_t limit) : limit_(limit) {}
  // An empty buffer, or a kept one with room for `bytes` (its capacity at most twice that).
  Buffer take(size_t bytes) {
    if (bytes < kReusedFrom) return {};
    std::lock_guard<std::mutex> lock(mu_);
    auto it = spare_.lower_bound(bytes);
    if (it == spare_.end() || it->first > 2 * bytes) return {};
    Buffer buffer = std::move(it->second);
    bytes_ -= it->first;
    spare_.erase(it);
    return buffer;
  }
  void keep(Buffer&& buffer) {
    const size_t capacity = buffer.capacity();
    if (capacity < kReusedFrom || capacity > limit_) return;
    std::lock_guard<std::mutex> lock(mu_);
    spare_.emplace(capacity, std::move(buffer));
    bytes_ += capacity;
    while (bytes_ > limit_) {  // the smallest go first: the large ones are the costly ones to fault in
      bytes_ -= spare_.begin()->first;
      spare_.erase(spare_.begin());
    }
  }

 private:
  const size_t limit_;
  std::mutex mu_;
  std::multimap<size_t, Buffer> spare_;  // by capacity
  size_t bytes_ = 0;
};

// A small pool of compression workers fed through a queue of jobs; each appends the blobs it compresses to a payload
// file of its own (PayloadFiles). Borrowed payloads (appendPayloadBorrowed: record mode's staging memory) are copied
// out first, by whichever worker is free next, ahead of any compression. It also keeps the large buffers that payloads
// were copied into once they are compressed, for the next payloads, and the compressed blobs once written, for the
// workers to compress into.
class CompressionPool {
 public:
  CompressionPool(int threads, int level, WriterOptions::Shuffle shuffle, size_t spareLimit, PayloadFiles* files)
      : level_(level), shuffle_(shuffle), spareRaw_(spareLimit), spareBlobs_(spareLimit / 2), files_(files) {
    for (int i = 0; i < std::max(1, threads); ++i)
      workers_.emplace_back([this] {
        nameThisThread("RankLens Zstd");
        run();
      });
  }
  ~CompressionPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  // A payload copied in: its bytes already stored as planes of `width` where they are sure to be (0: as they are;
  // under auto the decision comes after, on a sample of them), and the CRC-32 of the program's bytes. The copy is the
  // byte-plane pass and the checksum, in one (shuffleCopyAndChecksum).
  struct Copy {
    Blob raw;
    int width = 0;
    uint32_t crc = 0;
    bool reused = false;  // into a kept buffer
  };
  Copy copyIn(const void* data, size_t bytes, size_t elementBytes) {
    const StageClock clock;
    Copy copy;
    copy.raw = spareRaw_.take(bytes);
    copy.reused = copy.raw.capacity() > 0;
    copy.raw.resize(bytes);
    copy.width = shuffle_ == WriterOptions::Shuffle::kAlways ? planesWidth(elementBytes) : 0;
    copy.crc = shuffleCopyAndChecksum(copy.raw.data(), static_cast<const uint8_t*>(data), bytes, copy.width);
    clock.addTo(&times_[kCopy]);
    return copy;
  }
  // Where the payload work went, summed over the threads that did it (the manifest's counter::kPayloadStages, in this
  // order).
  enum Stage { kCopy, kCompress, kWrite, kStages };
  struct StageTime {
    std::atomic<uint64_t> wallNs{0}, cpuNs{0};
  };
  const StageTime& time(Stage stage) const { return times_[stage]; }
  // How long the pool had work, queued or running: its threads' busy share is the stages' time over threads x this
  // (gaps with no payload in flight, such as a job's start-up, left out).
  uint64_t activeNs() {
    std::lock_guard<std::mutex> lock(mu_);
    return activeNs_;
  }
  size_t threads() const { return workers_.size(); }
  // `elementBytes`: the payload's datatype width, which byte planes take.
  std::future<Written> submit(Copy&& copy, size_t elementBytes) {
    auto promise = std::make_shared<std::promise<Written>>();
    std::future<Written> result = promise->get_future();
    enqueue(jobs_, compressJob(std::move(copy), elementBytes, std::move(promise)));
    return result;
  }
  // A borrowed payload's bytes, given back to the lender once: when the worker is done reading them, or on its way out.
  struct LentBytes {
    std::function<void()> release;
    void giveBack() {
      if (release) std::exchange(release, nullptr)();
    }
    ~LentBytes() { giveBack(); }
  };
  // `data` stays the caller's until `release` is called, by the next free worker, ahead of any queued compression:
  // once it has compressed it straight out of `data` where the layout is known before (payload_shuffle on or off), or
  // copied it in (auto decides on a sample of the copy).
  std::future<Written> submitBorrowed(const void* data, size_t bytes, size_t elementBytes,
                                      std::function<void()> release) {
    auto promise = std::make_shared<std::promise<Written>>();
    std::future<Written> result = promise->get_future();
    enqueue(copies_,
            [this, data, bytes, elementBytes, release = std::move(release), promise](PayloadFiles::Open& file) mutable {
              LentBytes lent{std::move(release)};
              Copy copy;
              try {
                if (!copiesLentPayload(shuffle_)) {
                  Written written;
                  written.shuffle = planesWidth(elementBytes);
                  Blob blob = spareBlobs_.take(ZSTD_compressBound(bytes));
                  const StageClock clock;
                  written.compressed = compressBlobFrom(threadContext(), level_, static_cast<const uint8_t*>(data),
                                                        bytes, written.shuffle, &blob, &written.rawCrc32);
                  clock.addTo(&times_[kCompress]);
                  lent.giveBack();
                  store(file, blob, &written);
                  promise->set_value(std::move(written));
                  return;
                }
                copy = copyIn(data, bytes, elementBytes);
              } catch (...) {
                lent.giveBack();
                promise->set_exception(std::current_exception());
                return;
              }
              lent.giveBack();
              enqueue(jobs_, compressJob(std::move(copy), elementBytes, std::move(promise)));
            });
    return result;
  }

 private:
  using Promise = std::shared_ptr<std::promise<Written>>;
  using Job = std::function<void(PayloadFiles::Open&)>;
  Job compressJob(Copy&& copy, size_t elementBytes, Promise promise) {
    return
        [this, copy = std::move(copy), elementBytes, promise = std::move(promise)](PayloadFiles::Open& file) mutable {
          try {
            Blob blob;
            const StageClock clock;
            Written written = compress(copy, elementBytes, &blob);
            clock.addTo(&times_[kCompress]);
            spareRaw_.keep(std::move(copy.raw));
            store(file, blob, &written);
            promise->set_value(std::move(written));
          } catch (...) {
            promise->set_exception(std::current_exception());
          }
        };
  }
  // Appends a compressed blob to this worker's payload file (unless compressing it failed) and keeps its buffer.
  void store(PayloadFiles::Open& file, Blob& blob, Written* written) {
    if (written->compressed.isOk()) {
      const StageClock clock;
      files_->append(&file, blob, written);
      clock.addTo(&times_[kWrite]);
    }
    spareBlobs_.keep(std::move(blob));
  }
  void enqueue(std::deque<Job>& queue, Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue.push_back(std::move(job));
      if (inFlight_++ == 0) activeSince_ = clockNs(CLOCK_MONOTONIC);
    }
    wake_.notify_one();
  }
  // The element width byte planes would take for a payload of `elementBytes` elements, 0 for none.
  int planesWidth(size_t elementBytes) const {
    const int width = static_cast<int>(elementBytes);
    return shuffle_ == WriterOptions::Shuffle::kOff || width < 2 || !validShuffle(width) ? 0 : width;
  }
  // Payload shuffle auto: a sample of kAutoPieces pieces of kAutoPieceBytes spread over the payload (its head alone
  // misleads: GPT-2's largest gradient bucket starts with 256 KiB of dense noise, then holds bf16-valued fp32 that
  // compress 3-4x faster as planes); smaller payloads are the sample themselves, and below kAutoMinBytes too little to
  // time, they stay as they are.
  static constexpr size_t kAutoPieceBytes = 64u << 10, kAutoPieces = 4, kAutoMinBytes = 64u << 10;

  struct Timed {
    const Blob* bytes = nullptr;  // the compressed bytes, until this thread's next timedCompress of the same way
    int64_t cpuNs = 0;
    bool ok = false;
  };
  static int64_t threadCpuNs() { return clockNs(CLOCK_THREAD_CPUTIME_ID); }
  static int64_t clockNs(clockid_t id) {
    timespec ts{};
    clock_gettime(id, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  }
  // A stage's wall and thread CPU time from construction to addTo (two clock reads each, per payload).
  struct StageClock {
    int64_t wall = clockNs(CLOCK_MONOTONIC), cpu = threadCpuNs();
    void addTo(StageTime* t) const {
      t->wallNs += static_cast<uint64_t>(clockNs(CLOCK_MONOTONIC) - wall);
      t->cpuNs += static_cast<uint64_t>(threadCpuNs() - cpu);
    }
  };
  // Compresses `data` (as planes of `width` when it is not 0, shuffling a copy) and times zstd in this thread's CPU
  // time, which other threads taking the core do not inflate. The shuffle is left out: at 15 GB/s it is a few percent
  // of either compression, and a sanitizer build slows it (not zstd) several times. Fresh pages are kept out too,
  // which would otherwise decide between two ways that take about as long (dense noise: 20 us either way, 70-130 us
  // when they fault): each way has a context and an output buffer of its own, kept for samples, and compresses once
  // untimed when its input size changed (zstd sizes a context's tables to the input). The shorter of two timed runs
  // counts: one run now and then took 3-4x as long (an interrupt, a preemption), enough to flip a near tie.
  Timed timedCompress(const uint8_t* data, size_t bytes, int width) {
    static thread_local std::vector<uint8_t> planes;
    static thread_local Blob outputs[2];
    static thread_local size_t warmFor[2] = {0, 0};
    const int way = width != 0;
    if (way) {
      planes.assign(data, data + bytes);
      shuffleBlocks(planes.data(), bytes, width);
      data = planes.data();
    }
    ZSTD_CCtx* context = threadContext(way ? kSamplePlanes : kSampleAsIs);
    Timed out;
    out.bytes = &outputs[way];
    if (warmFor[way] != bytes && compressBlob(context, level_, way, data, bytes, &outputs[way]).isOk())
      warmFor[way] = bytes;
    for (int run = 0; run < 2; ++run) {
      const int64_t start = threadCpuNs();
      out.ok = compressBlob(context, level_, way, data, bytes, &outputs[way]).isOk();
      const int64_t ns = threadCpuNs() - start;
      if (!out.ok) break;
      out.cpuNs = run == 0 ? ns : std::min(out.cpuNs, ns);
    }
    return out;
  }
  // Byte planes pay when zstd works less on them: bf16-valued fp32 gradients (two zero planes) compress 3-4x faster
  // and 1.3x smaller as planes; dense noise, which zstd stores almost raw either way, took 10x longer as planes
  // before they had their own match finder (trace::kPlanesHashLog) and about as long since. So the measure is the CPU
  // time, not the size, and planes must save a quarter of it: a tie (noise) stays as it is, sparing the shuffles.
  static bool planesPay(int64_t planesNs, int64_t asIsNs) { return planesNs * 4 < asIsNs * 3; }
  // Fills `done` with the compressed payload when the sample was the whole of it.
  int autoWidth(const Blob& raw, int width, Blob* done) {
    if (raw.size() < kAutoMinBytes) return 0;
    if (raw.size() <= kAutoPieces * kAutoPieceBytes) {
      Timed asIs = timedCompress(raw.data(), raw.size(), 0);
      Timed planes = timedCompress(raw.data(), raw.size(), width);
      if (!asIs.ok || !planes.ok) return 0;  // compress() tries again and reports the error
      const bool usePlanes = planesPay(planes.cpuNs, asIs.cpuNs);
      const Blob& chosen = *(usePlanes ? planes.bytes : asIs.bytes);
      done->assign(chosen.begin(), chosen.end());
      return usePlanes ? width : 0;
    }
    static thread_local std::vector<uint8_t> sample;
    sample.resize(kAutoPieces * kAutoPieceBytes);
    for (size_t i = 0; i < kAutoPieces; ++i) {
      const size_t offset = raw.size() / kAutoPieces * i / kAutoPieceBytes * kAutoPieceBytes;
      memcpy(sample.data() + i * kAutoPieceBytes, raw.data() + offset, kAutoPieceBytes);
    }
    Timed asIs = timedCompress(sample.data(), sample.size(), 0);
    Timed planes = timedCompress(sample.data(), sample.size(), width);
    return asIs.ok && planes.ok && planesPay(planes.cpuNs, asIs.cpuNs) ? width : 0;
  }
  // Compression contexts per worker thread, reused across payloads (measured 1.12x faster at 64 KiB): one for
  // whole payloads and one for each way of compressing auto's samples.
  enum Context { kPayload, kSampleAsIs, kSamplePlanes, kContexts };
  static ZSTD_CCtx* threadContext(Context which = kPayload) {
    using Owned = std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)>;
    static thread_local Owned contexts[kContexts] = {
        {ZSTD_createCCtx(), ZSTD_freeCCtx}, {ZSTD_createCCtx(), ZSTD_freeCCtx}, {ZSTD_createCCtx(), ZSTD_freeCCtx}};
    return contexts[which].get();
  }
  // Compresses a copied payload into `blob` (a kept buffer where one fits); the result's file fields are left for
  // PayloadFiles::append.
  Written compress(Copy& copy, size_t elementBytes, Blob* blob) {
    Blob& raw = copy.raw;
    Written out;
    out.rawCrc32 = copy.crc;
    out.shuffle = copy.width;
    if (shuffle_ == WriterOptions::Shuffle::kAuto && planesWidth(elementBytes) != 0) {
      out.shuffle = autoWidth(raw, planesWidth(elementBytes), blob);  // copied as it was
      if (!blob->empty()) return out;
      shuffleBlocks(raw.data(), raw.size(), out.shuffle);  // 0 leaves it
    }
    *blob = spareBlobs_.take(ZSTD_compressBound(raw.size()));
    out.compressed = compressBlob(threadContext(), level_, out.shuffle != 0, raw.data(), raw.size(), blob);
    return out;
  }
  void run() {
    PayloadFiles::Open file;  // this worker's
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stopping_ || !copies_.empty() || !jobs_.empty(); });
        // Copies first: each holds the lender's memory (record mode's staging) until it is done.
        std::deque<Job>& from = !copies_.empty() ? copies_ : jobs_;
        if (from.empty()) return;
        job = std::move(from.front());
        from.pop_front();
      }
      job(file);
      std::lock_guard<std::mutex> lock(mu_);
      if (--inFlight_ == 0) activeNs_ += static_cast<uint64_t>(clockNs(CLOCK_MONOTONIC) - activeSince_);
    }
  }
  int level_;
  const WriterOptions::Shuffle shuffle_;
  SpareBuffers<Blob> spareRaw_;
  SpareBuffers<Blob> spareBlobs_;
  PayloadFiles* const files_;
  StageTime times_[kStages];
  std::mutex mu_;
  size_t inFlight_ = 0;      // jobs queued or running (under mu_)
  int64_t activeSince_ = 0;  // when inFlight_ last left 0
  uint64_t activeNs_ = 0;    // summed while inFlight_ > 0
  std::condition_variable wake_;
  std::deque<Job> copies_, jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

static_assert(std::size(counter::kPayloadStages) == CompressionPool::kStages, "a counter pair per stage");

struct Item {
  std::string body;              // record body (empty for payloads)
  PayloadRef ref;                // payloads
  std::future<Written> written;  // payloads: the blob, compressed and written
  size_t accounted = 0;          // bytes counted against the queue bound
  bool payload = false;
};

}  // namespace

struct TraceWriter::Impl {
  std::string dir;
  Manifest manifest;
  WriterOptions options;
  std::unique_ptr<PayloadFiles> payloadFiles;
  std::unique_ptr<CompressionPool> pool;

  mutable std::mutex mu;
  std::condition_variable wake, progress;
  std::deque<Item> queue;
  size_t queuedBytes = 0;
  uint64_t accepted = 0, written = 0;  // items
  int inFlight = 0;                    // appendPayload calls between admission and queueing (copying data)
  WriterStats stats;
  bool closing = false, closed = false;  // closing: no longer admitting
  bool stopWriter = false;               // the writer thread may exit once the queue is empty
  Status error;                          // the first failure to write: the trace is incomplete
  std::thread thread;

  // Writer-thread state.
  AppendFile segment;
  uint32_t segmentIndex = 0;

  Status openSegment(uint32_t index) {
    if (index > kMaxFileIndex)
      return Status::invalidUsage(dir + ": " + std::to_string(kMaxFileIndex + 1) +
                                  " segment files: raise WriterOptions.segmentBytes");
    segmentIndex = index;
    manifest.segments = index + 1;
    return segment.create(dir + "/" + segmentName(index), kSegmentMagic, index);
  }

  // Writes `frames` to the current segment, rolling over first if the segment is full.
  Status writeFrames(std::string* frames) {
    if (frames->empty()) return Status::ok();
    if (segment.size() > kFileHeaderBytes && segment.size() + frames->size() > options.segmentBytes) {
      segment.close();
      RL_CHECK(openSegment(segmentIndex + 1));
    }
    Status written = segment.append(frames->data(), frames->size());
    frames->clear();
    return written;
  }
  // Adds a record's frame to `frames`, writing those pending first where it would take the current segment past
  // segmentBytes: segments roll over between any two frames, not only between the writer's batches.
  Status addFrame(std::string* frames, const char* body, size_t size) {
    if (!frames->empty() && segment.size() + frames->size() + kFrameHeaderBytes + size > options.segmentBytes)
      RL_CHECK(writeFrames(frames));
    appendFrame(frames, body, size);
    return Status::ok();
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      // Producers do not wake this thread for every record (a futex wake per NCCL call would cost the caller
      // microseconds): it lingers, and is woken early only by flush(), close() or a queue past hurryBytes().
      wake.wait_for(lock, kLinger, [&] {
        return stopWriter || (!queue.empty() && (flushWaiters > 0 || queuedBytes >= hurryBytes()));
      });
      if (queue.empty()) {
        if (stopWriter) return;
        continue;
      }
      std::deque<Item> batch;
      batch.swap(queue);
      lock.unlock();
      uint64_t recordsDone = 0, failedPayloads = 0;
      const Status batchWritten = writeBatch(batch, lock, &recordsDone, &failedPayloads);
      size_t batchBytes = 0;  // summed before taking the lock: appends must not wait on this loop
      for (const auto& item : batch) batchBytes += item.accounted;
      lock.lock();
      queuedBytes -= batchBytes;
      written += batch.size();
      stats.recordsWritten += recordsDone;
      stats.payloadsDropped += failedPayloads;
      if (error.isOk()) error = batchWritten;
      progress.notify_all();
    }
  }

  // Writes a batch's records, and the PayloadRef of each payload once a worker has stored its blob, in order; stops
  // at the first failure to write. Takes `lock` (unlocked on entry and exit) only to give back a payload's memory.
  Status writeBatch(std::deque<Item>& batch, std::unique_lock<std::mutex>& lock, uint64_t* recordsDone,
                    uint64_t* failedPayloads) {
    std::string frames;
    for (auto& item : batch) {
      if (!item.payload) {
        RL_CHECK(addFrame(&frames, item.body.data(), item.body.size()));
        ++*recordsDone;
        continue;
      }
      Written w;
      try {
        w = item.written.get();            // the blob is in its payload file once this returns
      } catch (const std::exception& e) {  // out of memory copying or compressing it
        w.compressed = Status::systemError(e.what());
      }
      item.written = {};
      RL_CHECK(w.stored);
      if (!w.compressed.isOk()) {
        ++*failedPayloads;
        continue;
      }
      PayloadRef ref = item.ref;
      ref.file = w.file;
      ref.offset = w.offset;
      ref.compressedBytes = w.compressedBytes;
      ref.rawCrc32 = w.rawCrc32;
      ref.zstdLevel = options.zstdLevel;
      ref.shuffle = w.shuffle;
      msgpack::sbuffer body;
      packRecordBody(&body, RecordType::kPayloadRef, ref);
      RL_CHECK(addFrame(&frames, body.data(), body.size()));
      ++*recordsDone;
      // A written payload's memory goes back now, not with its batch: appends waiting for room resume while later
      // payloads of the batch still compress (large ones take a thread for 100+ ms each).
      lock.lock();
      queuedBytes -= item.accounted;
      stats.payloadsWritten++;
      stats.payloadRawBytes += ref.rawBytes;
      stats.payloadCompressedBytes += ref.compressedBytes;
      lock.unlock();
      item.accounted = 0;
      progress.notify_all();
    }
    return writeFrames(&frames);
  }

  static constexpr std::chrono::milliseconds kLinger{2};  // longest a record waits in memory unflushed
  int flushWaiters = 0;                                   // flush()/close() calls waiting for the writer
  size_t hurryBytes() const { return std::max<size_t>(options.queueBytes / 8, 1); }
  // Wakes the writer only when the queue is filling up; otherwise it comes by within kLinger.
  void nudge() {
    if (queuedBytes >= hurryBytes()) wake.notify_one();
  }

  // A payload of `bytes` taken into the queue's count (waiting for room or refused as `policy` says; refusals
  // counted). Under `lock`.
  bool admitPayload(size_t bytes, BackPressure policy, std::unique_lock<std::mutex>& lock) {
    const size_t reserve = std::min(options.recordReserveBytes, options.queueBytes);
    if (!admit(bytes, lock, policy, options.queueBytes - reserve, /*anyWhenQueueEmpty=*/false)) {
      stats.payloadsDropped++;
      return false;
    }
    queuedBytes += bytes;
    return true;
  }
  // An admitted payload's place in the queue (under the lock): the writer takes where its blob went from `written`.
  // `accounted`: what admitPayload counted for it.
  void queuePayload(const PayloadRef& ref, size_t bytes, size_t accounted, std::future<Written> written) {
    Item item;
    item.payload = true;
    item.accounted = accounted;
    item.ref = ref;
    item.ref.rawBytes = bytes;
    item.written = std::move(written);
    queue.push_back(std::move(item));
    accepted++;
    stats.payloadsAccepted++;
    nudge();
    progress.notify_all();
  }

  bool admitRecord(size_t bytes, std::unique_lock<std::mutex>& lock) {
    return admit(bytes, lock, options.policy, options.queueBytes, /*anyWhenQueueEmpty=*/true);
  }
  // Nothing held at all admits anything (a payload larger than the limit must still go through). For a payload an
  // empty queue is not enough, as the writer's batch in hand still holds its memory; a record (small) may go once
  // the writer has taken the queue, so that a payload beyond the limit never holds call records back.
  bool admit(size_t bytes, std::unique_lock<std::mutex>& lock, BackPressure policy, size_t limit,
             bool anyWhenQueueEmpty) {
    if (closing) return false;
    auto room = [&] {
      return queuedBytes + bytes <= limit || queuedBytes == 0 || (anyWhenQueueEmpty && queue.empty());
    };
    if (room()) return true;
    if (policy == BackPressure::kDrop) return false;
    progress.wait(lock, [&] { return closing || room(); });
    return !closing;
  }

  Status writeManifest() {
    msgpack::sbuffer buffer;
    msgpack::pack(buffer, manifest);
    return writeFileAtomically(dir + "/manifest.msgpack", buffer.data(), buffer.size());
  }
};

int autoCompressionThreads(int cpus, int localRanks, bool controlValuesOnly) {
  if (controlValuesOnly) return 2;
  return std::clamp(std::max(cpus, 1) / std::max(localRanks, 1) / 2, 2, 8);
}

TraceWriter::TraceWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Status TraceWriter::create(const std::string& rankDir, const Manifest& manifest, const WriterOptions& options,
                           std::unique_ptr<TraceWriter>* writer) {
  writer->reset();
  RL_CHECK(makeDirectories(rankDir));
  if (holdsTrace(rankDir))
    return Status::invalidArgument(rankDir +
                                   ": already holds a trace (manifest.msgpack exists); choose another directory");
  auto impl = std::make_unique<Impl>();
  impl->dir = rankDir;
  impl->manifest = manifest;
  impl->manifest.format = kFormatName;
  impl->manifest.version_major = kFormatMajor;
  impl->manifest.version_minor = kFormatMinor;
  impl->manifest.closed = false;
  impl->options = options;
  RL_CHECK(impl->openSegment(0));
  RL_CHECK(impl->writeManifest());
  // Spare copy buffers up to the queue's size: the queue already lets that much raw payload be in flight.
  impl->payloadFiles = std::make_unique<PayloadFiles>(rankDir, options.payloadFileBytes);
  impl->pool = std::make_unique<CompressionPool>(options.compressionThreads, options.zstdLevel, options.shuffle,
                                                 options.queueBytes, impl->payloadFiles.get());
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] {
    nameThisThread("RankLens Write");
    raw->run();
  });
  writer->reset(new TraceWriter(std::move(impl)));
  return Status::ok();
}

TraceWriter::~TraceWriter() { (void)close(); }

bool TraceWriter::enqueueRecord(std::string&& body) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (body.size() > impl_->options.maxRecordBytes || !impl_->admitRecord(body.size(), lock)) {
    impl_->stats.recordsDropped++;
    return false;
  }
  Item item;
  item.accounted = body.size();
  item.body = std::move(body);
  impl_->queuedBytes += item.accounted;
  impl_->queue.push_back(std::move(item));
  impl_->accepted++;
  impl_->stats.recordsAccepted++;
  impl_->nudge();
  return true;
}

bool TraceWriter::appendPayload(const PayloadRef& ref, const void* data, size_t bytes) {
  return appendPayload(ref, data, bytes, impl_->options.policy);
}

bool TraceWriter::appendPayload(const PayloadRef& ref, const void* data, size_t bytes, BackPressure policy) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->admitPayload(bytes, policy, lock)) return false;
  impl_->inFlight++;  // close() waits for this payload: it was accepted
  lock.unlock();
  // Copy and hand to a compression worker outside the lock; the slot in the queue keeps the order.
  const size_t elementBytes = events::datatypeBytes(ref.datatype);
  CompressionPool::Copy copy = impl_->pool->copyIn(data, bytes, elementBytes);
  const bool reused = copy.reused;
  std::future<Written> written = impl_->pool->submit(std::move(copy), elementBytes);
  lock.lock();
  impl_->stats.payloadBuffersReused += reused ? 1 : 0;
  impl_->inFlight--;
  impl_->queuePayload(ref, bytes, bytes, std::move(written));
  return true;
}

bool TraceWriter::appendPayloadBorrowed(const PayloadRef& ref, const void* data, size_t bytes, BackPressure policy,
                                        std::function<void()> release) {
  // A payload compressed straight out of the lender's memory takes none of the queue's: the lender's memory (record
  // mode's staging) bounds those. Counted against payload_queue_bytes, they held a full-payload recording of GPT-2
  // small DDP to 135 ms per step where 4 GiB of queue gave 71 ms. A payload the pool copies in counts.
  const size_t accounted = copiesLentPayload(impl_->options.shuffle) ? bytes : 0;
  std::unique_lock<std::mutex> lock(impl_->mu);
  if (!impl_->admitPayload(accounted, policy, lock)) {
    lock.unlock();
    release();
    return false;
  }
  // Queued now, in order; a worker takes the bytes (and releases them) before it compresses anything else.
  impl_->queuePayload(
      ref, bytes, accounted,
      impl_->pool->submitBorrowed(data, bytes, events::datatypeBytes(ref.datatype), std::move(release)));
  return true;
}

Status TraceWriter::flush() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  const uint64_t target = impl_->accepted;
  impl_->flushWaiters++;
  impl_->wake.notify_one();
  impl_->progress.wait(lock, [&] { return impl_->written >= target || impl_->closed; });
  impl_->flushWaiters--;
  return impl_->error;
}

Status TraceWriter::close() {
  if (!impl_) return Status::invalidUsage("trace writer: closed before it was created");
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->closed) return impl_->error;
  }
  {
    // Stop admitting, then wait for payloads already admitted but still being copied, then write everything.
    std::unique_lock<std::mutex> lock(impl_->mu);
    impl_->closing = true;
    impl_->progress.wait(lock, [&] { return impl_->inFlight == 0; });
  }
  impl_->progress.notify_all();
  {
    std::unique_lock<std::mutex> lock(impl_->mu);
    const uint64_t target = impl_->accepted;
    impl_->flushWaiters++;
    impl_->wake.notify_one();
    impl_->progress.wait(lock, [&] { return impl_->written >= target; });
    impl_->flushWaiters--;
    impl_->stopWriter = true;
  }
  impl_->wake.notify_all();
  impl_->progress.notify_all();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->pool) {
    // The compression workers' time by stage: what bounds a full-payload recording (trace::compressionLoad).
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto& counters = impl_->manifest.counters;
    for (int stage = 0; stage < CompressionPool::kStages; ++stage) {
      const auto& time = impl_->pool->time(static_cast<CompressionPool::Stage>(stage));
      counters[counter::kPayloadStages[stage].wallNs] = time.wallNs.load();
      counters[counter::kPayloadStages[stage].cpuNs] = time.cpuNs.load();
    }
    counters[counter::kPayloadThreads] = impl_->pool->threads();
    counters[counter::kPayloadActiveNs] = impl_->pool->activeNs();
  }
  impl_->pool.reset();  // its workers close their payload files
  impl_->segment.close();
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->closed = true;
  Manifest& m = impl_->manifest;
  m.closed = true;
  m.payload_files = impl_->payloadFiles->count();
  m.end_time_ns = realtimeNanoseconds();
  m.records_written = impl_->stats.recordsWritten;
  m.records_dropped = impl_->stats.recordsDropped;
  m.payloads_written = impl_->stats.payloadsWritten;
  m.payloads_dropped = impl_->stats.payloadsDropped;
  m.payload_raw_bytes = impl_->stats.payloadRawBytes;
  m.payload_compressed_bytes = impl_->stats.payloadCompressedBytes;
  Status finished = rebuildIndex(impl_->dir, Limits{});
  if (finished.isOk()) finished = impl_->writeManifest();
  if (impl_->error.isOk()) impl_->error = finished;
  impl_->progress.notify_all();
  return impl_->error;
}

void TraceWriter::setCounter(const std::string& name, uint64_t value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->manifest.counters[name] = value;
}

void TraceWriter::updateManifest(const std::function<void(Manifest*)>& edit) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  edit(&impl_->manifest);
}

WriterStats TraceWriter::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

std::string TraceWriter::lastError() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->error.message();
}

const std::string& TraceWriter::directory() const { return impl_->dir; }

}  // namespace trace
}  // namespace ranklens

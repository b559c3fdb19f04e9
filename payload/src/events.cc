// SPDX-License-Identifier: Apache-2.0
#include "ranklens/events.h"

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace ranklens {
namespace events {

const char* opName(Op op) {
  switch (op) {
    case Op::kAllReduce: return "AllReduce";
    case Op::kBroadcast: return "Broadcast";
    case Op::kReduce: return "Reduce";
    case Op::kAllGather: return "AllGather";
    case Op::kReduceScatter: return "ReduceScatter";
    case Op::kAlltoAll: return "AlltoAll";
    case Op::kGather: return "Gather";
    case Op::kScatter: return "Scatter";
    case Op::kSend: return "Send";
    case Op::kRecv: return "Recv";
  }
  return "Unknown";
}

bool isP2p(Op op) { return op == Op::kSend || op == Op::kRecv; }

namespace {
constexpr size_t kMaxQueuedBytes = 64u << 20;  // bounded: a stalled disk costs dropped records, not training time
constexpr size_t kMaxRecordBytes = 1u << 20;
}  // namespace

struct EventLogWriter::Impl {
  std::string path;
  FILE* file = nullptr;
  std::mutex mu;
  std::condition_variable wake, drained;
  std::deque<std::string> queue;
  size_t queuedBytes = 0;
  uint64_t appended = 0, written = 0, dropped = 0;
  bool stopping = false;
  std::thread thread;

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      std::deque<std::string> batch;
      batch.swap(queue);
      queuedBytes = 0;
      lock.unlock();
      for (const auto& record : batch) fwrite(record.data(), 1, record.size(), file);
      fflush(file);
      lock.lock();
      written += batch.size();
      drained.notify_all();
      if (stopping && queue.empty()) return;
    }
  }
};

EventLogWriter::EventLogWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<EventLogWriter> EventLogWriter::open(const std::string& path, const Header& header,
                                                     std::string* error) {
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->file = fopen(path.c_str(), "wb");
  if (impl->file == nullptr) {
    if (error) *error = path + ": cannot create event log: " + strerror(errno);
    return nullptr;
  }
  std::unique_ptr<EventLogWriter> writer(new EventLogWriter(std::move(impl)));
  writer->append(RecordType::kHeader, header);
  Impl* raw = writer->impl_.get();
  raw->thread = std::thread([raw] { raw->run(); });
  return writer;
}

EventLogWriter::~EventLogWriter() { close(); }

void EventLogWriter::enqueue(std::string&& bytes) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (impl_->stopping || impl_->queuedBytes + bytes.size() > kMaxQueuedBytes) {
    impl_->dropped++;
    return;
  }
  impl_->queuedBytes += bytes.size();
  impl_->queue.push_back(std::move(bytes));
  impl_->appended++;
  impl_->wake.notify_one();
}

void EventLogWriter::flush() {
  std::unique_lock<std::mutex> lock(impl_->mu);
  uint64_t target = impl_->appended;
  impl_->wake.notify_one();
  impl_->drained.wait(lock, [&] { return impl_->written >= target || !impl_->thread.joinable(); });
}

void EventLogWriter::close() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return;
    impl_->stopping = true;
    impl_->wake.notify_one();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
  if (impl_->file) fclose(impl_->file);
  impl_->file = nullptr;
}

uint64_t EventLogWriter::dropped() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->dropped;
}

const std::string& EventLogWriter::path() const { return impl_->path; }

bool readEventLog(const std::string& path, EventLog* out, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open: " + strerror(errno);
    return false;
  }
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // Hostile or corrupt files must not make us allocate without bound.
  msgpack::unpack_limit limits(/*array*/ 1 << 20, /*map*/ 1024, /*str*/ kMaxRecordBytes, /*bin*/ kMaxRecordBytes,
                               /*ext*/ 0, /*depth*/ 8);
  size_t offset = 0;
  bool sawHeader = false;
  while (offset < data.size()) {
    size_t start = offset;
    auto fail = [&](const std::string& reason) {
      *error = path + ": offset " + std::to_string(start) + ": " + reason;
      return false;
    };
    try {
      msgpack::object_handle handle =
          msgpack::unpack(data.data(), data.size(), offset, nullptr, nullptr, limits);
      const msgpack::object& obj = handle.get();
      if (obj.type != msgpack::type::ARRAY || obj.via.array.size != 2 ||
          obj.via.array.ptr[0].type != msgpack::type::POSITIVE_INTEGER)
        return fail("not a [type, record] pair");
      auto type = static_cast<RecordType>(obj.via.array.ptr[0].as<int>());
      const msgpack::object& body = obj.via.array.ptr[1];
      if (!sawHeader && type != RecordType::kHeader) return fail("missing header record");
      switch (type) {
        case RecordType::kHeader:
          body.convert(out->header);
          if (out->header.magic != kEventLogMagic) return fail("not a RankLens event log (bad magic)");
          if (out->header.versionMajor != kEventLogVersionMajor)
            return fail("unsupported event log version " + std::to_string(out->header.versionMajor) + "." +
                        std::to_string(out->header.versionMinor) + " (this reader: " +
                        std::to_string(kEventLogVersionMajor) + ".x)");
          sawHeader = true;
          break;
        case RecordType::kCommInit: out->comms.push_back(body.as<CommInit>()); break;
        case RecordType::kCommEnd: out->ends.push_back(body.as<CommEnd>()); break;
        case RecordType::kCall: out->calls.push_back(body.as<Call>()); break;
        case RecordType::kGroupEnd: out->groups.push_back(body.as<GroupEnd>()); break;
        case RecordType::kStage: out->stages.push_back(body.as<Stage>()); break;
        default: break;  // a newer minor version's record type: skip
      }
    } catch (const msgpack::insufficient_bytes&) {
      return fail("truncated record (" + std::to_string(data.size() - start) + " bytes at end of file)");
    } catch (const std::exception& e) {
      return fail(std::string("corrupt record: ") + e.what());
    }
  }
  if (!sawHeader) {
    *error = path + ": offset 0: empty file (no header record)";
    return false;
  }
  return true;
}

}  // namespace events
}  // namespace ranklens

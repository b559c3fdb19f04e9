// SPDX-License-Identifier: Apache-2.0
#include "ranklens/kernel_clock.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "ranklens/events.h"

namespace ranklens {
namespace timing {

namespace {
// Handles given to NCCL start with their kind: stopEvent and recordEventState receive only the handle.
enum class Kind : uint32_t { kContext = 0x52434b31, kTask, kChannel };
constexpr int kMaxChannels = 64;  // NCCL's MAXCHANNELS
constexpr uint64_t kNoStart = std::numeric_limits<uint64_t>::max();
}  // namespace

struct KernelClock::Context {
  Kind kind = Kind::kContext;
  int nranks = 0, rank = 0;
  bool bound = false;
  uint64_t commId = 0;  // the recorded communicator, once a task matched
};

struct KernelClock::Span {
  trace::Timing identity;
  int tasks = 0, tasksDone = 0;
  bool launched = false;   // endLaunch() has seen it: no more tasks will join
  bool cancelled = false;  // dropped: nothing is written
  bool written = false;
  bool linked = false;                  // on live_ (launched, waiting for channels)
  uint64_t start = kNoStart, stop = 0;  // over its completed tasks' channels
  Span* prev = nullptr;
  Span* next = nullptr;
};

struct KernelClock::Channel {
  Kind kind = Kind::kChannel;
  TaskRec* task = nullptr;
};

struct KernelClock::TaskRec {
  Kind kind = Kind::kTask;
  Span* span = nullptr;  // null once the task completed (the span may be written and reused)
  int nChannels = 0, started = 0, stopped = 0, ended = 0;
  bool hostStopped = false, complete = false, released = false;
  uint64_t start = kNoStart, stop = 0;
  Channel channels[kMaxChannels];
};

const char* kernelClockFunc(int op) {
  // NCCL's profiler spells its functions as the trace spells ops; AlltoAll, Gather and Scatter are grouped Send/Recv.
  const auto o = static_cast<events::Op>(op);
  if (o == events::Op::kAlltoAll || o == events::Op::kGather || o == events::Op::kScatter) return nullptr;
  if (op < 0 || op > static_cast<int>(events::Op::kRecv)) return nullptr;
  return events::opName(o);
}

KernelClock::KernelClock(Sink sink) : sink_(std::move(sink)) {}

KernelClock::~KernelClock() {
  // Everything ever handed out, reused or not (NCCL has stopped calling by now: the owner outlives it or is a test).
  std::lock_guard<std::mutex> lock(mu_);
  for (Span* s : allSpans_) delete s;
  for (TaskRec* t : allTasks_) delete t;
  for (Context* c : allContexts_) delete c;
}

KernelClock::Launch& KernelClock::launch() {
  static thread_local Launch l;
  return l;
}

KernelClock::Launch& KernelClock::ownLaunch() {
  Launch& l = launch();
  if (l.owner != this) {  // another clock (tests) used this thread before: its list is not ours
    l = Launch();
    l.owner = this;
  }
  return l;
}

KernelClock::Span* KernelClock::open(const trace::Timing& identity) {
  Span* span = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!freeSpans_.empty()) {
      span = freeSpans_.back();
      freeSpans_.pop_back();
    }
  }
  if (span == nullptr) {
    span = new Span();
    std::lock_guard<std::mutex> lock(mu_);
    allSpans_.push_back(span);
  }
  *span = Span();
  span->identity = identity;
  span->identity.clock = trace::kClockKernel;
  span->identity.eventNs = -1;
  return span;
}

void KernelClock::expect(Span* span, uint64_t commId, int rank, const Task& task) {
  ownLaunch().expects.push_back({span, commId, rank, task, false});
}

void KernelClock::cancel(Span* span) {
  if (span != nullptr) span->cancelled = true;  // still listed on this thread: released by endLaunch
}

void KernelClock::beginLaunch() { ownLaunch().active = true; }

void KernelClock::endLaunch(bool launched) {
  Launch& l = launch();
  if (l.owner != this) return;
  l.active = false;
  std::vector<trace::Timing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Expect& e : l.expects) {
      Span* span = e.span;
      if (span == nullptr || span->launched) continue;  // listed once per call: handled at its first
      span->launched = true;
      if (!launched) span->cancelled = true;
      if (span->cancelled) {
        releaseSpanLocked(span);  // once its matched tasks (if any) have completed
        continue;
      }
      stats_.pending++;
      span->linked = true;
      span->prev = nullptr;
      span->next = live_;
      if (live_) live_->prev = span;
      live_ = span;
      if (span->tasks == 0) {
        stats_.unmatched++;
        writeSpanLocked(span, -1, &out);
      } else if (span->tasksDone == span->tasks) {
        writeSpanLocked(span, static_cast<int64_t>(span->stop - span->start), &out);
      }
    }
    l.expects.clear();
  }
  emit(out);
}

KernelClock::Expect* KernelClock::match(Context* context, const Task& task, int rank, Launch& l) {
  Expect* fallback = nullptr;
  for (Expect& e : l.expects) {
    if (e.matched || e.span == nullptr || e.span->cancelled) continue;
    if (context->bound ? e.commId != context->commId : e.rank != rank) continue;
    if (e.task.bytes != task.bytes || std::strcmp(e.task.func, task.func) != 0) continue;
    if (e.task.root >= 0 && task.root >= 0 && e.task.root != task.root) continue;
    if (e.task.buffer == task.buffer) return &e;
    if (fallback == nullptr) fallback = &e;
  }
  return fallback;
}

void* KernelClock::commContext(int nranks, int rank) {
  auto* c = new Context();
  c->nranks = nranks;
  c->rank = rank;
  std::lock_guard<std::mutex> lock(mu_);
  allContexts_.push_back(c);
  return c;
}

void KernelClock::releaseContext(void*) {
  // Kept until the clock goes: a late callback may still name it (a few bytes per communicator ever created).
}

void* KernelClock::taskStarted(void* context, const Task& task, int rank, int nChannels) {
  auto* c = static_cast<Context*>(context);
  Launch& l = launch();
  if (c == nullptr || c->kind != Kind::kContext || l.owner != this || !l.active) return nullptr;
  std::vector<trace::Timing> none;
  std::lock_guard<std::mutex> lock(mu_);
  Expect* e = match(c, task, rank, l);
  if (e == nullptr) {
    stats_.foreignTasks++;
    return nullptr;
  }
  e->matched = true;
  if (!c->bound) {
    c->bound = true;
    c->commId = e->commId;
  }
  TaskRec* t = nullptr;
  if (!freeTasks_.empty()) {
    t = freeTasks_.back();
    freeTasks_.pop_back();
  } else {
    t = new TaskRec();
    allTasks_.push_back(t);
  }
  t->span = e->span;
  t->nChannels = std::clamp(nChannels, 0, kMaxChannels);
  t->started = t->stopped = t->ended = 0;
  t->hostStopped = t->complete = t->released = false;
  t->start = kNoStart;
  t->stop = 0;
  e->span->tasks++;
  if (t->nChannels == 0) completeTaskLocked(t, &none);  // nothing to run: no kernel time (span not launched yet)
  return t;
}

void* KernelClock::channelStarted(void* taskHandle, uint64_t gpuNs) {
  auto* t = static_cast<TaskRec*>(taskHandle);
  if (t == nullptr || t->kind != Kind::kTask) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  if (t->started >= kMaxChannels) return nullptr;
  Channel* ch = &t->channels[t->started++];
  ch->task = t;
  t->start = std::min(t->start, gpuNs);
  return ch;
}

void KernelClock::channelStopped(void* channelHandle, uint64_t gpuNs) {
  auto* ch = static_cast<Channel*>(channelHandle);
  if (ch == nullptr || ch->kind != Kind::kChannel || ch->task == nullptr) return;
  std::vector<trace::Timing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    TaskRec* t = ch->task;
    t->stop = std::max(t->stop, gpuNs);
    if (++t->stopped >= t->nChannels && !t->complete) completeTaskLocked(t, &out);
  }
  emit(out);
}

void KernelClock::stopped(void* handle) {
  if (handle == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  const Kind kind = *static_cast<Kind*>(handle);
  if (kind == Kind::kTask) {
    auto* t = static_cast<TaskRec*>(handle);
    t->hostStopped = true;
    maybeReleaseTaskLocked(t);
  } else if (kind == Kind::kChannel) {
    TaskRec* t = static_cast<Channel*>(handle)->task;
    if (t == nullptr) return;
    t->ended++;
    maybeReleaseTaskLocked(t);
  }
}

void KernelClock::completeTaskLocked(TaskRec* t, std::vector<trace::Timing>* out) {
  t->complete = true;
  Span* span = t->span;
  t->span = nullptr;
  if (span != nullptr) {
    if (t->start != kNoStart && t->stop >= t->start) {
      span->start = std::min(span->start, t->start);
      span->stop = std::max(span->stop, t->stop);
    }
    span->tasksDone++;
    if (span->launched && span->tasksDone == span->tasks) {
      if (!span->written && !span->cancelled) {
        const int64_t ns = span->start == kNoStart ? 0 : static_cast<int64_t>(span->stop - span->start);
        writeSpanLocked(span, ns, out);
      } else {
        releaseSpanLocked(span);
      }
    }
  }
  maybeReleaseTaskLocked(t);
}

void KernelClock::maybeReleaseTaskLocked(TaskRec* t) {
  // NCCL may still call stopEvent on the task (host side) and on each started channel: keep it until it has.
  if (t->complete && t->hostStopped && t->ended >= t->started && !t->released) {
    t->released = true;  // once: a repeated stop from NCCL must not hand the same record out twice
    freeTasks_.push_back(t);
  }
}

void KernelClock::writeSpanLocked(Span* span, int64_t durationNs, std::vector<trace::Timing>* out) {
  if (span->linked) {
    if (span->prev)
      span->prev->next = span->next;
    else
      live_ = span->next;
    if (span->next) span->next->prev = span->prev;
    span->linked = false;
    span->prev = span->next = nullptr;
    stats_.pending--;
  }
  trace::Timing t = span->identity;
  t.durationNs = durationNs;
  if (durationNs > 0 && span->start != kNoStart && trace::chainsGap(t)) {
    auto [last, fresh] = lastStop_.try_emplace(t.commId, t.seq, span->stop);
    if (!fresh && last->second.first + 1 == t.seq)
      t.gapNs = static_cast<int64_t>(span->start) - static_cast<int64_t>(last->second.second);
    if (!fresh && t.seq > last->second.first) last->second = {t.seq, span->stop};
  }
  out->push_back(t);
  if (durationNs >= 0) stats_.timed++;
  span->written = true;
  releaseSpanLocked(span);
  drained_.notify_all();
}

void KernelClock::releaseSpanLocked(Span* span) {
  // Reused only once no task refers to it: a task matched to it may still report its channels.
  if (span->launched && span->tasksDone == span->tasks && (span->written || span->cancelled))
    freeSpans_.push_back(span);
}

void KernelClock::emit(const std::vector<trace::Timing>& timings) {
  for (const trace::Timing& t : timings) {
    try {
      sink_(t);
    } catch (...) {
      // A sink that fails (out of memory) loses this record only; NCCL's proxy thread must not see an exception.
    }
  }
}

bool KernelClock::drain(int64_t timeoutNs) {
  std::unique_lock<std::mutex> lock(mu_);
  return drained_.wait_for(lock, std::chrono::nanoseconds(timeoutNs), [this] { return stats_.pending == 0; });
}

void KernelClock::abandonPending() {
  std::vector<trace::Timing> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (live_ != nullptr) {
      stats_.incomplete++;
      writeSpanLocked(live_, -1, &out);  // unlinks it; reused once its late tasks have reported
    }
  }
  emit(out);
}

KernelClockStats KernelClock::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace timing
}  // namespace ranklens

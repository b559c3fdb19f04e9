// SPDX-License-Identifier: Apache-2.0
// Record mode's kernel clock: a call's duration taken from the GPU timestamps NCCL's own kernel writes, instead of
// two CUDA events around the call. The real NCCL reports them through its profiler plugin interface (RankLens's
// library is the plugin, nccl_fake/src/profiler_plugin.cc): per launched task (a collective or a Send/Recv), the
// globaltimer value at which each of its channels started and stopped. The calling thread then records no event at
// all (record mode never blocks or adds work to the training thread), and the duration is the kernel's
// time, not the interval from the stream reaching the call, which also holds NCCL's host-side launch.
//
// Matching a task to a recorded call: NCCL starts a task's profiler event on the thread that launches it (the call
// outside a group, or the outermost ncclGroupEnd), inside the real call. The recorder lists the calls it expects
// (beginLaunch .. endLaunch on that thread), and a task takes the first expected call of the same communicator,
// operation, size and root/peer (the same buffer preferred). A communicator's profiler context is bound to the
// recorded communicator by its first matched task. Channel timestamps arrive later on NCCL's proxy thread; a span
// (one Timing record: a call, or one stream's share of a group) is written when every channel of every task it got
// has stopped.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "ranklens/trace.h"

namespace ranklens {
namespace timing {

struct KernelClockStats {
  uint64_t timed = 0;         // Timing records from kernel timestamps
  uint64_t unmatched = 0;     // spans whose launch reported no task they expected: Timing -1
  uint64_t incomplete = 0;    // spans whose channels had not all stopped when the recording ended: Timing -1
  uint64_t foreignTasks = 0;  // tasks NCCL reported that no recorded call expected (ignored)
  uint64_t pending = 0;       // launched spans not yet written
};

class KernelClock {
 public:
  using Sink = std::function<void(const trace::Timing&)>;
  struct Span;
  // A task as NCCL's profiler describes it.
  struct Task {
    const char* func = "";         // NCCL's name: "AllReduce", "Broadcast", "Send", "Recv", ...
    uint64_t bytes = 0;            // count x datatype size
    int root = -1;                 // Broadcast/Reduce root, Send/Recv peer; -1: not compared
    const void* buffer = nullptr;  // receive buffer (Send: send buffer)
  };

  explicit KernelClock(Sink sink);
  ~KernelClock();
  KernelClock(const KernelClock&) = delete;
  KernelClock& operator=(const KernelClock&) = delete;

  // ---- the training thread
  // A span writes one Timing record with `identity` and the kernel time of the tasks matched to it.
  Span* open(const trace::Timing& identity);
  // One call of the span, as NCCL will report its task, on recorded communicator `commId` where this process is
  // `rank`. Expectations collect on this thread until endLaunch().
  void expect(Span* span, uint64_t commId, int rank, const Task& task);
  // Forgets a span that is not launched yet (its calls are timed otherwise); its expectations stay unmatchable.
  void cancel(Span* span);
  void beginLaunch();
  // After the real call that launched this thread's expected calls. `launched` false (the call failed): the spans
  // are dropped. A launched span that got no task is written with duration -1 and counted in `unmatched`.
  void endLaunch(bool launched);

  // ---- NCCL's profiler callbacks (any thread; handles are what the plugin returns to NCCL)
  void* commContext(int nranks, int rank);
  void releaseContext(void* context);
  // A collective or Send/Recv task; nullptr when it is not one the recorder expects on this thread.
  void* taskStarted(void* context, const Task& task, int rank, int nChannels);
  void* channelStarted(void* taskHandle, uint64_t gpuNs);
  void channelStopped(void* channelHandle, uint64_t gpuNs);
  void stopped(void* handle);  // NCCL's stopEvent on a task or channel handle

  // Waits until every launched span is written (false on timeout).
  bool drain(int64_t timeoutNs);
  // The recording ends: launched spans still waiting for channels are written with duration -1 (`incomplete`).
  void abandonPending();
  KernelClockStats stats() const;

 private:
  struct Context;
  struct TaskRec;
  struct Channel;
  struct Expect {
    Span* span;
    uint64_t commId;
    int rank;
    Task task;
    bool matched;
  };
  struct Launch {
    const KernelClock* owner = nullptr;
    bool active = false;
    std::vector<Expect> expects;
  };
  static Launch& launch();  // this thread's
  Launch& ownLaunch();      // this thread's, reset when another clock left it

  Expect* match(Context* context, const Task& task, int rank, Launch& l);
  void completeTaskLocked(TaskRec* task, std::vector<trace::Timing>* out);
  void writeSpanLocked(Span* span, int64_t durationNs, std::vector<trace::Timing>* out);
  void releaseSpanLocked(Span* span);
  void maybeReleaseTaskLocked(TaskRec* task);
  void emit(const std::vector<trace::Timing>& timings);

  Sink sink_;
  mutable std::mutex mu_;
  std::condition_variable drained_;
  Span* live_ = nullptr;  // launched, not yet written (intrusive list)
  std::vector<Span*> freeSpans_;
  std::vector<TaskRec*> freeTasks_;
  std::vector<Span*> allSpans_;  // every allocation, freed with the clock
  std::vector<TaskRec*> allTasks_;
  std::vector<Context*> allContexts_;
  KernelClockStats stats_;
  // Per communicator, its last kernel-timed collective outside groups (seq, last channel stop): Timing.gapNs of the
  // next one is from that stop to its first channel's start.
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> lastStop_;
};

// NCCL's function name for a recorded op (events::Op as int); nullptr for ops NCCL runs as grouped Send/Recv
// (AlltoAll, Gather, Scatter: one call, many tasks), which keep CUDA events.
const char* kernelClockFunc(int op);

}  // namespace timing
}  // namespace ranklens

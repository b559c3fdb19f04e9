// SPDX-License-Identifier: Apache-2.0
// Record mode's communicator registry: each handle the real NCCL returned maps to its CommState (the identity and
// sequences replay keeps too), announced by a CommInit record once its size and rank are known.
#include <cstdlib>

#include "nccl_fake/comm_config.h"
#include "record_state.h"

namespace nccl_fake {
namespace record {

using ranklens::trace::RecordType;

std::shared_ptr<RecComm> findComm(ncclComm_t handle) {
  State& st = state();
  std::shared_lock<std::shared_mutex> lock(st.commsMu);
  auto it = st.comms.find(handle);
  return it == st.comms.end() ? nullptr : it->second;
}

void forgetComm(ncclComm_t handle) {
  State& st = state();
  std::unique_lock<std::shared_mutex> lock(st.commsMu);
  st.comms.erase(handle);
}

// A non-blocking split learns its size and rank when the real NCCL reports the communicator ready.
void announceLocked(RecComm& comm) {
  if (comm.announced) return;
  if (comm.nRanks < 0) {
    int n = -1, r = -1;
    if (REAL(ncclCommCount)(comm.handle, &n) != ncclSuccess || REAL(ncclCommUserRank)(comm.handle, &r) != ncclSuccess)
      return;  // not ready yet
    comm.nRanks = n;
    comm.rank = r;
  }
  comm.announced = true;
  ranklens::events::CommInit event;
  event.commId = comm.id;
  event.nranks = comm.nRanks;
  event.rank = comm.rank;
  event.parentId = comm.parentId;
  event.color = comm.color;
  event.key = comm.key;
  event.how = comm.how;
  event.name = comm.name;
  // World ranks are known locally only for root communicators; a split's members follow from every rank's lineage.
  if (comm.parentId < 0)
    for (int i = 0; i < comm.nRanks; ++i) event.worldRanks.push_back(i);
  event.cudaDev = comm.cudaDev;
  event.blocking = comm.blocking;
  event.timeNs = monotonicNs();
  Runtime::get().emit(RecordType::kCommInit, event, comm.rank);
  INFO(kSubInit | kSubRanklens, "record: %s comm %p id %lu rank %d nranks %d cudaDev %d%s%s", comm.how.c_str(),
       static_cast<void*>(comm.handle), static_cast<unsigned long>(comm.id), comm.rank, comm.nRanks, comm.cudaDev,
       comm.name.empty() ? "" : " name ", comm.name.c_str());
}

namespace {
// Registered after this library's CUDA runtime created its first events (prepareDevice), so that it runs before
// that runtime's own exit handler: the background thread must not touch a torn-down runtime.
void installExitHandler() {
  static std::once_flag exitHandler;
  std::call_once(exitHandler, [] {
    atexit([] {
      // Captured calls whose graph never completed a launch: written now, without a duration.
      if (auto* r = state().recorder.get()) r->finishCaptured();
      flush();
      if (auto* clock = state().kernelClock.get()) {
        clock->abandonPending();  // written with duration -1 and counted, never silently missing
        flush();
      }
      if (auto* r = state().recorder.get()) r->stop();
    });
  });
}
}  // namespace

void registerComm(ncclComm_t handle, int nranks, int rank, int cudaDev, const Lineage& lineage,
                  const ncclConfig_t* config, ncclResult_t result) {
  if (handle == nullptr) return;
  State& st = state();
  ranklens::timing::CallRecorder* rec = recorder();
  auto comm = std::make_shared<RecComm>();
  comm->handle = handle;
  comm->id = Runtime::get().nextCommId();
  comm->nRanks = nranks;
  comm->rank = rank;
  comm->cudaDev = cudaDev;
  comm->how = lineage.how;
  comm->parentId = lineage.parent ? static_cast<int64_t>(lineage.parent->id) : -1;
  comm->color = lineage.color;
  comm->key = lineage.key;
  CommConfig parsed;
  if (lineage.parent) parsed.blocking = lineage.parent->blocking;  // NCCL: a split inherits the parent's config
  if (parseCommConfig(config, &parsed) == ncclSuccess) {
    applyBlockingEnv(&parsed);
    comm->blocking = parsed.blocking != 0;
    comm->name = parsed.name;
  }
  rec->prepareDevice(cudaDev);
  installExitHandler();
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    if (result == ncclSuccess || nranks >= 0) announceLocked(*comm);
  }
  std::unique_lock<std::shared_mutex> lock(st.commsMu);
  st.comms[handle] = std::move(comm);
}

int currentDevice() {
  int dev = 0;
  recorder();
  if (state().device->currentDevice(&dev) != 0) dev = 0;
  return dev;
}

void completed(const std::shared_ptr<RecComm>& comm) {
  std::vector<std::function<void()>> work;
  {
    std::lock_guard<std::mutex> lock(comm->mu);
    announceLocked(*comm);
    work.swap(comm->whenComplete);
  }
  for (auto& w : work) w();
}

}  // namespace record
}  // namespace nccl_fake

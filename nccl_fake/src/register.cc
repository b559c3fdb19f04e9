// SPDX-License-Identifier: Apache-2.0
// Memory (ncclMemAlloc/Free), buffer and window registration, user reduction operators. Registration has nothing to
// set up without peers, but handles must behave like NCCL's: unique, refcounted per buffer, checked on release.
#include <cstdint>
#include <map>
#include <mutex>
#include <set>

#include "nccl_fake/enqueue.h"
#include "nccl_fake/runtime.h"

namespace nccl_fake {
namespace {

// What an ncclWindow_t points to here (NCCL's own ncclWindow_vidmem is a device-side layout no replayed kernel can
// use, since device communicators are refused).
struct VirtualWindow {
  ncclComm* comm;
  void* buff;
  size_t size;
  int flags;
};

std::mutex& allocMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::set<void*>& allocations() {
  static auto* set = new std::set<void*>();
  return *set;
}
std::set<VirtualWindow*>& windows() {
  static auto* set = new std::set<VirtualWindow*>();
  return *set;
}

struct Registration {
  void* buff;
  size_t size;
  int refs;
};

}  // namespace

namespace impl {

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  NCCLCHECK(Runtime::get().ready("ncclMemAlloc"));
  if (ptr == nullptr) {
    WARN("Cuda failure 'invalid argument' (ncclMemAlloc : ptr argument is NULL)");
    return ncclUnhandledCudaError;
  }
  if (size == 0) {  // NCCL falls back to cudaMalloc, which returns NULL for 0 bytes
    *ptr = nullptr;
    return ncclSuccess;
  }
  auto& device = Runtime::get().device();
  if (device.alloc(ptr, size) != 0) {
    WARN("Cuda failure '%s' (ncclMemAlloc of %zu bytes)", ranklens::device::lastError().c_str(), size);
    return ncclUnhandledCudaError;
  }
  std::lock_guard<std::mutex> lock(allocMutex());
  allocations().insert(*ptr);
  INFO(kSubAlloc, "ncclMemAlloc %p size %zu on %s device", *ptr, size, device.name());
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  if (ptr == nullptr) return ncclSuccess;
  NCCLCHECK(Runtime::get().ready("ncclMemFree"));
  {
    std::lock_guard<std::mutex> lock(allocMutex());
    if (allocations().erase(ptr) == 0) {
      WARN("Cuda failure 1 'invalid argument' (ncclMemFree : %p was not allocated by ncclMemAlloc)", ptr);
      return ncclUnhandledCudaError;
    }
  }
  if (Runtime::get().device().free(ptr) != 0) {
    WARN("Cuda failure '%s' (ncclMemFree %p)", ranklens::device::lastError().c_str(), ptr);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  NCCLCHECK(commCheck(comm, "ncclCommRegister", "comm"));
  NCCLCHECK(ptrCheck(handle, "ncclCommRegister", "handle"));
  NCCLCHECK(commUsable(comm, "ncclCommRegister"));
  std::lock_guard<std::mutex> lock(comm->mu);
  // Registering the same range again returns the same handle with one more reference, as NCCL does.
  for (auto& [h, reg] : comm->registrations) {
    auto* r = reinterpret_cast<Registration*>(h);
    if (r->buff == buff && r->size == size) {
      r->refs++;
      *handle = h;
      return ncclSuccess;
    }
  }
  auto* reg = new Registration{buff, size, 1};
  comm->registrations[reg] = size;
  *handle = reg;
  INFO(kSubReg, "ncclCommRegister comm %p buff %p size %zu -> handle %p", static_cast<void*>(comm), buff, size,
       static_cast<void*>(reg));
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  NCCLCHECK(commCheck(comm, "ncclCommRegister", "comm"));  // sic: NCCL names the register call here
  if (handle == nullptr) return ncclSuccess;
  NCCLCHECK(commAlive(comm, "ncclCommDeregister"));
  std::lock_guard<std::mutex> lock(comm->mu);
  auto it = comm->registrations.find(handle);
  if (it == comm->registrations.end()) {
    WARN("Deregister: Could not find handle");
    return ncclInvalidUsage;
  }
  auto* reg = reinterpret_cast<Registration*>(handle);
  if (--reg->refs == 0) {
    comm->registrations.erase(it);
    delete reg;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  NCCLCHECK(commCheck(comm, "ncclCommWindowRegister", "comm"));
  NCCLCHECK(ptrCheck(win, "ncclCommWindowRegister", "win"));
  if (buff == nullptr || size == 0) return ncclSuccess;  // NCCL: nothing to register, *win left as is
  NCCLCHECK(commUsable(comm, "ncclCommWindowRegister"));
  if (reinterpret_cast<uintptr_t>(buff) % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
    WARN("Window address must be suitably aligned.");
    return ncclInvalidArgument;
  }
  auto* window = new VirtualWindow{comm, buff, size, winFlags};
  std::lock_guard<std::mutex> lock(allocMutex());
  windows().insert(window);
  *win = reinterpret_cast<ncclWindow_t>(window);
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  if (win == nullptr) return ncclSuccess;
  std::lock_guard<std::mutex> lock(allocMutex());
  auto* window = reinterpret_cast<VirtualWindow*>(win);
  auto it = windows().find(window);
  if (it == windows().end() || window->comm != comm) {
    WARN("ncclCommWindowDeregister : window %p is not registered with comm %p", static_cast<void*>(win),
         static_cast<void*>(comm));
    return ncclInvalidUsage;
  }
  windows().erase(it);
  delete window;
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  NCCLCHECK(commCheck(comm, "ncclRedOpCreatePreMulSum", "comm"));
  NCCLCHECK(commUsable(comm, "ncclRedOpCreatePreMulSum"));
  NCCLCHECK(ptrCheck(op, "ncclRedOpCreatePreMulSum", "op"));
  if (datatypeSize(datatype) == 0) {
    WARN("ncclRedOpCreatePreMulSum : invalid type %d", static_cast<int>(datatype));
    return ncclInvalidArgument;
  }
  if (residence == ncclScalarHostImmediate) NCCLCHECK(ptrCheck(scalar, "ncclRedOpCreatePreMulSum", "scalar"));
  // Like NCCL: a host scalar is read now, a device scalar each time a reduction with the operator runs.
  ncclComm::UserRedOp userOp;
  userOp.datatype = datatype;
  if (residence == ncclScalarHostImmediate)
    memcpy(&userOp.scalar.bits, scalar, datatypeSize(datatype));
  else
    userOp.scalar.at = scalar;
  std::lock_guard<std::mutex> lock(comm->mu);
  size_t slot = comm->userOps.size();
  if (!comm->freeUserOps.empty()) {  // NCCL reuses the most recently freed slot first
    slot = comm->freeUserOps.back();
    comm->freeUserOps.pop_back();
    comm->userOps[slot] = userOp;
  } else {
    comm->userOps.push_back(userOp);
  }
  *op = static_cast<ncclRedOp_t>(userRedOpMangle(comm, ncclNumOps + static_cast<int>(slot)));
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (0 <= static_cast<int>(op) && op < ncclNumOps) {
    WARN("ncclRedOpDestroy : operator is a NCCL builtin.");
    return ncclInvalidArgument;
  }
  if (static_cast<int>(op) < 0 || op > ncclMaxRedOp) {
    WARN("ncclRedOpDestroy :  operator is garbage.");
    return ncclInvalidArgument;
  }
  if (comm == nullptr) {
    WARN("ncclRedOpDestroy : invalid communicator passed.");
    return ncclInvalidArgument;
  }
  NCCLCHECK(commCheck(comm, "ncclRedOpDestroy", "comm"));
  NCCLCHECK(commAlive(comm, "ncclRedOpDestroy"));
  std::lock_guard<std::mutex> lock(comm->mu);
  long slot = static_cast<long>(userRedOpMangle(comm, op)) - ncclNumOps;
  if (slot < 0 || static_cast<size_t>(slot) >= comm->userOps.size() || comm->userOps[slot].datatype == ncclNumTypes) {
    WARN("ncclRedOpDestroy : operator unknown to this communicator.");
    return ncclInvalidArgument;
  }
  comm->userOps[slot] = ncclComm::UserRedOp{};
  comm->freeUserOps.push_back(static_cast<size_t>(slot));
  return ncclSuccess;
}

}  // namespace impl
}  // namespace nccl_fake

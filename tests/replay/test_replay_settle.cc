// SPDX-License-Identifier: Apache-2.0
// In process, without a GPU: replay ends every call and group that marked its stream's arrival with
// StreamDevice::settle(), also when it held nothing and when its effects failed. On the CUDA device a mark is
// deferred into the call's hold launch; one left unsettled would be carried into the next call (its copies and
// fences with it). A host device that hands out marks and counts the unsettled ones stands in for the GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "nccl_fake/core.h"
#include "nccl_fake/runtime.h"
#include "ranklens/device.h"
#include "recorded_rank.h"

namespace {

using ranklens::device::StreamDevice;

class MarkingDevice final : public StreamDevice {
 public:
  explicit MarkingDevice(std::unique_ptr<StreamDevice> host) : host_(std::move(host)) {}
  const char* name() const override { return "marking host"; }
  int copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) override {
    if (failing()) return 1;
    return host_->copy(dst, src, bytes, stream);
  }
  int fill(void* dst, size_t count, size_t elemSize, uint64_t pattern, cudaStream_t stream) override {
    return host_->fill(dst, count, elemSize, pattern, stream);
  }
  int reduceCopies(void* dst, const void* src, size_t count, const ranklens::device::Reduction& reduction,
                   cudaStream_t stream) override {
    if (failing()) return 1;
    return host_->reduceCopies(dst, src, count, reduction, stream);
  }
  int hold(const ranklens::device::HoldRequest& request, cudaStream_t stream) override {
    holdsFromMarks += request.arrival != 0;
    return host_->hold(request, stream);
  }
  int arrive(cudaStream_t, bool, uint64_t* arrival) override {
    *arrival = ++marks;
    ++unsettled;
    return 0;
  }
  int settle() override {
    settles++;
    unsettled = 0;
    return 0;
  }
  int alloc(void** ptr, size_t bytes) override { return host_->alloc(ptr, bytes); }
  int free(void* ptr) override { return host_->free(ptr); }
  int currentDevice(int* device) override { return host_->currentDevice(device); }
  void describe(std::string* name, std::string* uuid) override { host_->describe(name, uuid); }
  int memoryInfo(uint64_t* freeBytes, uint64_t* totalBytes) override {
    return host_->memoryInfo(freeBytes, totalBytes);
  }
  int allocHost(void** ptr, size_t bytes) override { return host_->allocHost(ptr, bytes); }
  int freeHost(void* ptr) override { return host_->freeHost(ptr); }
  int fence(cudaStream_t stream, uint64_t* token) override { return host_->fence(stream, token); }
  bool passed(uint64_t token) override { return host_->passed(token); }
  int upload(void* dst, const void* src, size_t bytes, int ordinal, uint64_t* token) override {
    return host_->upload(dst, src, bytes, ordinal, token);
  }
  Calibration calibrate() override { return host_->calibrate(); }

  int marks = 0, unsettled = 0, settles = 0, holdsFromMarks = 0;
  int failEffects = 0;  // the next copies or reductions that fail

 private:
  bool failing() {
    if (failEffects == 0) return false;
    --failEffects;
    return true;
  }
  std::unique_ptr<StreamDevice> host_;
};

// Rank 1 of 2: six 1 KiB AllReduces, the third timed at 0 ns (nothing to hold).
std::string writeRecording() {
  const std::string root = std::string(TEST_TMP_DIR) + "/settle-" + std::to_string(getpid());
  auto w = ranklens::test::recordedRank(root + "/rank1", 1, 2);
  for (uint64_t seq = 0; seq < 6; ++seq) {
    ranklens::events::Call c;
    c.seq = seq;
    c.op = static_cast<int>(ranklens::events::Op::kAllReduce);
    c.count = 256;
    c.datatype = ncclFloat32;
    c.redop = ncclSum;
    c.bytes = 1024;
    c.nranks = 2;
    c.rootOrPeer = -1;
    ranklens::test::appendTimedCall(*w, c, seq == 2 ? 0 : 50'000);
  }
  EXPECT_TRUE(w->close().isOk());
  return root;
}

TEST(ReplaySettle, EveryCallAndGroupThatMarkedIsSettled) {
  const std::string root = writeRecording();
  setenv("RANKLENS_MODE", "replay", 1);
  setenv("RANKLENS_DEVICE", "host", 1);
  setenv("RANKLENS_FIDELITY", "timing", 1);
  setenv("RANKLENS_REPLAY_TRACE", root.c_str(), 1);
  setenv("RANKLENS_TRACE_DIR", (root + "-replayed").c_str(), 1);
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "2", 1);
  auto& runtime = nccl_fake::Runtime::get();
  ASSERT_EQ(runtime.ready("test"), ncclSuccess);
  auto owned = std::make_unique<MarkingDevice>(ranklens::device::makeHostDevice());
  MarkingDevice* device = owned.get();
  runtime.setDeviceForTesting(std::move(owned));

  ncclUniqueId id;
  ASSERT_EQ(nccl_fake::impl::ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(nccl_fake::impl::ncclCommInitRank(&comm, 2, id, 1), ncclSuccess);
  std::vector<float> send(256, 1.0f), recv(256);
  auto* stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5});
  auto* side = reinterpret_cast<cudaStream_t>(uintptr_t{0x6});
  auto allReduce = [&](cudaStream_t s) {
    return nccl_fake::impl::ncclAllReduce(send.data(), recv.data(), 256, ncclFloat32, ncclSum, comm, s);
  };
  // seq 0, 1: held from their marks; seq 2: recorded 0 ns, nothing held, the mark still settled.
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(allReduce(stream), ncclSuccess) << i;
    EXPECT_EQ(device->marks, i + 1);
    EXPECT_EQ(device->unsettled, 0) << "call " << i;
  }
  EXPECT_EQ(device->holdsFromMarks, 2);
  // seq 3: its receive buffer's effect (a clone sum) fails: the call fails, and its mark is settled all the same.
  device->failEffects = 1;
  EXPECT_EQ(allReduce(stream), ncclUnhandledCudaError);
  EXPECT_EQ(device->unsettled, 0);
  // seq 4 and 5 in a group on two streams: one mark per stream, both settled at the group's end.
  const int before = device->marks;
  ASSERT_EQ(nccl_fake::impl::ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(allReduce(stream), ncclSuccess);
  ASSERT_EQ(allReduce(side), ncclSuccess);
  EXPECT_EQ(device->marks, before) << "nothing is marked before the group ends";
  nccl_fake::impl::ncclGroupEnd();
  EXPECT_EQ(device->marks, before + 2);
  EXPECT_EQ(device->unsettled, 0);
  EXPECT_GE(device->settles, 5);
  nccl_fake::impl::ncclCommDestroy(comm);
}

}  // namespace

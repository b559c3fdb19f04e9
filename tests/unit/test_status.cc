// SPDX-License-Identifier: Apache-2.0
// ranklens::Status: the codes the C boundary relies on, context, and RL_CHECK's early return.
#include <gtest/gtest.h>
#include <nccl.h>

#include "ranklens/status.h"

namespace {

using ranklens::Status;

TEST(Status, DefaultIsOkWithNoMessage) {
  Status s;
  EXPECT_TRUE(s.isOk());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_TRUE(s.message().empty());
  EXPECT_EQ(s.toString(), "ok");
}

// The library returns a Status's code to the program unchanged: it must be NCCL's value.
TEST(Status, CodesEqualNcclResults) {
  EXPECT_EQ(static_cast<int>(Status::Code::kOk), ncclSuccess);
  EXPECT_EQ(static_cast<int>(Status::Code::kUnhandledCudaError), ncclUnhandledCudaError);
  EXPECT_EQ(static_cast<int>(Status::Code::kSystemError), ncclSystemError);
  EXPECT_EQ(static_cast<int>(Status::Code::kInternalError), ncclInternalError);
  EXPECT_EQ(static_cast<int>(Status::Code::kInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(static_cast<int>(Status::Code::kInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(static_cast<int>(Status::Code::kRemoteError), ncclRemoteError);
}

TEST(Status, ContextPrefixesFailuresOnly) {
  Status bad = Status::corrupt("frame CRC mismatch at offset 64");
  EXPECT_EQ(bad.withContext("rank3/seg-0.rlseg").message(), "rank3/seg-0.rlseg: frame CRC mismatch at offset 64");
  EXPECT_EQ(bad.withContext("x").code(), Status::Code::kCorrupt);
  EXPECT_EQ(bad.withContext("").message(), bad.message());
  EXPECT_TRUE(Status::ok().withContext("rank3").isOk());
  EXPECT_EQ(bad.toString(), "damaged input: frame CRC mismatch at offset 64");
}

TEST(Status, CopiesAndMovesKeepTheFailure) {
  Status bad = Status::systemError("disk full");
  Status copy = bad;
  EXPECT_EQ(copy.message(), "disk full");
  EXPECT_EQ(bad.message(), "disk full");
  Status moved = std::move(copy);
  EXPECT_EQ(moved.code(), Status::Code::kSystemError);
  copy = moved;
  EXPECT_EQ(copy.toString(), "system error: disk full");
  copy = Status::ok();
  EXPECT_TRUE(copy.isOk());
  // error() with kOk must not make a failure that reads as success.
  EXPECT_FALSE(Status::error(Status::Code::kOk, "x").isOk());
}

Status failsAt(int step, int* reached) {
  for (int i = 0; i < 3; ++i) {
    *reached = i;
    RL_CHECK(i == step ? Status::invalidArgument("step " + std::to_string(i)) : Status::ok());
  }
  return Status::ok();
}

TEST(Status, CheckReturnsTheFirstFailure) {
  int reached = -1;
  Status s = failsAt(1, &reached);
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(s.code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "step 1");
  EXPECT_TRUE(failsAt(5, &reached).isOk());
  EXPECT_EQ(reached, 2);
}

}  // namespace

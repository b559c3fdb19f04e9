// SPDX-License-Identifier: Apache-2.0
// The C boundary of the error convention: a ranklens::Status becomes the code the real NCCL would return and its
// message becomes ncclGetLastError's text (nccl_fake/debug.h, toNcclResult).
#include <gtest/gtest.h>

#include <string>

#include "nccl_fake/core.h"

namespace {

using Code = ranklens::Status::Code;

TEST(StatusBoundary, CodesEqualNcclsWhereNcclHasOne) {
  EXPECT_EQ(nccl_fake::ncclCode(Code::kOk), ncclSuccess);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kUnhandledCudaError), ncclUnhandledCudaError);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kSystemError), ncclSystemError);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kInternalError), ncclInternalError);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kInvalidArgument), ncclInvalidArgument);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kInvalidUsage), ncclInvalidUsage);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kRemoteError), ncclRemoteError);
}

TEST(StatusBoundary, RankLensOwnCodesMapToTheCodeNcclAnswersWith) {
  EXPECT_EQ(nccl_fake::ncclCode(Code::kCorrupt), ncclInvalidUsage);
  EXPECT_EQ(nccl_fake::ncclCode(Code::kUnsupported), ncclInvalidArgument);
}

TEST(StatusBoundary, AFailureBecomesTheLastErrorText) {
  nccl_fake::setLastErrorText("");
  const ranklens::Status damaged = ranklens::Status::corrupt("rank0/manifest: offset 12: bad magic");
  EXPECT_EQ(nccl_fake::toNcclResult(damaged, "ncclCommInitRank"), ncclInvalidUsage);
  EXPECT_EQ(std::string(nccl_fake::lastErrorText()), "ncclCommInitRank : rank0/manifest: offset 12: bad magic");
  EXPECT_EQ(nccl_fake::toNcclResult(ranklens::Status::unsupported("no such kernel")), ncclInvalidArgument);
  EXPECT_EQ(std::string(nccl_fake::lastErrorText()), "no such kernel");
}

TEST(StatusBoundary, SuccessLeavesTheLastErrorAlone) {
  nccl_fake::setLastErrorText("earlier");
  EXPECT_EQ(nccl_fake::toNcclResult(ranklens::Status::ok(), "ncclAllReduce"), ncclSuccess);
  EXPECT_EQ(std::string(nccl_fake::lastErrorText()), "earlier");
}

}  // namespace

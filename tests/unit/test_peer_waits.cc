// SPDX-License-Identifier: Apache-2.0
// timing::peerWaits on two synthetic ranks of one job: each collective's wait is the duration less the shortest over
// the ranks, summed per rank and per step (between "step" markers); P2P calls, groups and one-rank communicators are
// left out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "ranklens/events.h"
#include "ranklens/peer_waits.h"
#include "ranklens/recording.h"
#include "ranklens/trace.h"
#include "recorded_rank.h"

namespace ranklens {
namespace timing {
namespace {

constexpr int kAllReduce = static_cast<int>(events::Op::kAllReduce);
constexpr int64_t kStepNs = 1'000'000;

// Per step k (markers at k ms): two AllReduces on the world communicator with the given durations, a Send, a grouped
// AllReduce and an AllReduce on a one-rank communicator (none of them paired).
void writeRank(const std::string& dir, int rank, const std::vector<int64_t>& allReduceNs, const char* marker) {
  auto w = test::recordedRank(dir, rank, 2);
  ASSERT_NE(w, nullptr);
  events::CommInit self;
  self.commId = 1;
  self.nranks = 1;
  self.rank = 0;
  self.parentId = 0;
  self.how = "split";
  w->append(trace::RecordType::kCommInit, self);
  auto call = [&](uint64_t comm, uint64_t seq, int op, int nranks, uint64_t group, int64_t at, int64_t ns) {
    events::Call c;
    c.commId = comm;
    c.seq = seq;
    c.op = op;
    c.count = 1024;
    c.datatype = 7;
    c.bytes = 4096;
    c.nranks = nranks;
    c.rootOrPeer = op == kAllReduce ? -1 : 1 - rank;
    c.groupId = group;
    c.timeNs = at;
    w->append(trace::RecordType::kCall, c);
    trace::Timing t;
    t.commId = comm;
    t.seq = seq;
    t.op = op;
    t.groupId = group;
    t.durationNs = ns;
    t.peer = c.rootOrPeer;
    w->append(trace::RecordType::kTiming, t);
  };
  const int steps = static_cast<int>(allReduceNs.size() / 2);
  for (int k = 0; k <= steps; ++k) {
    w->append(trace::RecordType::kStage, events::Stage{marker, k, k * kStepNs});
    if (k == steps) break;
    for (int i = 0; i < 2; ++i) call(0, 3 * k + i, kAllReduce, 2, 0, k * kStepNs + 100 + i, allReduceNs[2 * k + i]);
    call(0, 3 * k + 2, kAllReduce, 2, 7 + k, k * kStepNs + 200, 50'000 * (rank + 1));  // grouped
    call(0, k, static_cast<int>(events::Op::kSend), 2, 0, k * kStepNs + 300, 40'000 * (rank + 1));
    call(1, k, kAllReduce, 1, 0, k * kStepNs + 400, 30'000 * (rank + 1));
  }
  ASSERT_TRUE(w->close());
}

TEST(PeerWaits, EachCollectiveWaitIsItsDurationLessTheShortestOverTheRanks) {
  const std::string job = ::testing::TempDir() + "/waits-" + std::to_string(getpid());
  // Step 0: rank 0 waits 40 us then 0 (rank 1 waits 5 us); step 1: rank 0 waits 90 us and 70 us.
  writeRank(job + "/rank0", 0, {50'000, 10'000, 100'000, 80'000}, "step");
  writeRank(job + "/rank1", 1, {10'000, 15'000, 10'000, 10'000}, "step");
  std::string error;
  auto r0 = trace::Recording::open(job + "/rank0", -1, &error);
  ASSERT_TRUE(r0) << error;
  auto r1 = trace::Recording::open(job + "/rank1", -1, &error);
  ASSERT_TRUE(r1) << error;
  const std::vector<RankWaits> w = peerWaits({r0.get(), r1.get()});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rank, 0);
  EXPECT_EQ(w[0].collectives, 4u);  // the world's ungrouped AllReduces only
  EXPECT_EQ(w[0].lastToArrive, 1u);
  EXPECT_EQ(w[0].waitNs, 40'000 + 90'000 + 70'000);
  EXPECT_EQ(w[1].lastToArrive, 3u);
  EXPECT_EQ(w[1].waitNs, 5'000);
  ASSERT_EQ(w[0].steps.size(), 2u);
  EXPECT_EQ(w[0].steps[0].step, 0);
  EXPECT_EQ(w[0].steps[0].stepNs, kStepNs);
  EXPECT_EQ(w[0].steps[0].waitNs, 40'000);
  EXPECT_EQ(w[0].steps[1].waitNs, 160'000);
  EXPECT_EQ(w[1].steps[0].waitNs, 5'000);
  EXPECT_EQ(w[1].steps[1].waitNs, 0);
}

TEST(PeerWaits, OptimizerMarkersStandInForStepMarkersAndALoneRankWaitsForNobody) {
  const std::string job = ::testing::TempDir() + "/waits-opt-" + std::to_string(getpid());
  writeRank(job + "/rank0", 0, {50'000, 10'000, 100'000, 80'000}, "optimizer");
  std::string error;
  auto r0 = trace::Recording::open(job + "/rank0", -1, &error);
  ASSERT_TRUE(r0) << error;
  const std::vector<RankWaits> w = peerWaits({r0.get()});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].collectives, 0u);  // timed on no other rank: nothing to compare
  EXPECT_EQ(w[0].waitNs, 0);
  EXPECT_EQ(w[0].steps.size(), 2u);  // the adapter's optimizer markers make the steps
}

}  // namespace
}  // namespace timing
}  // namespace ranklens

// SPDX-License-Identifier: Apache-2.0
// timing::peerWaits on two synthetic ranks of one job: each collective's wait is the duration less the shortest over
// the ranks, summed per rank and per step (between "step" markers); P2P calls, groups and one-rank communicators are
// left out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "ranklens/device.h"
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
// `gapNs`: each ungrouped world AllReduce's Timing.gapNs (-1 unknown); empty: all unknown, and the unpaired calls
// carry gaps that must not be used.
void writeRank(const std::string& dir, int rank, const std::vector<int64_t>& allReduceNs, const char* marker,
               const std::vector<int64_t>& gapNs = {}) {
  auto w = test::recordedRank(dir, rank, 2);
  ASSERT_NE(w, nullptr);
  events::CommInit self;
  self.commId = 1;
  self.nranks = 1;
  self.rank = 0;
  self.parentId = 0;
  self.how = "split";
  w->append(trace::RecordType::kCommInit, self);
  auto call = [&](uint64_t comm, uint64_t seq, int op, int nranks, uint64_t group, int64_t at, int64_t ns,
                  int64_t gap = 777) {
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
    test::appendTimedCall(*w, c, ns, gap);
  };
  const int steps = static_cast<int>(allReduceNs.size() / 2);
  for (int k = 0; k <= steps; ++k) {
    w->append(trace::RecordType::kStage, events::Stage{marker, k, k * kStepNs});
    if (k == steps) break;
    for (int i = 0; i < 2; ++i)
      call(0, 3 * k + i, kAllReduce, 2, 0, k * kStepNs + 100 + i, allReduceNs[2 * k + i],
           gapNs.empty() ? -1 : gapNs[2 * k + i]);
    call(0, 3 * k + 2, kAllReduce, 2, 7 + k, k * kStepNs + 200, 50'000 * (rank + 1));  // grouped
    call(0, k, static_cast<int>(events::Op::kSend), 2, 0, k * kStepNs + 300, 40'000 * (rank + 1));
    call(1, k, kAllReduce, 1, 0, k * kStepNs + 400, 30'000 * (rank + 1));
  }
  ASSERT_TRUE(w->close().isOk());
}

TEST(PeerWaits, EachCollectiveWaitIsItsDurationLessTheShortestOverTheRanks) {
  const std::string job = ::testing::TempDir() + "/waits-" + std::to_string(getpid());
  // Step 0: rank 0 waits 40 us then 0 (rank 1 waits 5 us); step 1: rank 0 waits 90 us and 70 us.
  writeRank(job + "/rank0", 0, {50'000, 10'000, 100'000, 80'000}, "step");
  writeRank(job + "/rank1", 1, {10'000, 15'000, 10'000, 10'000}, "step");
  std::string error;
  std::unique_ptr<trace::Recording> r0;
  error = trace::Recording::open(job + "/rank0", -1, &r0).message();
  ASSERT_TRUE(r0) << error;
  std::unique_ptr<trace::Recording> r1;
  error = trace::Recording::open(job + "/rank1", -1, &r1).message();
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

// peer_pacing's view of the same job: each paired collective's last-arrival duration (the shortest over the ranks)
// and the peer's gap; a collective whose peer gap is unknown, grouped, P2P and one-rank calls get none.
TEST(PeerPace, LastArrivalDurationAndThePeersGapPerCollective) {
  const std::string job = ::testing::TempDir() + "/pace-" + std::to_string(getpid());
  writeRank(job + "/rank0", 0, {50'000, 10'000, 100'000, 80'000}, "step", {-1, 3'000, 4'000, 5'000});
  writeRank(job + "/rank1", 1, {10'000, 15'000, 10'000, 10'000}, "step", {20'000, -1, 60'000, -7'000});
  std::string error;
  std::unique_ptr<trace::Recording> r0;
  error = trace::Recording::open(job + "/rank0", -1, &r0).message();
  ASSERT_TRUE(r0) << error;
  std::unique_ptr<trace::Recording> r1;
  error = trace::Recording::open(job + "/rank1", -1, &r1).message();
  ASSERT_TRUE(r1) << error;
  const std::vector<PeerPace> mine = peerPace({r0.get(), r1.get()}, 0);
  ASSERT_EQ(mine.size(), r0->calls().size());
  std::vector<PeerPace> paced;
  for (const auto& rc : r0->calls()) {
    const PeerPace& p = mine[rc.order];
    const bool worldAllReduce = rc.call.commId == 0 && rc.call.op == kAllReduce && rc.call.groupId == 0;
    if (!worldAllReduce) EXPECT_FALSE(p.known) << "comm " << rc.call.commId << " seq " << rc.call.seq;
    if (worldAllReduce) paced.push_back(p);
  }
  ASSERT_EQ(paced.size(), 4u);
  EXPECT_TRUE(paced[0].known);  // rank 0's own gap is not needed
  EXPECT_EQ(paced[0].lastNs, 10'000);
  EXPECT_EQ(paced[0].peerGapNs, 20'000);
  EXPECT_FALSE(paced[1].known);  // rank 1's gap unknown
  EXPECT_EQ(paced[2].lastNs, 10'000);
  EXPECT_EQ(paced[2].peerGapNs, 60'000);
  EXPECT_EQ(paced[3].peerGapNs, -7'000);  // the peer started before the previous one ended (another stream)
  const std::vector<PeerPace> theirs = peerPace({r0.get(), r1.get()}, 1);
  int known = 0;
  for (const auto& rc : r1->calls())
    if (theirs[rc.order].known) {
      ++known;
      EXPECT_EQ(theirs[rc.order].peerGapNs, rc.call.seq == 1 ? 3'000 : rc.call.seq == 3 ? 4'000 : 5'000);
    }
  EXPECT_EQ(known, 3);  // rank 0's first gap is unknown
  const std::vector<PeerPace> alone = peerPace({r0.get()}, 0);
  EXPECT_TRUE(std::none_of(alone.begin(), alone.end(), [](const PeerPace& p) { return p.known; }));
}

// The end of a paced hold (device::pacedDeadline, shared by the hold kernel and the host device).
TEST(PacedDeadline, LaterOfArrivalAndPeersThenTheLastArrivalsDuration) {
  using device::pacedDeadline;
  // The previous collective (index 4) ended at 1000; peers arrive 500 later.
  EXPECT_EQ(pacedDeadline(1200, 900, 1000, 4, 5, true, 500, 100), 1600u);   // waits for the peers
  EXPECT_EQ(pacedDeadline(2000, 900, 1000, 4, 5, true, 500, 100), 2100u);   // the peers were there
  EXPECT_EQ(pacedDeadline(1200, 900, 1000, 4, 5, true, -800, 100), 1300u);  // they arrived before it ended
  EXPECT_EQ(pacedDeadline(1200, 900, 1000, 4, 5, false, 500, 100), 2100u);  // unknown pace: its own duration
  EXPECT_EQ(pacedDeadline(1200, 900, 1000, 3, 5, true, 500, 100), 2100u);   // index 4 not held (yet)
  EXPECT_EQ(pacedDeadline(1200, 900, 1700, 5, 5, true, 500, 100), 1700u);   // another block ended it already
}

// A hold writes its end to the chain (device::advanceChain), unless a later collective is there already.
TEST(PacedDeadline, TheChainKeepsTheLatestCollective) {
  unsigned long long chain[2] = {1000, 4};
  device::advanceChain(chain, 1600, 5);
  EXPECT_EQ(chain[0], 1600u);
  EXPECT_EQ(chain[1], 5u);
  device::advanceChain(chain, 1300, 5);  // another block of the same hold
  device::advanceChain(chain, 1200, 3);  // an earlier collective that ran late
  EXPECT_EQ(chain[0], 1600u);
  EXPECT_EQ(chain[1], 5u);
}

TEST(PeerWaits, OptimizerMarkersStandInForStepMarkersAndALoneRankWaitsForNobody) {
  const std::string job = ::testing::TempDir() + "/waits-opt-" + std::to_string(getpid());
  writeRank(job + "/rank0", 0, {50'000, 10'000, 100'000, 80'000}, "optimizer");
  std::string error;
  std::unique_ptr<trace::Recording> r0;
  error = trace::Recording::open(job + "/rank0", -1, &r0).message();
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

// torchrun's static rendezvous over the in-memory store on a manual clock: every node of a fixed
// number joins a round with its own node rank, learns the restarts so far, and nodes that
// disagree on a job-wide setting are refused.
#include <gtest/gtest.h>

#include <future>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"
#include "rdzv/rendezvous_protocol.h"
#include "rdzv/round_ops.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

// Node `rank` on host "host<rank>".
NodeInfo node(int rank, int nproc, std::map<std::string, std::string> settings = {}) {
  static const char* const kHosts[] = {"host0", "host1", "host2"};
  NodeInfo n;
  n.node_rank = rank;
  n.nproc = nproc;
  n.host = kHosts[rank];
  n.id = n.host + ":1:x";
  n.settings = std::move(settings);
  return n;
}

class StaticProtocolTest : public ::testing::Test {
 protected:
  // Node `self` joining the round after `after_round` on a thread and connection of its own.
  std::future<RankAssignment> join(NodeInfo self, int after_round = -1) {
    return std::async(std::launch::async, [this, self, after_round] {
      auto conn = store_.connect();
      StaticProtocol protocol(2, 1h);
      int told_round = -2, told_rank = -1;
      RankAssignment a =
          protocol.join(*conn, after_round, self, [&](int round, int rank, NodeInfo* info) {
            told_round = round;
            told_rank = rank;
            EXPECT_EQ(info->id, self.id);
          });
      // Its round and rank are known before the others come.
      EXPECT_EQ(told_round, a.round);
      EXPECT_EQ(told_rank, self.node_rank);
      return a;
    });
  }

  ManualClock clock_;
  MemoryStore store_{1h, clock_};
};

TEST_F(StaticProtocolTest, TwoNodesFormARoundWithRanksInNodeOrder) {
  auto b = join(node(1, 3));
  auto a = join(node(0, 2));
  const RankAssignment ra = a.get(), rb = b.get();
  EXPECT_EQ(ra.round, 0);
  EXPECT_EQ(ra.restart_count, 0);
  EXPECT_EQ(ra.nnodes, 2);
  EXPECT_EQ(ra.world_size, 5);
  EXPECT_EQ(ra.base_rank, 0);
  EXPECT_EQ(rb.base_rank, 2);
  EXPECT_EQ(rb.local_world_size, 3);
  EXPECT_EQ(rb.nodes[0].host, "host0");
}

TEST_F(StaticProtocolTest, ARestartJoinsTheNextRoundWithTheRestartsSpent) {
  round_ops::publish_failure(store_, 0, 1, 0, {});  // round 0 failed: one restart spent
  auto a = join(node(0, 1), 0), b = join(node(1, 1), 0);
  const RankAssignment ra = a.get();
  EXPECT_EQ(ra.round, 1);
  EXPECT_EQ(ra.restart_count, 1);
  EXPECT_EQ(b.get().restart_count, 1);
}

TEST_F(StaticProtocolTest, NodesThatDisagreeOnASettingAreBothRefused) {
  auto a = join(node(0, 1, {{"--max-restarts", "3"}}));
  auto b = join(node(1, 1, {{"--max-restarts", "1"}}));
  EXPECT_THROW(a.get(), UsageError);
  EXPECT_THROW(b.get(), UsageError);
}

TEST_F(StaticProtocolTest, ANodeThatNeverComesIsNamedAtTheTimeout) {
  auto conn = store_.connect();
  StaticProtocol protocol(3, 0ms);  // on the manual clock: times out at once
  try {
    protocol.join(*conn, -1, node(0, 1), nullptr);
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("node rank(s) 1, 2 of 3 did not join"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::launch

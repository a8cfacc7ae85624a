// The elastic rendezvous (DynamicProtocol) over the in-memory store, on a manual clock: last
// calls, full rounds, rescale and join timeouts, in milliseconds.
#include "rdzv/dynamic_protocol.h"

#include <gtest/gtest.h>

#include <future>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"
#include "cohort/rdzv/prefix_store.h"
#include "rdzv/round_ops.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class ElasticProtocolTest : public ::testing::Test {
 protected:
  // A node joining the round after `after_round` on a thread of its own.
  std::future<RankAssignment> join(const std::string& id, DynamicSettings s, int after_round = -1) {
    return std::async(std::launch::async, [this, id, s, after_round] {
      auto conn = store_.connect();
      PrefixStore scoped("cohort/job", *conn);
      DynamicProtocol protocol(s, clock_);
      NodeInfo self;
      self.id = id;
      self.nproc = 2;
      return protocol.join(scoped, after_round, self, nullptr);
    });
  }
  // Waits until `key` (under the job's prefix) exists.
  void await_key(const std::string& key) {
    std::vector<std::string> k{"cohort/job/" + key};
    Store& s = store_;
    s.wait(k, 10s);
  }
  // Lets `step` of time pass, again and again, until every future is ready (a node times its
  // last call from when it first sees enough nodes, which it may do after an advance). False
  // after 200 steps.
  bool advance_until_ready(std::vector<std::future<RankAssignment>*> fs, Clock::duration step) {
    for (int i = 0; i < 200; ++i) {
      bool all = true;
      for (auto* f : fs) all &= f->wait_for(i == 0 ? 0ms : 20ms) == std::future_status::ready;
      if (all) return true;
      clock_.advance(step);
    }
    return false;
  }

  ManualClock clock_;
  MemoryStore store_{std::chrono::hours(1), clock_};
};

DynamicSettings settings(int min, int max) {
  DynamicSettings s;
  s.min_nodes = min;
  s.max_nodes = max;
  s.last_call_timeout = 30s;
  s.join_timeout = 600s;
  s.node_info_timeout = 60s;
  return s;
}

TEST_F(ElasticProtocolTest, MinNodesCompleteTheRoundWhenTheLastCallEnds) {
  auto a = join("node-a", settings(2, 3));
  auto b = join("node-b", settings(2, 3));
  await_key("rdzv/round/0/changed/2");                          // both joined
  EXPECT_FALSE(a.wait_for(50ms) == std::future_status::ready);  // the last call is open
  ASSERT_TRUE(advance_until_ready({&a, &b}, 31s));
  RankAssignment ra = a.get(), rb = b.get();
  EXPECT_EQ(ra.round, 0);
  EXPECT_EQ(ra.nnodes, 2);
  EXPECT_EQ(ra.world_size, 4);
  EXPECT_EQ(ra.node_rank, 0);  // ids in sorted order
  EXPECT_EQ(rb.node_rank, 1);
  EXPECT_EQ(rb.base_rank, 2);
}

TEST_F(ElasticProtocolTest, MaxNodesCompleteTheRoundAtOnce) {
  auto a = join("a", settings(1, 2));
  auto b = join("b", settings(1, 2));
  EXPECT_EQ(a.get().nnodes, 2);  // no clock advance needed
  EXPECT_EQ(b.get().nnodes, 2);
}

TEST_F(ElasticProtocolTest, ALateNodeEndsARunningRoundAsRescale) {
  auto a = join("a", settings(1, 3));
  ASSERT_TRUE(advance_until_ready({&a}, 31s));
  RankAssignment first = a.get();
  ASSERT_EQ(first.nnodes, 1);
  auto late = join("c", settings(1, 3));
  await_key(keys::outcome(0));
  {
    auto conn = store_.connect();
    PrefixStore scoped("cohort/job", *conn);
    auto o = round_ops::outcome_of(scoped, 0);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->kind, Outcome::kRescale);
    EXPECT_EQ(o->restarts, 0);  // a rescale spends no restart
  }
  auto again = join("a", settings(1, 3), /*after_round=*/0);
  await_key("rdzv/round/1/changed/2");  // both in round 1
  ASSERT_TRUE(advance_until_ready({&again, &late}, 31s));
  EXPECT_EQ(again.get().nnodes, 2);
  EXPECT_EQ(late.get().round, 1);
}

TEST_F(ElasticProtocolTest, TooFewNodesTimeOutNamingTheMinimum) {
  auto a = join("a", settings(2, 2));
  await_key("rdzv/round/0/changed/1");
  ASSERT_TRUE(advance_until_ready({&a}, 601s));
  try {
    a.get();
    FAIL() << "joined alone";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("fewer than 2 nodes joined"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::launch

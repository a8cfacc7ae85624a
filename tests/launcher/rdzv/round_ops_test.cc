// The per-round bookkeeping in the store, on the in-memory store and a manual clock: node records,
// the outcome decided once (and when), failures collected from every node, the success count,
// status records, the exit barrier, and the job-wide claim of the workers' store ports.
#include "rdzv/round_ops.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

NodeInfo node(int rank, int nproc) {
  NodeInfo n;
  n.id = "id-" + std::to_string(rank);
  n.node_rank = rank;
  n.nproc = nproc;
  n.host = "h" + std::to_string(rank);
  return n;
}

WorkerFailure failure(int node_rank, int local_rank, const std::string& reason) {
  WorkerFailure f;
  f.node_rank = node_rank;
  f.local_rank = local_rank;
  f.global_rank = node_rank * 10 + local_rank;
  f.reason = reason;
  f.message = reason;
  return f;
}

// On the manual clock a wait with timeout 0 times out at once, whatever the machine's load, and
// one of an hour waits until its keys are set (the clock never advances).
class RoundOpsTest : public ::testing::Test {
 protected:
  // Wakes every blocked wait when it goes out of scope, so that a failed expectation ends the
  // test instead of leaving a std::async's destructor waiting for a thread that waits for ever.
  struct InterruptAtExit {
    Store& store;
    ~InterruptAtExit() { store.interrupt(); }
  };

  ManualClock clock_;
  MemoryStore store_{1h, clock_};
};

TEST_F(RoundOpsTest, EveryNodeGetsEveryRecordInNodeRankOrder) {
  store_.set(keys::node(3, 1), to_json(node(1, 4)));
  const auto nodes = round_ops::exchange_node_info(store_, 3, node(0, 2), 2, 0ms);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].id, "id-0");
  EXPECT_EQ(nodes[1].id, "id-1");
  EXPECT_EQ(nodes[1].nproc, 4);
  // The record is the round's: another round's exchange does not see it.
  EXPECT_FALSE(store_.check(std::vector<std::string>{keys::node(4, 0)}));
}

TEST_F(RoundOpsTest, AnExchangeThatTimesOutNamesTheNodesThatDidNotJoin) {
  store_.set(keys::node(0, 2), to_json(node(2, 1)));
  try {
    round_ops::exchange_node_info(store_, 0, node(0, 1), 4, 0ms);
    FAIL() << "no timeout";
  } catch (const StoreTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("node rank(s) 1, 3 of 4 did not join"), std::string::npos)
        << e.what();
  }
}

TEST_F(RoundOpsTest, AnExchangeWaitsForTheLateNode) {
  auto late = std::async(std::launch::async, [&] {
    return round_ops::exchange_node_info(store_, 0, node(0, 1), 2, 1h);
  });
  InterruptAtExit guard{store_};
  store_.wait(std::vector<std::string>{keys::node(0, 0)}, 1h);  // until node 0 has published
  const auto nodes = round_ops::exchange_node_info(store_, 0, node(1, 1), 2, 0ms);
  EXPECT_EQ(nodes.size(), 2u);
  EXPECT_EQ(late.get().size(), 2u);
}

TEST_F(RoundOpsTest, TheFirstFailureDecidesTheOutcomeAndNothingChangesItAfter) {
  EXPECT_FALSE(round_ops::outcome_of(store_, 0));
  round_ops::publish_failure(store_, 0, 1, 2,
                             {failure(1, 0, "exited with code 3"), failure(1, 1, "killed")});
  round_ops::publish_failure(store_, 0, 0, 2, {failure(0, 0, "exited with code 1")});
  Outcome aborted;
  aborted.kind = Outcome::kAborted;
  round_ops::publish_outcome(store_, 0, aborted);
  round_ops::publish_success(store_, 0, 0, 1);
  const auto o = round_ops::outcome_of(store_, 0);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, Outcome::kFailed);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->restarts, 3);  // the restart this failure spends
  EXPECT_EQ(o->detail, "exited with code 3");
  ASSERT_TRUE(o->first_failure);
  EXPECT_EQ(o->first_failure->local_rank, 0);
  EXPECT_EQ(round_ops::restarts_after(store_, 0), 3);
}

TEST_F(RoundOpsTest, TheLastNodeToSucceedDecidesWithTheRestartsSoFar) {
  Outcome before;
  before.kind = Outcome::kFailed;
  before.restarts = 2;
  round_ops::publish_outcome(store_, 4, before);
  round_ops::publish_success(store_, 5, 2, 3);
  round_ops::publish_success(store_, 5, 0, 3);
  EXPECT_FALSE(round_ops::outcome_of(store_, 5));  // one node still runs
  round_ops::publish_success(store_, 5, 1, 3);
  const auto o = round_ops::outcome_of(store_, 5);
  ASSERT_TRUE(o);
  EXPECT_EQ(o->kind, Outcome::kSucceeded);
  EXPECT_EQ(o->node_rank, 1);
  EXPECT_EQ(o->restarts, 2);  // success spends none
  EXPECT_FALSE(o->first_failure);
}

TEST_F(RoundOpsTest, RestartsBeforeAnyRoundOrAnOutcomeAreZero) {
  EXPECT_EQ(round_ops::restarts_after(store_, -1), 0);
  EXPECT_EQ(round_ops::restarts_after(store_, 7), 0);
}

TEST_F(RoundOpsTest, FailuresAreCollectedFromEveryNodeThatReported) {
  round_ops::publish_failure(store_, 2, 2, 0, {failure(2, 1, "c")});
  round_ops::publish_failure(store_, 2, 0, 0, {failure(0, 0, "a"), failure(0, 1, "b")});
  const auto all = round_ops::collect_failures(store_, 2, 3);  // node 1 reported nothing
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].reason, "a");  // in node order
  EXPECT_EQ(all[1].reason, "b");
  EXPECT_EQ(all[2].reason, "c");  // the outcome's first failure is one of them: not repeated
  EXPECT_TRUE(round_ops::collect_failures(store_, 3, 3).empty());
}

TEST_F(RoundOpsTest, ALostNodeWithoutAReportIsCollectedFromTheOutcome) {
  Outcome lost;
  lost.kind = Outcome::kFailed;
  lost.node_rank = 0;
  lost.first_failure = failure(1, 0, "node h1 lost: no keep-alive for 15 s");
  round_ops::publish_outcome(store_, 0, lost);
  round_ops::publish_failure(store_, 0, 0, 0, {failure(0, 0, "stopped")});
  const auto all = round_ops::collect_failures(store_, 0, 2);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].reason, "stopped");
  EXPECT_EQ(all[1].reason, "node h1 lost: no keep-alive for 15 s");
}

TEST_F(RoundOpsTest, TheExitBarrierOpensWhenTheLastNodeCountsOut) {
  // Node 0 waits; it times out while node 1 is still in.
  EXPECT_THROW(round_ops::exit_barrier(store_, 1, 2, true, 0ms), StoreTimeoutError);
  // Node 1 leaves without waiting: it was the last, so the barrier is open for everyone.
  round_ops::exit_barrier(store_, 1, 2, false, 0ms);
  EXPECT_NO_THROW(store_.wait(std::vector<std::string>{keys::exit_all(1)}, 0ms));
  // Another round's barrier is its own.
  EXPECT_FALSE(store_.check(std::vector<std::string>{keys::exit_all(2)}));
}

TEST_F(RoundOpsTest, AWaitingNodeIsReleasedByTheLastOne) {
  auto first =
      std::async(std::launch::async, [&] { round_ops::exit_barrier(store_, 0, 2, true, 1h); });
  InterruptAtExit guard{store_};
  store_.wait(std::vector<std::string>{keys::exit_count(0)}, 1h);  // until it has counted out
  round_ops::exit_barrier(store_, 0, 2, true, 0ms);                // the last: opens it and passes
  EXPECT_NO_THROW(first.get());
}

TEST_F(RoundOpsTest, NodeRankZeroReadsEveryStatusRecordThatExists) {
  EXPECT_TRUE(round_ops::publish_status(store_, 2, 3, "two").empty());  // others read nothing
  const auto records = round_ops::publish_status(store_, 0, 3, "zero");
  EXPECT_EQ(records, (std::vector<std::string>{"zero", "two"}));  // node 1 has not published
  EXPECT_EQ(store_.get(keys::status(0)), "zero");
}

TEST_F(RoundOpsTest, AnOutcomeIsStampedWithWhenItWasDecided) {
  const double before = wall_clock_now();
  round_ops::publish_failure(store_, 0, 1, 0, {failure(1, 0, "exited with code 3")});
  const auto o = round_ops::outcome_of(store_, 0);
  ASSERT_TRUE(o);
  EXPECT_GE(o->decided_at, before);
  EXPECT_LE(o->decided_at, wall_clock_now());
  round_ops::publish_running(store_, 1, 0, 1234.5);
  EXPECT_EQ(store_.get(keys::running(1, 0)), "1234.500");
}

TEST_F(RoundOpsTest, AWorkerPortIsClaimedOncePerJob) {
  MemoryStore& store = store_;
  EXPECT_TRUE(round_ops::claim_worker_port(store, 4242));
  EXPECT_FALSE(round_ops::claim_worker_port(store, 4242));
  // Not confused with ports whose digits it contains, or that contain its digits.
  EXPECT_TRUE(round_ops::claim_worker_port(store, 424));
  EXPECT_TRUE(round_ops::claim_worker_port(store, 42420));
  EXPECT_TRUE(round_ops::claim_worker_port(store, 2));
  EXPECT_FALSE(round_ops::claim_worker_port(store, 424));
}

TEST_F(RoundOpsTest, ConcurrentClaimsOfOnePortHaveOneWinner) {
  MemoryStore& store = store_;
  std::atomic<int> winners{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int port = 1000; port < 1100; ++port) {
        if (round_ops::claim_worker_port(store, port)) ++winners;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(winners.load(), 100);
}

}  // namespace
}  // namespace cohort::launch

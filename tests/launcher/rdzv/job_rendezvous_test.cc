// JobRendezvous, the bookkeeping both rendezvous share, over in-process MemoryStores: a round's
// outcome reaches the watch (and a malformed one is an error naming the key), aborts carry the
// job's restarts, failures and status records are gathered, the exit barrier holds the hosting
// node until the others count out, the lobby shows other runs, and when the store moves the watch
// moves with it while errors from the old store are not reported.
#include "rdzv/job_rendezvous.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <optional>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"
#include "common/loop_until.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

StoreBridge::StoreFactory connections_to(MemoryStore& store) {
  return [&store](const std::atomic<bool>* abandon) { return store.connect(abandon); };
}

// The smallest rendezvous: the base class's bookkeeping, a static join, and move_store() in reach.
class TestJob final : public JobRendezvous {
 public:
  TestJob(asio::io_context& io, LoopClock& clock, std::string run_id, MemoryStore& store,
          bool hosts_store, int nnodes)
      : JobRendezvous(io, clock, std::move(run_id), connections_to(store),
                      std::make_shared<spdlog::logger>(
                          "test", std::make_shared<spdlog::sinks::null_sink_mt>())),
        hosts_store_(hosts_store),
        protocol_(nnodes, 5s) {}
  ~TestJob() override { stop_bridge(); }

  HostPort worker_store(const RankAssignment&) const override { return {"127.0.0.1", 1}; }
  void join(int after_round, NodeInfo self,
            std::function<void(std::exception_ptr, RankAssignment)> done) override {
    join_through(&protocol_, nullptr, after_round, std::move(self), std::move(done));
  }
  bool hosts_store() const override { return hosts_store_; }
  void move_to(MemoryStore& store) { move_store(connections_to(store)); }

 private:
  bool hosts_store_;
  StaticProtocol protocol_;
};

// What a Done callback was given, once it ran.
struct Result {
  bool done = false;
  std::exception_ptr error;
  JobRendezvous::Done callback() {
    return [this](std::exception_ptr err) {
      done = true;
      error = err;
    };
  }
};

class JobRendezvousTest : public ::testing::Test {
 protected:
  // Runs the loop until `done` holds; false after 10 s of real time.
  bool run_until(const std::function<bool()>& done) { return testing::run_until(io_, done); }

  std::unique_ptr<TestJob> make(std::string run_id = "run1", bool hosts_store = false,
                                int nnodes = 1) {
    return std::make_unique<TestJob>(io_, *clock_, std::move(run_id), store_, hosts_store, nnodes);
  }

  // Runs `op` with a Done and waits for it; the error it ended with.
  std::exception_ptr finish(const std::function<void(JobRendezvous::Done)>& op) {
    Result r;
    op(r.callback());
    EXPECT_TRUE(run_until([&] { return r.done; }));
    return r.error;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<LoopClock> clock_ = make_asio_loop_clock(io_);
  // The stores outlive every job (a job's threads may wait on them until it is destroyed).
  MemoryStore store_{5s};
  MemoryStore moved_{5s};  // where a store moves
};

TEST_F(JobRendezvousTest, TheFirstFailureDecidesTheRoundAndReachesTheWatch) {
  auto job = make();
  std::optional<Outcome> seen;
  std::string watch_error;
  job->watch_outcome(
      0, [&](Outcome o) { seen = o; }, [&](std::string e) { watch_error = e; });
  WorkerFailure f = make_failure({1, 0, 3, "host1", 42}, 1, "exit code 1", 0);
  EXPECT_FALSE(finish([&](auto done) { job->publish_failure(0, 1, 2, {f}, done); }));
  ASSERT_TRUE(run_until([&] { return seen.has_value() || !watch_error.empty(); }));
  ASSERT_TRUE(seen) << watch_error;
  EXPECT_EQ(seen->kind, Outcome::kFailed);
  EXPECT_EQ(seen->node_rank, 1);
  EXPECT_EQ(seen->restarts, 3) << "a failure spends a restart";

  std::optional<std::vector<WorkerFailure>> collected;
  job->collect_failures(0, 2, [&](std::exception_ptr err, std::vector<WorkerFailure> got) {
    EXPECT_FALSE(err);
    collected = got;
  });
  ASSERT_TRUE(run_until([&] { return collected.has_value(); }));
  ASSERT_EQ(collected->size(), 1u);
  EXPECT_EQ((*collected)[0].global_rank, 3);
  EXPECT_EQ((*collected)[0].reason, "exit code 1");
}

TEST_F(JobRendezvousTest, AMalformedOutcomeIsAnErrorNamingItsKeyNotACrash) {
  auto job = make();
  std::optional<Outcome> seen;
  std::string watch_error;
  job->watch_outcome(
      4, [&](Outcome o) { seen = o; }, [&](std::string e) { watch_error = e; });
  const std::string key = keys::run_prefix("run1") + "/" + keys::outcome(4);
  store_.set(key, "not an outcome");
  ASSERT_TRUE(run_until([&] { return seen.has_value() || !watch_error.empty(); }));
  EXPECT_FALSE(seen);
  EXPECT_NE(watch_error.find("malformed outcome for round 4"), std::string::npos) << watch_error;
  EXPECT_NE(watch_error.find(key + " = 'not an outcome'"), std::string::npos) << watch_error;
  EXPECT_NE(watch_error.find("cannot go on"), std::string::npos) << watch_error;
}

TEST_F(JobRendezvousTest, AnAbortNamesTheNodeAndKeepsTheRestartsSpentSoFar) {
  auto job = make();
  EXPECT_FALSE(finish([&](auto done) { job->publish_failure(0, 0, 1, {}, done); }));
  std::optional<Outcome> seen;
  job->watch_outcome(
      1, [&](Outcome o) { seen = o; }, [](std::string) {});
  EXPECT_FALSE(finish([&](auto done) { job->publish_abort(1, 2, "SIGTERM received", done); }));
  ASSERT_TRUE(run_until([&] { return seen.has_value(); }));
  EXPECT_EQ(seen->kind, Outcome::kAborted);
  EXPECT_EQ(seen->detail, "SIGTERM received on node 2");
  EXPECT_EQ(seen->restarts, 2) << "round 0's failure spent one; an abort spends none";
  EXPECT_GT(seen->decided_at, 0);
}

TEST_F(JobRendezvousTest, NodeZeroGetsEveryStatusRecordPublishedSoFar) {
  auto node0 = make(), node2 = make();
  std::optional<std::vector<std::string>> got2, got0;
  node2->publish_status(2, 3, "record of 2", [&](std::exception_ptr err, auto records) {
    EXPECT_FALSE(err);
    got2 = records;
  });
  ASSERT_TRUE(run_until([&] { return got2.has_value(); }));
  EXPECT_TRUE(got2->empty()) << "only node rank 0 reads the others' records";
  node0->publish_status(0, 3, "record of 0", [&](std::exception_ptr err, auto records) {
    EXPECT_FALSE(err);
    got0 = records;
  });
  ASSERT_TRUE(run_until([&] { return got0.has_value(); }));
  EXPECT_EQ(*got0, (std::vector<std::string>{"record of 0", "record of 2"}));
}

TEST_F(JobRendezvousTest, TheHostingNodeLeavesTheExitBarrierOnlyOnceTheOthersCountOut) {
  auto host = make("run1", /*hosts_store=*/true), other = make();
  Result host_out;
  host->exit_barrier(0, 2, 5s, host_out.callback());
  // It has counted itself out, and waits: a while of the loop later it has not left.
  const std::string count = keys::run_prefix("run1") + "/" + keys::exit_count(0);
  ASSERT_TRUE(run_until([&] { return store_.check(std::vector<std::string>{count}); }));
  io_.run_for(20ms);
  EXPECT_FALSE(host_out.done) << "the hosting node left before the other counted out";
  EXPECT_FALSE(finish([&](auto done) { other->exit_barrier(0, 2, 5s, done); }))
      << "a node that hosts nothing counts out and leaves";
  ASSERT_TRUE(run_until([&] { return host_out.done; }));
  EXPECT_FALSE(host_out.error) << describe(host_out.error);
}

TEST_F(JobRendezvousTest, AnExitBarrierNobodyElseReachesEndsAtItsTimeoutWithAnError) {
  auto host = make("run1", /*hosts_store=*/true);
  const auto start = std::chrono::steady_clock::now();
  const auto err = finish([&](auto done) { host->exit_barrier(0, 2, 100ms, done); });
  ASSERT_TRUE(err) << "the barrier opened with one node of two";
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  EXPECT_NE(describe(err).find("timed out"), std::string::npos) << describe(err);
}

TEST_F(JobRendezvousTest, ANodeWaitingInTheLobbySeesOtherRunsNotItsOwn) {
  auto a = make("run-a"), b = make("run-b"), a2 = make("run-a");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto announce = [&](JobRendezvous& job, const std::string& run, const std::string& node) {
    std::optional<std::vector<lobby::Waiting>> others;
    lobby::Waiting self;
    self.run_id = run;
    self.node = node;
    self.host = "host-" + node;
    self.entry = "train.py";
    self.nnodes = "2";
    self.since = now;
    self.at = now;
    job.announce_waiting(self, [&](std::exception_ptr err, std::vector<lobby::Waiting> got) {
      EXPECT_FALSE(err) << describe(err);
      others = got;
    });
    EXPECT_TRUE(run_until([&] { return others.has_value(); }));
    return others.value_or(std::vector<lobby::Waiting>{});
  };
  EXPECT_TRUE(announce(*a, "run-a", "n1").empty());
  const auto seen_by_b = announce(*b, "run-b", "n2");
  ASSERT_EQ(seen_by_b.size(), 1u);
  EXPECT_EQ(seen_by_b[0].run_id, "run-a");
  EXPECT_EQ(seen_by_b[0].host, "host-n1");
  const auto seen_by_a2 = announce(*a2, "run-a", "n3");
  ASSERT_EQ(seen_by_a2.size(), 1u);
  EXPECT_EQ(seen_by_a2[0].run_id, "run-b");
}

TEST_F(JobRendezvousTest, WhenTheStoreMovesTheWatchFollowsAndTheOldStoresErrorsAreNotReported) {
  auto host = make("run1", /*hosts_store=*/true);
  std::optional<Outcome> seen;
  host->watch_outcome(
      0, [&](Outcome o) { seen = o; }, [](std::string) {});
  // A call blocked on the old store (the barrier waits for a node that will not come there).
  Result barrier;
  host->exit_barrier(0, 2, 5s, barrier.callback());
  const std::string count = keys::run_prefix("run1") + "/" + keys::exit_count(0);
  ASSERT_TRUE(run_until([&] { return store_.check(std::vector<std::string>{count}); }));
  // Calls queued behind it when the store moves: never sent, but their callbacks run, so that
  // nothing waits for them for good. The round's own operation is moot (the move ends the round):
  // no error; a call whose result matters hears that it was not made.
  Result running;
  host->publish_running(0, 0, 1.0, running.callback());
  bool collected = false;
  std::exception_ptr collect_error;
  host->collect_failures(0, 1, [&](std::exception_ptr err, std::vector<WorkerFailure>) {
    collected = true;
    collect_error = err;
  });
  host->move_to(moved_);
  ASSERT_TRUE(run_until([&] { return barrier.done; })) << "the old store's call was not given up";
  EXPECT_FALSE(barrier.error) << "an error of the replaced store was reported: "
                              << describe(barrier.error);
  ASSERT_TRUE(run_until([&] { return running.done && collected; }))
      << "a call queued on the old store never called back";
  EXPECT_FALSE(running.error) << describe(running.error);
  EXPECT_NE(describe(collect_error).find("the rendezvous store moved"), std::string::npos)
      << describe(collect_error);
  // The round's outcome is decided on the new store; the watch, moved with it, delivers it.
  auto other = std::make_unique<TestJob>(io_, *clock_, "run1", moved_, false, 1);
  EXPECT_FALSE(finish([&](auto done) { other->publish_failure(0, 1, 0, {}, done); }));
  ASSERT_TRUE(run_until([&] { return seen.has_value(); }));
  EXPECT_EQ(seen->kind, Outcome::kFailed);
  EXPECT_EQ(seen->node_rank, 1);
}

}  // namespace
}  // namespace cohort::launch

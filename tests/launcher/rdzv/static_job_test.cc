// StaticJob, torchrun's static rendezvous, over real stores on 127.0.0.1: node 0 of a one-node job
// hosts the master store (on a free port when asked for port 0) and each round's workers' store;
// another node dials the master address; what cannot work (a port in use, a master address that
// does not resolve, a node that never comes) is an error naming it, within the join timeout.
#include "rdzv/static_job.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <optional>

#include "cohort/base/printable.h"
#include "cohort/error.h"
#include "cohort/rdzv/tcp_store.h"
#include "common/loop_until.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

// `connect_timeout` short where the port is meant to be closed (loopback refuses at once, and
// the client retries until then).
std::unique_ptr<TcpStore> dial(const HostPort& where,
                               std::chrono::milliseconds connect_timeout = 2s) {
  TcpStoreOptions o;
  o.host = where.host;
  o.port = where.port;
  o.timeout = 5s;
  o.connect_timeout = connect_timeout;
  return std::make_unique<TcpStore>(o);
}

struct Joined {
  std::exception_ptr error;
  RankAssignment assignment;
};

class StaticJobTest : public ::testing::Test {
 protected:
  // Runs the loop until `done` holds; false after 10 s of real time.
  bool run_until(const std::function<bool()>& done) { return testing::run_until(io_, done); }

  std::unique_ptr<StaticJob> make(StaticJobSettings s) {
    return std::make_unique<StaticJob>(io_, *clock_, "run1", std::move(s), quiet());
  }

  // Starts a join; the result lands in the returned slot once the loop has run.
  std::shared_ptr<std::optional<Joined>> start_join(StaticJob& job, int after_round,
                                                    int node_rank) {
    auto slot = std::make_shared<std::optional<Joined>>();
    NodeInfo self;
    self.id = "host" + std::to_string(node_rank);
    self.host = self.id;
    self.node_rank = node_rank;
    job.join(after_round, self, [slot](std::exception_ptr err, RankAssignment a) {
      *slot = Joined{err, a};
    });
    return slot;
  }

  Joined join(StaticJob& job, int after_round, int node_rank) {
    auto slot = start_join(job, after_round, node_rank);
    EXPECT_TRUE(run_until([&] { return slot->has_value(); })) << "the join never ended";
    return slot->value_or(Joined{});
  }

  void publish_failure(StaticJob& job, int round) {
    bool done = false;
    job.publish_failure(round, 0, 0, {}, [&](std::exception_ptr err) {
      EXPECT_FALSE(err);
      done = true;
    });
    ASSERT_TRUE(run_until([&] { return done; }));
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<LoopClock> clock_ = make_asio_loop_clock(io_);
};

TEST_F(StaticJobTest, AOneNodeJobHostsOnAFreePortAndEachRoundsWorkersGetAStoreOfTheirOwn) {
  StaticJobSettings s;
  s.master_port = 0;
  s.timeout = 5s;
  auto job = make(s);
  EXPECT_FALSE(job->hosts_store()) << "no other node waits on a one-node job's store";

  const Joined r0 = join(*job, -1, 0);
  ASSERT_FALSE(r0.error) << describe(r0.error);
  EXPECT_EQ(r0.assignment.round, 0);
  EXPECT_EQ(r0.assignment.world_size, 1);
  const HostPort store0 = job->worker_store(r0.assignment);
  EXPECT_EQ(store0.host, "127.0.0.1");
  ASSERT_NE(store0.port, 0);
  dial(store0)->set("k", "round 0");

  publish_failure(*job, 0);
  const Joined r1 = join(*job, 0, 0);
  ASSERT_FALSE(r1.error) << describe(r1.error);
  EXPECT_EQ(r1.assignment.round, 1);
  EXPECT_EQ(r1.assignment.restart_count, 1);
  const HostPort store1 = job->worker_store(r1.assignment);
  ASSERT_NE(store1.port, store0.port) << "a new round's workers never meet the last one's keys";
  auto workers1 = dial(store1);
  EXPECT_FALSE(workers1->check(std::vector<std::string>{"k"}));
  // Round 0's store is closed once round 1 has formed: its workers have stopped.
  EXPECT_ANY_THROW(dial(store0, 50ms)->get("k"));
}

TEST_F(StaticJobTest, AMasterPortInUseIsAnErrorNamingIt) {
  auto taken = host_store("127.0.0.1", 0, {});
  StaticJobSettings s;
  s.master_port = taken->port();
  try {
    make(s);
    FAIL() << "node 0 hosted on a port already in use";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(taken->port())), std::string::npos)
        << e.what();
  }
}

TEST_F(StaticJobTest, TwoNodesMeetOnTheMasterStoreAndAgreeOnTheirRanks) {
  // The master store on 127.0.0.1 (a two-node job's node 0 would listen on every interface):
  // node 0 reaches it through the override, node 1 dials the master address as in a real job.
  auto master = host_store("127.0.0.1", 0, {});
  const HostPort at{"127.0.0.1", master->port()};
  StaticJobSettings s0;
  s0.nnodes = 2;
  s0.node_rank = 0;
  s0.timeout = 5s;
  s0.store_override = [at](const std::atomic<bool>*) -> std::unique_ptr<Store> { return dial(at); };
  StaticJobSettings s1;
  s1.nnodes = 2;
  s1.node_rank = 1;
  s1.master_addr = "127.0.0.1";
  s1.master_port = master->port();
  s1.timeout = 5s;
  auto node0 = make(s0);
  auto node1 = make(s1);
  EXPECT_FALSE(node1->hosts_store());

  auto j0 = start_join(*node0, -1, 0);
  auto j1 = start_join(*node1, -1, 1);
  ASSERT_TRUE(run_until([&] { return j0->has_value() && j1->has_value(); }));
  ASSERT_FALSE((*j0)->error) << describe((*j0)->error);
  ASSERT_FALSE((*j1)->error) << describe((*j1)->error);
  const RankAssignment& a0 = (*j0)->assignment;
  const RankAssignment& a1 = (*j1)->assignment;
  EXPECT_EQ(a0.node_rank, 0);
  EXPECT_EQ(a1.node_rank, 1);
  EXPECT_EQ(a0.world_size, 2);
  EXPECT_EQ(a1.world_size, 2);
  EXPECT_EQ(a1.base_rank, 1);
  ASSERT_EQ(a1.nodes.size(), 2u);
  EXPECT_EQ(a1.nodes[0].host, "host0");
  // Node 0 hosts no round store here, so the workers share the master store.
  const HostPort workers = node1->worker_store(a1);
  EXPECT_EQ(workers.host, "127.0.0.1");
  EXPECT_EQ(workers.port, master->port());
}

TEST_F(StaticJobTest, ANodeWhoseMasterAddressDoesNotResolveFailsItsJoinNamingTheFlag) {
  StaticJobSettings s;
  s.nnodes = 2;
  s.node_rank = 1;
  s.master_addr = "no-such-host.invalid";
  s.master_port = 29500;
  s.timeout = 5s;
  auto job = make(s);
  const auto start = std::chrono::steady_clock::now();
  const Joined j = join(*job, -1, 1);
  ASSERT_TRUE(j.error);
  const std::string what = describe(j.error);
  EXPECT_NE(what.find("no-such-host.invalid:29500"), std::string::npos) << what;
  EXPECT_NE(what.find("--master-addr"), std::string::npos) << what;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s) << "it waited for the join timeout";
}

TEST_F(StaticJobTest, ANodeThatNeverComesEndsTheJoinAtTheTimeoutWithATimeoutError) {
  auto master = host_store("127.0.0.1", 0, {});
  StaticJobSettings s;
  s.nnodes = 2;
  s.node_rank = 1;
  s.master_addr = "127.0.0.1";
  s.master_port = master->port();
  s.timeout = 100ms;
  auto job = make(s);
  const auto start = std::chrono::steady_clock::now();
  const Joined j = join(*job, -1, 1);
  ASSERT_TRUE(j.error) << "node 1 formed a round without node 0";
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  try {
    std::rethrow_exception(j.error);
  } catch (const TimeoutError& e) {
    // Which node is missing, and the timeout as given (not rounded down to "0 s").
    EXPECT_EQ(std::string(e.what()),
              "rendezvous timed out after 0.1 s: node rank(s) 0 of 2 did not join");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a TimeoutError: " << e.what();
  }
}

}  // namespace
}  // namespace cohort::launch

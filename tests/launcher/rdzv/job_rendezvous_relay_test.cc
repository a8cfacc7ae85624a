// JobRendezvous with round stores and relays (a one-node StaticJob hosting real stores on
// 127.0.0.1): a round's relay forwards to that round's own workers' store, never the agents' store
// or an earlier round's, and every store and relay port of the job is claimed job-wide, so that no
// round listens where an earlier round's workers may still dial.
#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <optional>
#include <set>

#include "../../common/free_port.h"
#include "cohort/rdzv/tcp_store.h"
#include "common/loop_until.h"
#include "rdzv/round_ops.h"
#include "rdzv/static_job.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<TcpStore> dial(const HostPort& where) {
  TcpStoreOptions o;
  o.host = where.host;
  o.port = where.port;
  o.timeout = 5s;
  // Short: the test dials closed ports on purpose (a loopback listener answers at once).
  o.connect_timeout = 300ms;
  return std::make_unique<TcpStore>(o);
}

class JobRendezvousRelayTest : public ::testing::Test {
 protected:
  JobRendezvousRelayTest() : master_port_(testing::free_port()) {
    StaticJobSettings s;
    s.nnodes = 1;
    s.node_rank = 0;
    s.master_addr = "127.0.0.1";
    s.master_port = master_port_;
    s.timeout = 10s;
    job_ = std::make_unique<StaticJob>(
        io_, *clock_, "run1", s,
        std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>()));
  }

  // Runs the loop until `done` holds; false after 10 s of real time.
  bool run_until(const std::function<bool()>& done) { return testing::run_until(io_, done); }

  RankAssignment join(int after_round) {
    NodeInfo self;
    self.id = "host0:1:x";
    self.host = "host0";
    std::optional<RankAssignment> a;
    job_->join(after_round, self, [&](std::exception_ptr err, RankAssignment got) {
      EXPECT_FALSE(err);
      a = got;
    });
    EXPECT_TRUE(run_until([&] { return a.has_value(); }));
    return a.value_or(RankAssignment{});
  }

  HostPort open_relay(const RankAssignment& a) {
    bool done = false;
    std::optional<HostPort> relay;
    std::string why_not;
    job_->open_relay(a, [&](std::optional<HostPort> r, std::string why) {
      relay = r;
      why_not = why;
      done = true;
    });
    EXPECT_TRUE(run_until([&] { return done; }));
    EXPECT_TRUE(relay) << why_not;
    return relay.value_or(HostPort{});
  }

  // True when `port` is claimed in the agents' store: no later round may take it.
  bool claimed(int port) {
    auto master = dial({"127.0.0.1", master_port_});
    return master->check(
        std::vector<std::string>{keys::run_prefix("run1") + "/" + keys::worker_port(port)});
  }

  const int master_port_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  std::unique_ptr<LoopClock> clock_ = make_asio_loop_clock(io_);
  std::unique_ptr<StaticJob> job_;
};

TEST_F(JobRendezvousRelayTest, EachRoundsRelayForwardsToThatRoundsStoreOnAPortNoEarlierRoundUsed) {
  const RankAssignment a0 = join(-1);
  const HostPort store0 = job_->worker_store(a0);
  ASSERT_NE(store0.port, master_port_) << "the workers never get the agents' store";
  const HostPort relay0 = open_relay(a0);
  EXPECT_TRUE(claimed(store0.port));
  EXPECT_TRUE(claimed(relay0.port));
  auto worker0 = dial(relay0);
  worker0->set("default_pg/0//cpu//0/1", "round 0's address");
  EXPECT_EQ(dial(store0)->get("default_pg/0//cpu//0/1"), "round 0's address");

  // Round 0 fails; round 1 forms with a store and a relay of its own.
  bool published = false;
  job_->publish_failure(0, 0, 0, {}, [&](std::exception_ptr err) {
    EXPECT_FALSE(err);
    published = true;
  });
  ASSERT_TRUE(run_until([&] { return published; }));
  const RankAssignment a1 = join(0);
  ASSERT_EQ(a1.round, 1);
  const HostPort store1 = job_->worker_store(a1);
  const HostPort relay1 = open_relay(a1);
  EXPECT_TRUE(claimed(store1.port));
  EXPECT_TRUE(claimed(relay1.port));
  EXPECT_EQ(
      std::set<int>({master_port_, store0.port, relay0.port, store1.port, relay1.port}).size(), 5u);
  EXPECT_EQ(job_->relay_of(1)->port, relay1.port);
  EXPECT_FALSE(job_->relay_of(0)) << "round 0's relay closed once round 1 formed";

  // Through round 1's relay the workers see round 1's store: empty, and what they write is there.
  auto worker1 = dial(relay1);
  EXPECT_FALSE(worker1->check(std::vector<std::string>{"default_pg/0//cpu//0/1"}));
  worker1->set("k", "round 1");
  EXPECT_EQ(dial(store1)->get("k"), "round 1");
  // Round 0's worker reaches nothing now: its relay and its store are closed.
  EXPECT_THROW(worker0->get("default_pg/0//cpu//0/1"), StoreError);
  EXPECT_THROW(dial(relay0), StoreError);
}

}  // namespace
}  // namespace cohort::launch

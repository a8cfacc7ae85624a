// ElasticJob over an in-process MemoryStore on the manual clock: endpoints that cannot work are
// refused before anything starts, with what to do; a node whose keep-alives stop is reported lost
// (the round ends as failed, naming it and its first rank) no sooner than the liveness timeout;
// a node cut off from the store keeps its workers for the grace, then is told why it must stop.
#include "rdzv/elastic_job.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <optional>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

std::shared_ptr<spdlog::logger> quiet() {
  return std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::null_sink_mt>());
}

class ElasticJobTest : public ::testing::Test {
 protected:
  ElasticJobSettings settings() {
    ElasticJobSettings s;
    s.min_nodes = 1;
    s.max_nodes = 2;
    s.endpoint = "127.0.0.1:29400";
    s.local_addr = "127.0.0.1";  // every node on this machine
    s.conf.keep_alive_interval = 1s;
    s.conf.keep_alive_max_attempt = 3;  // lost after 3 s
    s.store_loss_grace = 10s;
    s.store_override = [this](const std::atomic<bool>* abandon) { return store_.connect(abandon); };
    return s;
  }

  std::unique_ptr<ElasticJob> make(ElasticJobSettings s) {
    return std::make_unique<ElasticJob>(io_, clock_, "run1", std::move(s), quiet());
  }

  // The UsageError `s` is refused with (fails the test when it is accepted).
  std::string refusal(ElasticJobSettings s) {
    try {
      make(std::move(s));
    } catch (const UsageError& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted";
    return "";
  }

  // Moves the clock a second at a time, letting the loop and the store threads run between
  // steps, until `done` holds; the simulated time it took, or nullopt when `limit` passed or ten
  // seconds of real time did.
  std::optional<std::chrono::milliseconds> advance_until(const std::function<bool()>& done,
                                                         std::chrono::milliseconds limit) {
    const auto real_deadline = std::chrono::steady_clock::now() + 10s;
    std::chrono::milliseconds elapsed{0};
    while (!done()) {
      if (elapsed > limit || std::chrono::steady_clock::now() > real_deadline) return std::nullopt;
      clock_.advance(1s);
      elapsed += 1s;
      io_.run_for(5ms);
    }
    return elapsed;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  ManualLoopClock clock_{io_};
  MemoryStore store_{5s, clock_.manual()};
};

TEST_F(ElasticJobTest, AnEndpointThatCannotWorkIsRefusedSayingWhatToDo) {
  auto s = settings();
  s.endpoint = "";
  EXPECT_NE(refusal(s).find("needs --rdzv-endpoint host:port"), std::string::npos);

  s = settings();
  s.endpoint = "127.0.0.1:0";
  EXPECT_NE(refusal(s).find("port 0 (a free port) works only for a one-node job"),
            std::string::npos);

  s = settings();
  s.local_addr = "";  // a loopback endpoint, other machines' nodes allowed
  const std::string loopback = refusal(s);
  EXPECT_NE(loopback.find("is a loopback address, but --nnodes 1:2"), std::string::npos)
      << loopback;
  EXPECT_NE(loopback.find("--local-addr 127.0.0.1"), std::string::npos) << loopback;

  s = settings();
  s.endpoint = "10.11.12.13:29400";  // other machines reach it; this node would advertise loopback
  const std::string advertised = refusal(s);
  EXPECT_NE(advertised.find("would advertise 127.0.0.1"), std::string::npos) << advertised;
  EXPECT_NE(advertised.find("10.11.12.13:29400"), std::string::npos) << advertised;
}

TEST_F(ElasticJobTest, AOneNodeJobMayUseALoopbackEndpointAndItsNodeIdNamesItsAddress) {
  auto s = settings();
  s.max_nodes = 1;
  s.local_addr = "";
  auto job = make(s);
  EXPECT_EQ(job->node_id().rfind("127.0.0.1:", 0), 0u) << job->node_id();
  EXPECT_FALSE(job->hosts_store());
  EXPECT_EQ(job->store_process(), -1);
}

TEST_F(ElasticJobTest, ANodeWhoseKeepAlivesStopIsLostNoSoonerThanTheLivenessTimeout) {
  auto a = make(settings()), b = make(settings());
  RankAssignment round;
  round.round = 0;
  round.nnodes = 2;
  round.world_size = 3;
  NodeInfo na, nb;
  na.id = a->node_id();
  na.host = "host-a";
  na.nproc = 1;
  nb.id = b->node_id();
  nb.node_rank = 1;
  nb.host = "host-b";
  nb.pid = 4242;
  nb.nproc = 2;
  round.nodes = {na, nb};
  RankAssignment for_b = round;
  for_b.node_rank = 1;

  std::optional<Outcome> outcome;
  a->watch_outcome(
      0, [&](Outcome o) { outcome = o; }, [](std::string) {});
  std::string a_lost_store, b_lost_store;
  a->start_keep_alive(round, [&](std::string why) { a_lost_store = why; });
  b->start_keep_alive(for_b, [&](std::string why) { b_lost_store = why; });
  // Both beat: nobody is lost, however long it runs.
  EXPECT_FALSE(advance_until([&] { return outcome.has_value(); }, 10s));

  b->stop_keep_alive();  // b's machine is gone
  const auto took = advance_until([&] { return outcome.has_value(); }, 20s);
  ASSERT_TRUE(took) << "b was never reported lost";
  EXPECT_GE(*took, 3s) << "lost before the liveness timeout";
  EXPECT_EQ(outcome->kind, Outcome::kFailed);
  EXPECT_EQ(outcome->restarts, 1);
  EXPECT_EQ(outcome->detail, "node " + b->node_id() + " lost: no keep-alive for 3 s");
  ASSERT_TRUE(outcome->first_failure);
  EXPECT_EQ(outcome->first_failure->node_rank, 1);
  EXPECT_EQ(outcome->first_failure->global_rank, 1) << "b's first rank follows a's one worker";
  EXPECT_EQ(outcome->first_failure->host, "host-b");
  EXPECT_EQ(outcome->first_failure->pid, 4242);
  EXPECT_EQ(a_lost_store, "") << "a reached the store all along";
  a->stop_keep_alive();
}

TEST_F(ElasticJobTest, ANodeCutOffFromTheStoreIsToldToStopOnlyAfterTheGrace) {
  auto s = settings();
  s.store_override = [](const std::atomic<bool>*) -> std::unique_ptr<Store> {
    throw StoreError("connection refused", "", "127.0.0.1:29400");
  };
  auto job = make(s);
  RankAssignment round;
  NodeInfo self;
  self.id = job->node_id();
  round.nodes = {self};
  std::string why;
  job->start_keep_alive(round, [&](std::string w) { why = w; });
  const auto took = advance_until([&] { return !why.empty(); }, 30s);
  ASSERT_TRUE(took) << "a node cut off from the store kept its workers forever";
  EXPECT_GT(*took, 10s) << "stopped before --store-loss-grace";
  EXPECT_LE(*took, 12s);
  EXPECT_NE(why.find("has not reached the rendezvous store for"), std::string::npos) << why;
  EXPECT_NE(why.find("(--store-loss-grace 10 s)"), std::string::npos) << why;
}

}  // namespace
}  // namespace cohort::launch

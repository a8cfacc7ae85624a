// JoinNotices on the manual clock, over a rendezvous whose store is an in-process MemoryStore:
// the line every 10 s while a join waits (how long, how much is left, whom it waits for), the
// node's record in the store's lobby while an elastic join waits, and silence once it ends.
#include "agent/join_notices.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <sstream>

#include "cohort/rdzv/memory_store.h"
#include "rdzv/static_job.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class JoinNoticesTest : public ::testing::Test {
 protected:
  JoinNoticesTest() {
    log_->set_pattern("%v");
    StaticJobSettings s;
    s.store_override = [this](const std::atomic<bool>* abandon) { return store_.connect(abandon); };
    rdzv_ = std::make_unique<StaticJob>(io_, clock_, "run1", s, log_);
    plan_.run_id = "run1";
    plan_.host = "node-a";
    plan_.command.title = "train.py";
  }

  // Moves the clock and runs what falls due.
  void advance(std::chrono::milliseconds d) {
    clock_.advance(d);
    io_.poll();
  }

  std::string said() const { return out_.str(); }

  std::vector<std::string> lobby_lines() {
    const std::vector<std::string> key{keys::lobby()};
    if (!store_.check(key)) return {};
    std::vector<std::string> lines;
    std::istringstream in(store_.get(key[0]));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) lines.push_back(line);
    return lines;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  ManualLoopClock clock_{io_};
  MemoryStore store_{5s};
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> log_ = std::make_shared<spdlog::logger>(
      "test", std::make_shared<spdlog::sinks::ostream_sink_st>(out_));
  std::unique_ptr<StaticJob> rdzv_;
  JobPlan plan_;
};

TEST_F(JoinNoticesTest, AStaticJoinSaysEveryTenSecondsHowLongItWaitedAndForWhom) {
  plan_.config.max_nodes = 2;
  plan_.config.node_rank = 1;
  plan_.config.master_addr = "10.0.0.1";
  plan_.config.master_port = 29500;
  plan_.config.rdzv_timeout = 900s;
  JoinNotices notices(clock_, plan_, log_);
  notices.start(*rdzv_);
  advance(9s);
  EXPECT_EQ(said(), "");
  advance(1s);
  EXPECT_EQ(said(),
            "still waiting for the rendezvous after 10 s (890 s left): 2 node(s) expected, the "
            "store at 10.0.0.1:29500\n");
  advance(10s);
  EXPECT_NE(said().find("after 20 s (880 s left)"), std::string::npos) << said();
  out_.str("");
  notices.stop();
  advance(30s);
  EXPECT_EQ(said(), "") << "a join that ended is not waited for";
  EXPECT_TRUE(lobby_lines().empty()) << "a static job has no lobby";
}

TEST_F(JoinNoticesTest, NodeZeroOfAStaticJobWaitsAtItsOwnStore) {
  plan_.config.max_nodes = 3;
  plan_.config.rdzv_timeout = 5s;
  JoinNotices notices(clock_, plan_, log_);
  notices.start(*rdzv_);
  advance(10s);
  EXPECT_EQ(said(),
            "still waiting for the rendezvous after 10 s (0 s left): 3 node(s) expected, the "
            "store at this node\n");
  notices.stop();
}

TEST_F(JoinNoticesTest, AnElasticJoinWaitsInTheLobbyUntilItEnds) {
  plan_.config.rdzv_backend = RdzvBackend::kC10d;
  plan_.config.rdzv_endpoint = "store-host:29400";
  plan_.config.min_nodes = 2;
  plan_.config.max_nodes = 4;
  plan_.rdzv_conf.join_timeout = 600s;
  JoinNotices notices(clock_, plan_, log_);
  notices.start(*rdzv_);
  // The lobby's record is written off the loop (the rendezvous's store thread).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (lobby_lines().empty() && std::chrono::steady_clock::now() < deadline) io_.run_for(2ms);
  ASSERT_EQ(lobby_lines().size(), 1u);
  const std::string record = lobby_lines()[0];
  EXPECT_NE(record.find("run1"), std::string::npos) << record;
  EXPECT_NE(record.find("train.py"), std::string::npos) << record;
  EXPECT_NE(record.find("2:4"), std::string::npos) << record;

  advance(10s);
  EXPECT_NE(said().find("after 10 s (590 s left): 2 to 4 node(s) expected, the store at "
                        "store-host:29400"),
            std::string::npos)
      << said();
  notices.stop();
  out_.str("");
  io_.run_for(20ms);  // what the store thread still posts
  const size_t lines = lobby_lines().size();
  advance(30s);
  io_.run_for(20ms);
  EXPECT_EQ(lobby_lines().size(), lines) << "a join that ended still announced itself";
  EXPECT_EQ(said(), "");
}

}  // namespace
}  // namespace cohort::launch

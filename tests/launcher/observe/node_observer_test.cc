// NodeObserver's metrics text, read from the agent's view and a WorkerGroup on the agent tests'
// fake spawner (no process is started): the node's own series, its workers by state and what each
// reported, and the straggler series on node rank 0 only. (observe_job.py scrapes a real job.)
#include "observe/node_observer.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/null_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <functional>

#include "../workers/fake_spawner.h"
#include "cohort/base/version.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;
using testing::FakeSpawner;

bool has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

class NodeObserverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GroupSpec g;
    g.node_rank = 1;
    g.base_rank = 2;
    g.host = "n2";
    for (int lr = 0; lr < 2; ++lr) {
      WorkerSpec w;
      w.local_rank = lr;
      w.request.argv = {"worker"};
      g.workers.push_back(w);
    }
    WorkerGroupEvents events;
    events.exited = [this](int, std::optional<WorkerFailure>) { ++exits_; };
    group_ =
        std::make_unique<WorkerGroup>(io_, clock_, spawner_, error_files_, g, std::move(events));
    group_->start();
    view_.phase = "running";
    view_.running = true;
    view_.round = 3;
    view_.restarts = 1;
    view_.max_restarts = 4;
    view_.node_rank = 1;
    view_.nnodes = 2;
    view_.base_rank = 2;
    view_.group = group_.get();
  }
  void TearDown() override { group_.reset(); }

  std::unique_ptr<NodeObserver> observer() {
    NodeObserverOptions o;
    o.run_id = "job-9";
    o.host = "n2";
    return std::make_unique<NodeObserver>(
        io_, clock_, o, nullptr,
        std::make_shared<spdlog::logger>("observer",
                                         std::make_shared<spdlog::sinks::null_sink_mt>()),
        [this] { return view_; });
  }
  bool run_until(const std::function<bool()>& done) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      io_.restart();
      io_.run_for(2ms);
    }
    return true;
  }

  asio::io_context io_;
  ManualLoopClock clock_{io_};
  FakeSpawner spawner_;
  ErrorFileReader error_files_{io_, clock_, std::chrono::seconds(2)};
  std::unique_ptr<WorkerGroup> group_;
  AgentView view_;
  int exits_ = 0;
};

TEST_F(NodeObserverTest, TheNodesOwnSeries) {
  const std::string m = observer()->metrics_text();
  EXPECT_TRUE(has(m, "cohortrun_info{run_id=\"job-9\",host=\"n2\",node_rank=\"1\",version=\"" +
                         std::string(cohort::version()) + "\"} 1\n"))
      << m;
  EXPECT_TRUE(has(m, "\ncohortrun_state{state=\"running\"} 1\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_round 3\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_nodes 2\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_restarts 1\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_restarts_max 4\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_workers{state=\"running\"} 2\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_workers{state=\"failed\"} 0\n")) << m;
  // Nothing reported: no worker series at all, and node rank 1 does not judge stragglers.
  EXPECT_FALSE(has(m, "cohortrun_worker_step")) << m;
  EXPECT_FALSE(has(m, "cohortrun_worker_heartbeat_age_seconds")) << m;
  EXPECT_FALSE(has(m, "straggler")) << m;
}

TEST_F(NodeObserverTest, WhatEachWorkerReportedIsASeriesOfItsRank) {
  auto obs = observer();
  const std::string report = heartbeat_pipe::encode_step_report(
      {.step = 12, .step_s = 0.5, .items_per_s = 64, .comm_s = 0.125});
  ASSERT_EQ(::write(spawner_.proc(0).hb_w, report.data(), report.size()),
            static_cast<ssize_t>(report.size()));
  ASSERT_TRUE(run_until([&] { return group_->readings()[0].last_step.has_value(); }));
  spawner_.exit_with(1, 3);
  ASSERT_TRUE(run_until([&] { return exits_ == 1; }));
  const std::string m = obs->metrics_text();
  EXPECT_TRUE(has(m, "\ncohortrun_worker_step{rank=\"2\",local_rank=\"0\"} 12\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_worker_step_seconds{rank=\"2\",local_rank=\"0\"} 0.5\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_worker_items_per_second{rank=\"2\",local_rank=\"0\"} 64\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_worker_comm_share{rank=\"2\",local_rank=\"0\"} 0.25\n")) << m;
  EXPECT_TRUE(has(m, "cohortrun_worker_heartbeat_age_seconds{rank=\"2\",local_rank=\"0\"} ")) << m;
  EXPECT_FALSE(has(m, "{rank=\"3\",local_rank=\"1\"}")) << m;  // reported nothing
  EXPECT_TRUE(has(m, "\ncohortrun_workers{state=\"running\"} 1\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_workers{state=\"failed\"} 1\n")) << m;
}

TEST_F(NodeObserverTest, NodeRankZeroServesTheStragglerSeries) {
  view_.node_rank = 0;
  auto obs = observer();
  clock_.advance(1s);  // a tick without a store: nothing is published, nothing breaks
  io_.restart();
  io_.poll();
  const std::string m = obs->metrics_text();
  EXPECT_TRUE(has(m, "# TYPE cohortrun_straggler_ratio gauge\n")) << m;
  EXPECT_TRUE(has(m, "\ncohortrun_stragglers 0\n")) << m;
}

}  // namespace
}  // namespace cohort::launch

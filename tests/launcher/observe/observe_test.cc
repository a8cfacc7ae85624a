// The pure parts of a running job's observation: the straggler check and the status record
// (tests/launcher/observe/observe_job.py runs them in real jobs; the heartbeat pipe's reports are
// tested with their contract, tests/base/heartbeat_line_test.cc).
#include <gtest/gtest.h>

#include "cohort/error.h"
#include "observe/node_status.h"
#include "observe/straggler_check.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST(StragglerCheck, ASlowRankIsNamedOnlyAfterTheWindowAndClearedWhenItRecovers) {
  StragglerCheck c(1.5, 2000ms);
  const auto t0 = StragglerCheck::Clock::time_point{} + 1h;
  const std::map<int, double> slow{{0, 0.02}, {1, 0.02}, {2, 0.06}, {3, 0.021}};
  EXPECT_TRUE(c.observe(t0, slow).empty());
  EXPECT_NEAR(c.ratios().at(2), 3.0, 0.01);
  EXPECT_TRUE(c.observe(t0 + 1000ms, slow).empty());
  auto f = c.observe(t0 + 2000ms, slow);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 2);
  EXPECT_TRUE(f[0].is_new);
  f = c.observe(t0 + 3000ms, slow);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_FALSE(f[0].is_new);  // named once
  // One observation below the factor clears it, and the window starts again.
  EXPECT_TRUE(c.observe(t0 + 4000ms, {{0, 0.02}, {1, 0.02}, {2, 0.025}, {3, 0.02}}).empty());
  EXPECT_TRUE(c.observe(t0 + 5000ms, slow).empty());
}

TEST(StragglerCheck, EvenRanksAndTwoRanksAndMissingReports) {
  StragglerCheck c(1.5, 0ms);
  const auto t = StragglerCheck::Clock::time_point{} + 1h;
  // Equal ranks, and noise under the factor: nobody.
  EXPECT_TRUE(c.observe(t, {{0, 0.02}, {1, 0.024}, {2, 0.021}, {3, 0.019}}).empty());
  // Two ranks: the other rank is the median.
  auto f = c.observe(t, {{0, 0.02}, {1, 0.05}});
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].rank, 1);
  // One rank with a report: nobody is judged.
  EXPECT_TRUE(c.observe(t, {{1, 0.05}}).empty());
  // Off.
  StragglerCheck off(0, 0ms);
  EXPECT_TRUE(off.observe(t, {{0, 0.02}, {1, 0.5}}).empty());
}

TEST(NodeStatus, RoundTripsAndReadsRecordsWithFieldsItDoesNotKnow) {
  NodeStatus s;
  s.node_rank = 1;
  s.host = "n2";
  s.round = 3;
  s.state = "running";
  s.restarts = 1;
  s.max_restarts = 3;
  s.nnodes = 2;
  s.updated = 1764790000.25;
  WorkerStatus w;
  w.rank = 5;
  w.local_rank = 1;
  w.pid = 77;
  w.state = "running";
  w.step = 120;
  w.step_s = 0.05;
  w.gpu = "thermal throttle at 91 C";
  s.workers.push_back(w);
  WorkerStatus quiet;  // no reports: its unknowns stay unknown
  quiet.rank = 6;
  quiet.local_rank = 2;
  quiet.state = "running";
  s.workers.push_back(quiet);
  s.stragglers.push_back({5, "n2", 2.5, "thermal throttle at 91 C"});
  NodeStatus r = node_status_from_json(to_json(s));
  EXPECT_EQ(r.host, "n2");
  EXPECT_EQ(r.round, 3);
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].step, 120);
  EXPECT_EQ(r.workers[0].gpu, "thermal throttle at 91 C");
  EXPECT_FALSE(r.workers[1].step.has_value());
  EXPECT_FALSE(r.workers[1].heartbeat_age_s.has_value());
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_DOUBLE_EQ(r.stragglers[0].ratio, 2.5);
  EXPECT_EQ(node_status_from_json(R"({"node_rank": 0, "future_field": [1, 2]})").node_rank, 0);
  EXPECT_THROW(node_status_from_json("{\"host\": \"x\"}"), ProtocolError);
  EXPECT_THROW(node_status_from_json("not json"), ProtocolError);
}

}  // namespace
}  // namespace cohort::launch

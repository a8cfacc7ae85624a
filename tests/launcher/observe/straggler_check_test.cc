// The straggler check: a rank whose compute time per step stays above the factor times the other
// ranks' median for the window is named once (tests/launcher/observe/observe_job.py runs it in
// real jobs).
#include "observe/straggler_check.h"

#include <gtest/gtest.h>

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

TEST(StragglerCheck, ResetForgetsWhoWasSlowAndSince) {
  StragglerCheck c(1.5, 1000ms);
  const auto t0 = StragglerCheck::Clock::time_point{} + 1h;
  const std::map<int, double> slow{{0, 0.02}, {1, 0.02}, {2, 0.08}};
  EXPECT_TRUE(c.observe(t0, slow).empty());
  ASSERT_EQ(c.observe(t0 + 1000ms, slow).size(), 1u);
  c.reset();  // a new round
  EXPECT_TRUE(c.ratios().empty());
  EXPECT_TRUE(c.observe(t0 + 2000ms, slow).empty());  // its window starts again
  auto f = c.observe(t0 + 3000ms, slow);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_TRUE(f[0].is_new);  // and it is named again
}

}  // namespace
}  // namespace cohort::launch

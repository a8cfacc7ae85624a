#include "cohort/base/deadline.h"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

TEST(PollMsLeft, APartOfAMillisecondLeftIsAWholeOneSoAWaitNeverEndsEarly) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(cohort::poll_ms_left(now + 299970us, now), 300);  // was 299: 0.97 ms early
  EXPECT_EQ(cohort::poll_ms_left(now + 300ms, now), 300);
  EXPECT_EQ(cohort::poll_ms_left(now + 1ns, now), 1);
}

TEST(PollMsLeft, APassedDeadlineIsZeroAndAFarOneFitsPollsInt) {
  const auto now = std::chrono::steady_clock::now();
  EXPECT_EQ(cohort::poll_ms_left(now, now), 0);
  EXPECT_EQ(cohort::poll_ms_left(now - 5s, now), 0);
  EXPECT_EQ(cohort::poll_ms_left(now + std::chrono::hours(24 * 365), now), 1 << 30);
}

#include "cohort/base/duration_text.h"

#include <gtest/gtest.h>

using namespace std::chrono_literals;

TEST(DurationText, WholeSecondsHaveNoFractionAndPartsOfASecondAreNotZero) {
  EXPECT_EQ(cohort::in_seconds(900s), "900 s");
  EXPECT_EQ(cohort::in_seconds(100ms), "0.1 s");
  EXPECT_EQ(cohort::in_seconds(2500ms), "2.5 s");
  EXPECT_EQ(cohort::in_seconds(0ms), "0 s");
}

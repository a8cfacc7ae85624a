// AcceptFailures: a storm of failed accepts is a line at once, then a line a second with counts.
#include "cohort/base/accept_failures.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

using namespace std::chrono_literals;
using Clock = AcceptFailures::Clock;

TEST(AcceptFailures, TheFirstIsSaidAtOnceThenALineASecondWithHowMany) {
  AcceptFailures f("accept failed");
  const Clock::time_point t0{};
  auto first = f.failed("Too many open files", t0 + 1s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->rfind("accept failed: Too many open files (retrying", 0), 0u) << *first;
  // Every 100 ms, as a retrying acceptor fails: quiet until a second has passed.
  for (int i = 1; i < 10; ++i) EXPECT_FALSE(f.failed("Too many open files", t0 + 1s + i * 100ms));
  auto second = f.failed("Too many open files", t0 + 2s);
  ASSERT_TRUE(second);
  EXPECT_EQ(*second,
            "accept failed: Too many open files (10 times in 0.9 s, 11 since the failures began "
            "1.0 s ago)");
  // Accepting works again: said once, with the whole storm's count.
  auto back = f.accepted(t0 + 3500ms);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, "accepting again after 11 failed accepts over 2.5 s");
  EXPECT_FALSE(f.accepted(t0 + 3600ms));
  EXPECT_EQ(f.total(), 11u);
}

TEST(AcceptFailures, AStormThatFlapsIsOneStorm) {
  // Each descriptor freed lets one accept through between failures: no line a success each.
  AcceptFailures f("accept failed");
  const Clock::time_point t0{};
  EXPECT_TRUE(f.failed("Too many open files", t0));
  for (int i = 1; i < 9; ++i) {
    EXPECT_FALSE(f.accepted(t0 + i * 100ms));
    EXPECT_FALSE(f.failed("Too many open files", t0 + i * 100ms + 50ms));
  }
  auto back = f.accepted(t0 + 1100ms);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, "accepting again after 9 failed accepts over 1.1 s");
  // A new storm within a second of that line waits out the second, then says its count.
  EXPECT_FALSE(f.failed("Too many open files", t0 + 1200ms));
  auto again = f.failed("Too many open files", t0 + 2100ms);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again,
            "accept failed: Too many open files (2 times in 0.9 s, 2 since the failures began 0.9 "
            "s ago)");
  EXPECT_FALSE(f.accepted(t0 + 2200ms));  // within a second of the last line
}

TEST(AcceptFailures, WithoutFailuresASuccessSaysNothing) {
  AcceptFailures f("accept failed");
  EXPECT_FALSE(f.accepted());
  EXPECT_EQ(f.total(), 0u);
}

}  // namespace
}  // namespace cohort

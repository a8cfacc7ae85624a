// LoopClock's timers: on the manual clock (what the launcher's unit tests run on) and on Asio's
// steady timers (what cohortrun runs on). A callback runs from the loop only, once, and never
// after cancel(), a new start() or the timer's end.
#include "loop/loop_clock.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class ManualLoopClockTest : public ::testing::Test {
 protected:
  void run() {
    io_.restart();
    io_.poll();
  }
  std::function<void()> record(std::string name) {
    return [this, name] { fired_.push_back(name); };
  }

  asio::io_context io_;
  ManualLoopClock clock_{io_};
  std::vector<std::string> fired_;
};

TEST_F(ManualLoopClockTest, ATimerFiresFromTheLoopOnceItsDeadlinePasses) {
  auto t = clock_.make_timer();
  EXPECT_FALSE(t->armed());
  t->start(100ms, record("t"));
  EXPECT_TRUE(t->armed());
  clock_.advance(99ms);
  run();
  EXPECT_TRUE(fired_.empty());
  clock_.advance(1ms);
  EXPECT_TRUE(fired_.empty());  // not from inside advance()
  EXPECT_FALSE(t->armed());
  run();
  EXPECT_EQ(fired_, std::vector<std::string>{"t"});
  clock_.advance(1h);
  run();
  EXPECT_EQ(fired_.size(), 1u);  // one-shot
}

TEST_F(ManualLoopClockTest, TimersDueTogetherFireInDeadlineOrder) {
  auto late = clock_.make_timer(), early = clock_.make_timer(), middle = clock_.make_timer();
  late->start(30ms, record("late"));
  early->start(10ms, record("early"));
  middle->start(20ms, record("middle"));
  EXPECT_EQ(clock_.next_deadline(), clock_.now() + 10ms);
  clock_.advance(1s);
  run();
  EXPECT_EQ(fired_, (std::vector<std::string>{"early", "middle", "late"}));
  EXPECT_FALSE(clock_.next_deadline());
}

TEST_F(ManualLoopClockTest, CancelOrRestartBeforeTheLoopRunsItMeansItNeverRuns) {
  auto a = clock_.make_timer(), b = clock_.make_timer();
  a->start(10ms, record("a"));
  b->start(10ms, record("b-first"));
  clock_.advance(10ms);  // both posted
  a->cancel();
  b->start(50ms, record("b-second"));
  run();
  EXPECT_TRUE(fired_.empty());
  EXPECT_EQ(clock_.next_deadline(), clock_.now() + 50ms);
  clock_.advance(50ms);
  run();
  EXPECT_EQ(fired_, std::vector<std::string>{"b-second"});
}

TEST_F(ManualLoopClockTest, ADestroyedTimerNeverFiresAndLeavesTheClock) {
  auto t = clock_.make_timer();
  t->start(10ms, record("t"));
  clock_.advance(10ms);  // posted
  t.reset();
  run();
  EXPECT_TRUE(fired_.empty());
  auto u = clock_.make_timer();
  u->start(5ms, record("u"));
  u.reset();
  EXPECT_FALSE(clock_.next_deadline());
  clock_.advance(1s);  // must not touch the destroyed timer
  run();
  EXPECT_TRUE(fired_.empty());
}

TEST_F(ManualLoopClockTest, ACallbackMayRearmItsOwnTimer) {
  auto t = clock_.make_timer();
  int ticks = 0;
  std::function<void()> tick = [&] {
    if (++ticks < 3) t->start(1s, tick);
  };
  t->start(1s, tick);
  for (int i = 0; i < 5; ++i) {
    clock_.advance(1s);
    run();
  }
  EXPECT_EQ(ticks, 3);
  EXPECT_FALSE(t->armed());
}

TEST(AsioLoopClock, TimersFireOnTheLoopAndCancelledOnesNever) {
  asio::io_context io;
  auto clock = make_asio_loop_clock(io);
  EXPECT_TRUE(clock->clock().is_real());
  auto fires = clock->make_timer(), cancelled = clock->make_timer(), replaced = clock->make_timer(),
       destroyed = clock->make_timer();
  std::vector<std::string> fired;
  cancelled->start(1ms, [&] { fired.push_back("cancelled"); });
  replaced->start(1ms, [&] { fired.push_back("replaced-first"); });
  destroyed->start(1ms, [&] { fired.push_back("destroyed"); });
  cancelled->cancel();
  replaced->start(2ms, [&] { fired.push_back("replaced-second"); });
  destroyed.reset();
  fires->start(3ms, [&] { fired.push_back("fires"); });
  EXPECT_TRUE(fires->armed());
  EXPECT_FALSE(cancelled->armed());
  // Runs until the last timer has fired (or 10 s have passed: a failure).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (fires->armed() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_one_for(100ms);
  }
  io.restart();
  io.poll();
  std::sort(fired.begin(), fired.end());
  EXPECT_EQ(fired, (std::vector<std::string>{"fires", "replaced-second"}));
}

}  // namespace
}  // namespace cohort::launch

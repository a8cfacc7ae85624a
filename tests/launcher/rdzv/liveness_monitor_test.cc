// The liveness monitor over the in-memory store, on a manual clock: a peer whose keep-alive counter
// stops is lost after the timeout, counted from when the observer could see it.
#include "rdzv/liveness_monitor.h"

#include <gtest/gtest.h>

#include "cohort/rdzv/memory_store.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST(LivenessMonitor, APeerWhoseCounterStopsIsLostAfterTheTimeout) {
  ManualClock clock;
  MemoryStore store(std::chrono::seconds(5), clock);
  LivenessMonitor a("a", 10s, 5s, clock), b("b", 10s, 5s, clock);
  const std::vector<std::string> peers{"a", "b"};
  EXPECT_TRUE(a.tick(store, peers).empty());
  EXPECT_TRUE(b.tick(store, peers).empty());
  for (int i = 0; i < 3; ++i) {  // both beat: nobody is lost, however long it takes
    clock.advance(5s);
    EXPECT_TRUE(a.tick(store, peers).empty());
    EXPECT_TRUE(b.tick(store, peers).empty());
  }
  // b stops. a sees b's last beat at its next tick, and counts the timeout from there.
  clock.advance(5s);
  EXPECT_TRUE(a.tick(store, peers).empty());
  clock.advance(9s);
  EXPECT_TRUE(a.tick(store, peers).empty());
  clock.advance(2s);
  EXPECT_EQ(a.tick(store, peers), std::vector<std::string>{"b"});
  a.reset();  // a new round starts every clock again
  EXPECT_TRUE(a.tick(store, peers).empty());
}

TEST(LivenessMonitor, TimeTheObserverCouldNotSeeIsForgivenEveryPeer) {
  ManualClock clock;
  MemoryStore store(std::chrono::seconds(5), clock);
  LivenessMonitor a("a", 10s, 5s, clock), b("b", 10s, 5s, clock);
  const std::vector<std::string> peers{"a", "b"};
  EXPECT_TRUE(b.tick(store, peers).empty());
  EXPECT_TRUE(a.tick(store, peers).empty());  // a has seen b's latest beat
  // The store is unreachable for 40 s: nobody ticks. a's first tick after it, before b's, must not
  // call b lost for the 40 s since a last saw b's counter move.
  clock.advance(40s);
  EXPECT_TRUE(a.tick(store, peers).empty());
  clock.advance(1s);
  EXPECT_TRUE(b.tick(store, peers).empty());
  clock.advance(4s);
  EXPECT_TRUE(a.tick(store, peers).empty());
  // b stops for good: lost a timeout after a saw its last beat, as without the gap.
  clock.advance(5s);
  EXPECT_TRUE(a.tick(store, peers).empty());
  clock.advance(5s);
  EXPECT_EQ(a.tick(store, peers), std::vector<std::string>{"b"});
}

}  // namespace
}  // namespace cohort::launch

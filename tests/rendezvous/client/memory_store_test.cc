// MemoryStore: the TCP store's semantics in one process, on a manual clock (a wait times out when
// the test moves the clock past its deadline, never after real time), with interrupts of the
// whole store and of one connection.
#include "cohort/rdzv/memory_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

namespace cohort {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> list(std::initializer_list<const char*> keys) {
  return {keys.begin(), keys.end()};
}

class MemoryStoreTest : public ::testing::Test {
 protected:
  // Wakes every blocked wait when it goes out of scope, so that a failed expectation ends the
  // test instead of leaving a std::async's destructor waiting for ever.
  struct InterruptAtExit {
    Store& store;
    ~InterruptAtExit() { store.interrupt(); }
  };

  ManualClock clock_;
  MemoryStore store_{10s, clock_};
};

TEST_F(MemoryStoreTest, SetGetAddAppendDeleteAndCount) {
  store_.set("a", std::string("x\0y", 3));
  EXPECT_EQ(store_.get("a"), std::string("x\0y", 3));  // bytes, not C strings
  EXPECT_EQ(store_.add("n", 5), 5);                    // a missing counter is 0
  EXPECT_EQ(store_.add("n", -7), -2);
  EXPECT_EQ(store_.get("n"), "-2");
  store_.set("spaced", "  40");
  EXPECT_EQ(store_.add("spaced", 2), 42);  // leading spaces, as PyTorch's server reads them
  store_.append("log", "ab");
  store_.append("log", "cd");
  EXPECT_EQ(store_.get("log"), "abcd");
  EXPECT_EQ(store_.num_keys(), 4);
  EXPECT_TRUE(store_.delete_key("a"));
  EXPECT_FALSE(store_.delete_key("a"));
  EXPECT_EQ(store_.num_keys(), 3);
  EXPECT_TRUE(store_.check(list({"n", "log"})));
  EXPECT_FALSE(store_.check(list({"n", "a"})));
  EXPECT_TRUE(store_.check({}));
  EXPECT_EQ(store_.describe(), "memory");
}

TEST_F(MemoryStoreTest, AddOnAValueThatIsNoNumberIsAStoreErrorNamingTheKey) {
  store_.set("word", "seven");
  try {
    store_.add("word", 1);
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.key(), "word");
    EXPECT_NE(std::string(e.what()).find("not a decimal integer"), std::string::npos);
  }
  EXPECT_EQ(store_.get("word"), "seven");  // untouched
}

TEST_F(MemoryStoreTest, CompareSetAsTheTcpStoreDoesIt) {
  // Missing key, empty expected: created.
  EXPECT_EQ(store_.compare_set("k", "", "v1"), "v1");
  // Missing key, non-empty expected: nothing written, `expected` returned.
  EXPECT_EQ(store_.compare_set("other", "x", "y"), "x");
  EXPECT_FALSE(store_.check(list({"other"})));
  // Present and equal: replaced; present and different: the current value.
  EXPECT_EQ(store_.compare_set("k", "v1", "v2"), "v2");
  EXPECT_EQ(store_.compare_set("k", "v1", "v3"), "v2");
  EXPECT_EQ(store_.compare_set("k", "", "v4"), "v2");  // present: "" is not its value
  EXPECT_EQ(store_.get("k"), "v2");
}

TEST_F(MemoryStoreTest, MultiGetAndMultiSet) {
  store_.multi_set(list({"a", "b"}), list({"1", "2"}));
  EXPECT_EQ(store_.multi_get(list({"b", "a"})), list({"2", "1"}));
  EXPECT_TRUE(store_.multi_get({}).empty());
}

TEST_F(MemoryStoreTest, AGetWaitsForALateSet) {
  auto got = std::async(std::launch::async, [&] { return store_.get("late"); });
  InterruptAtExit guard{store_};
  EXPECT_EQ(got.wait_for(0s), std::future_status::timeout);  // the manual clock never moves
  store_.set("late", "here");
  EXPECT_EQ(got.get(), "here");
}

TEST_F(MemoryStoreTest, AWaitTimesOutWhenTheClockPassesItsDeadlineNamingTheMissingKeys) {
  store_.set("there", "1");
  // Another thread moves the clock until the wait gives up.
  std::atomic<bool> done{false};
  std::thread advancer([&] {
    while (!done) {
      clock_.advance(100ms);
      std::this_thread::yield();
    }
  });
  const auto t0 = clock_.now();
  try {
    store_.wait(list({"there", "missing", "gone"}), 5s);
    ADD_FAILURE() << "no timeout";
  } catch (const StoreTimeoutError& e) {
    EXPECT_EQ(std::string(e.what()), "wait timed out after 5000 ms; keys not set: missing, gone");
    EXPECT_EQ(e.key(), "missing, gone");
  }
  done = true;
  advancer.join();
  EXPECT_GE(clock_.now() - t0, 5s);  // not before its deadline on the store's clock
  // get() and multi_get() use the store's timeout, which can change.
  store_.set_timeout(0ms);
  EXPECT_EQ(store_.timeout(), 0ms);
  EXPECT_THROW(store_.get("missing"), StoreTimeoutError);
  EXPECT_THROW(store_.multi_get(list({"there", "missing"})), StoreTimeoutError);
}

TEST_F(MemoryStoreTest, AnInterruptFailsEveryBlockedWaitOnceThenTheStoreWorks) {
  auto a = std::async(std::launch::async, [&] { store_.wait(list({"never"}), 1h); });
  auto b = std::async(std::launch::async, [&] { return store_.get("never"); });
  EXPECT_EQ(a.wait_for(0s), std::future_status::timeout);
  // Both waits are blocked once the interrupt comes; retry until each has seen one.
  while (a.wait_for(1ms) != std::future_status::ready ||
         b.wait_for(1ms) != std::future_status::ready)
    store_.interrupt();
  EXPECT_THROW(a.get(), StoreError);
  EXPECT_THROW(b.get(), StoreError);
  store_.set("never", "now");
  EXPECT_EQ(store_.get("never"), "now");
}

TEST_F(MemoryStoreTest, AConnectionsInterruptFailsOnlyItsOwnWaits) {
  auto mine = store_.connect(), theirs = store_.connect();
  auto mine_wait = std::async(std::launch::async, [&] { mine->wait(list({"k"}), 1h); });
  auto their_wait = std::async(std::launch::async, [&] { return theirs->get("k"); });
  InterruptAtExit guard{store_};
  while (mine_wait.wait_for(1ms) != std::future_status::ready) mine->interrupt();
  EXPECT_THROW(mine_wait.get(), StoreError);
  EXPECT_EQ(their_wait.wait_for(0s), std::future_status::timeout);  // still waiting
  mine->set("k", "v");  // a connection writes to the shared store
  EXPECT_EQ(their_wait.get(), "v");
  EXPECT_EQ(theirs->num_keys(), 1);
}

TEST_F(MemoryStoreTest, AnAbandonedConnectionsWaitsFailAtOnce) {
  std::atomic<bool> abandon{true};
  auto c = store_.connect(&abandon);
  EXPECT_THROW(c->wait(list({"k"}), 1h), StoreError);
  EXPECT_THROW(c->get("k"), StoreError);
  abandon = false;
  c->set("k", "v");
  EXPECT_EQ(c->get("k"), "v");
  EXPECT_EQ(c->multi_get(list({"k"})), list({"v"}));
}

TEST(MemoryStore, OnTheSteadyClockAWaitEndsAfterItsTimeout) {
  MemoryStore store(10s);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(store.wait(list({"k"}), 1ms), StoreTimeoutError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

}  // namespace
}  // namespace cohort

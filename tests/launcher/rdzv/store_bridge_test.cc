// StoreBridge over the in-memory store: operations run off the loop in order and report back on
// the loop; urgent and status operations pass a blocked call; keys are the run's; a watch posts
// the value once its key exists, and a replaced watch never calls back; failures reach the
// callbacks; operations given up before they ran hear why; the destructor ends a blocked call.
#include "rdzv/store_bridge.h"

#include <gtest/gtest.h>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <chrono>
#include <thread>

#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"
#include "common/loop_until.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class StoreBridgeTest : public ::testing::Test {
 protected:
  StoreBridgeTest()
      : bridge_(std::make_unique<StoreBridge>(
            io_.get_executor(),
            [this](const std::atomic<bool>* abandon) { return store_.connect(abandon); },
            "cohort/run1")) {}

  // Runs the loop until `done` holds; false after 10 s of real time.
  bool run_until(const std::function<bool()>& done) { return testing::run_until(io_, done); }
  bool has(const std::string& key) { return store_.check(std::vector<std::string>{key}); }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{io_.get_executor()};
  MemoryStore store_{1h};
  std::unique_ptr<StoreBridge> bridge_;
};

TEST_F(StoreBridgeTest, OperationsRunInOrderOnTheRunsKeysAndReportOnTheLoop) {
  std::vector<int> done;
  const auto loop_thread = std::this_thread::get_id();
  for (int i = 0; i < 3; ++i) {
    bridge_->run(
        [i](Store& s) {
          EXPECT_EQ(s.add("order", 1), i + 1);  // in submission order
        },
        [&, i](std::exception_ptr err) {
          EXPECT_FALSE(err);
          EXPECT_EQ(std::this_thread::get_id(), loop_thread);
          done.push_back(i);
        });
  }
  ASSERT_TRUE(run_until([&] { return done.size() == 3; }));
  EXPECT_EQ(done, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(store_.get("cohort/run1/order"), "3");
  EXPECT_FALSE(has("order"));
}

TEST_F(StoreBridgeTest, ACallsResultAndAFailureReachTheLoop) {
  store_.set("cohort/run1/k", "v");
  std::optional<std::string> value;
  bridge_->call<std::string>([](Store& s) { return s.get("k"); },
                             [&](std::exception_ptr err, std::string v) {
                               EXPECT_FALSE(err);
                               value = v;
                             });
  std::exception_ptr failure;
  bool failed = false;
  bridge_->run([](Store& s) { s.add("k", 1); },  // "v" is no counter
               [&](std::exception_ptr err) {
                 failure = err;
                 failed = true;
               });
  ASSERT_TRUE(run_until([&] { return value && failed; }));
  EXPECT_EQ(*value, "v");
  ASSERT_TRUE(failure);
  EXPECT_THROW(std::rethrow_exception(failure), StoreError);
}

TEST_F(StoreBridgeTest, UrgentAndStatusOperationsPassABlockedCall) {
  bool blocked_done = false;
  bridge_->run([](Store& s) { s.wait(std::vector<std::string>{"never"}, 1h); },
               [&](std::exception_ptr) { blocked_done = true; });
  bool urgent = false, status = false, unscoped = false;
  bridge_->run_urgent([](Store& s) { s.set("outcome", "aborted"); },
                      [&](std::exception_ptr err) { urgent = !err; });
  bridge_->run_status([](Store& s) { s.set("status/0", "{}"); },
                      [&](std::exception_ptr err) { status = !err; });
  bridge_->run_status_unscoped([](Store& s) { s.set("lobby", "1"); },
                               [&](std::exception_ptr err) { unscoped = !err; });
  ASSERT_TRUE(run_until([&] { return urgent && status && unscoped; }));
  EXPECT_FALSE(blocked_done);
  EXPECT_TRUE(has("cohort/run1/outcome"));
  EXPECT_TRUE(has("cohort/run1/status/0"));
  EXPECT_TRUE(has("lobby"));  // the whole keyspace, not the run's
  // The destructor ends the blocked call instead of waiting an hour for it.
  const auto start = std::chrono::steady_clock::now();
  bridge_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST_F(StoreBridgeTest, OperationsGivenUpBeforeTheyRanGetAnErrorAndTheRunningOneGoesOn) {
  std::atomic<bool> blocking{false};
  std::optional<std::exception_ptr> blocked;
  bridge_->run(
      [&](Store& s) {
        blocking = true;
        s.wait(std::vector<std::string>{"released"}, 1h);
      },
      [&](std::exception_ptr err) { blocked = err; });
  ASSERT_TRUE(run_until([&] { return blocking.load(); }));
  // Queued behind it, on the same thread: never run, but each hears why.
  std::optional<std::exception_ptr> queued_run;
  bool call_done = false;
  std::exception_ptr call_error;
  bridge_->run([](Store&) { ADD_FAILURE() << "a given-up operation ran"; },
               [&](std::exception_ptr err) { queued_run = err; });
  bridge_->call<int>(
      [](Store&) -> int {
        ADD_FAILURE() << "a given-up call ran";
        return 1;
      },
      [&](std::exception_ptr err, int) {
        call_done = true;
        call_error = err;
      });
  bridge_->drop_queued("the rendezvous store moved");
  ASSERT_TRUE(run_until([&] { return queued_run.has_value() && call_done; }));
  for (const std::exception_ptr& err : {*queued_run, call_error}) {
    ASSERT_TRUE(err);
    try {
      std::rethrow_exception(err);
    } catch (const StoreError& e) {
      EXPECT_STREQ(e.what(), "the rendezvous store moved");
    }
  }
  // The call that was running is not given up: it ends as it would have.
  EXPECT_FALSE(blocked.has_value());
  store_.set("cohort/run1/released", "1");
  ASSERT_TRUE(run_until([&] { return blocked.has_value(); }));
  EXPECT_FALSE(*blocked) << describe(*blocked);
}

TEST_F(StoreBridgeTest, AWatchPostsTheValueOnceTheKeyExists) {
  std::optional<std::string> value;
  bridge_->watch(
      "round/0/outcome", [&](std::string v) { value = v; },
      [&](std::string e) { ADD_FAILURE() << e; });
  io_.run_for(5ms);
  EXPECT_FALSE(value);
  store_.set("cohort/run1/round/0/outcome", "decided");
  ASSERT_TRUE(run_until([&] { return value.has_value(); }));
  EXPECT_EQ(*value, "decided");
}

TEST_F(StoreBridgeTest, AReplacedWatchNeverCallsBack) {
  std::vector<std::string> seen;
  bridge_->watch(
      "a", [&](std::string v) { seen.push_back("a=" + v); }, [](std::string) {});
  bridge_->watch(
      "b", [&](std::string v) { seen.push_back("b=" + v); }, [](std::string) {});
  store_.set("cohort/run1/a", "1");
  store_.set("cohort/run1/b", "2");
  ASSERT_TRUE(run_until([&] { return !seen.empty(); }));
  EXPECT_EQ(seen, std::vector<std::string>{"b=2"});
}

TEST(StoreBridge, AStoreThatCannotBeReachedFailsEachOperation) {
  asio::io_context io;
  auto work = asio::make_work_guard(io);
  StoreBridge bridge(
      io.get_executor(),
      [](const std::atomic<bool>*) -> std::unique_ptr<Store> {
        throw StoreError("connect to 10.0.0.1:29400 failed", "", "tcp://10.0.0.1:29400");
      },
      "cohort/x");
  std::string what;
  bridge.run([](Store&) { ADD_FAILURE() << "ran without a store"; },
             [&](std::exception_ptr err) {
               try {
                 std::rethrow_exception(err);
               } catch (const StoreError& e) {
                 what = e.what();
               }
             });
  std::string watch_error;
  bridge.watch(
      "k", [](std::string) { ADD_FAILURE(); }, [&](std::string e) { watch_error = e; });
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while ((what.empty() || watch_error.empty()) && std::chrono::steady_clock::now() < deadline)
    io.run_for(2ms);
  EXPECT_EQ(what, "connect to 10.0.0.1:29400 failed");
  EXPECT_EQ(watch_error, "connect to 10.0.0.1:29400 failed");
}

}  // namespace
}  // namespace cohort::launch

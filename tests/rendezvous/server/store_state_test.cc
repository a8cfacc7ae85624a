// StoreState semantics, PyTorch's quirks included (docs/PROTOCOL.md §1.3).
#include "server/store_state.h"

#include "../hex.h"
#include "cohort/rdzv/codec.h"
#include "server/protocol_handler.h"
#include "server/write_growth.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort::rdzv {
namespace {

struct Recorder : StoreListener {
  std::vector<SessionId> woken;
  std::vector<std::pair<SessionId, std::string>> watch_events;
  void on_wait_satisfied(SessionId s) override { woken.push_back(s); }
  void on_watch_event(SessionId s, const WatchEvent& e) override {
    std::string msg;  // as the server sends it
    encode_watch_notification(e, &msg);
    EXPECT_EQ(msg.size(), watch_notification_size(e));
    watch_events.emplace_back(s, std::move(msg));
  }
};

class StoreStateTest : public ::testing::Test {
 protected:
  Recorder rec;
  StoreState st{&rec, 0};
  using Keys = std::vector<std::string_view>;
};

// The byte counters kept as the store changes, against a count of every key and value.
uint64_t counted_bytes(const StoreState& st) {
  uint64_t n = 0;
  st.for_each([&](const std::string& k, const std::string& v) { n += k.size() + v.size(); });
  return n;
}

TEST_F(StoreStateTest, ByteCountersFollowEveryChange) {
  const std::string big(StoredValue::kShareFrom + 5, 'b');
  int64_t sum;
  st.set("a", "1");
  st.set("a", "12345");
  st.set("big", big);
  st.set("big", "small again");
  st.add("n", 5, &sum);
  st.add("n", 995, &sum);
  st.compare_set("a", "12345", "x");
  st.compare_set("new", "", "created");
  st.compare_set("absent", "expected", "not written");
  st.append("log", "first");
  st.append("log", big);  // crosses into a shared buffer
  st.append("log", "more");
  st.restore("restored", big);
  st.restore("restored", "r");
  st.restore_append("restored", "+1");
  st.restore_append("fresh", "f");
  EXPECT_TRUE(st.delete_key("new"));
  st.restore_delete("fresh");
  EXPECT_EQ(st.key_value_bytes(), counted_bytes(st));
  EXPECT_EQ(*st.get("log"), "first" + big + "more");

  st.queue_push("q", "one");
  st.queue_push("q", "three");
  EXPECT_EQ(st.queued_bytes(), 1u + 3 + 5);
  std::string popped;
  st.queue_pop("q", &popped);
  st.queue_pop("q", &popped);
  EXPECT_EQ(st.queued_bytes(), 0u);

  st.remember_reply(1, 1, "abc");
  st.remember_reply(1, 2, "abcdef");
  st.remember_reply(2, 1, "z");
  EXPECT_EQ(st.num_replies(), 2u);
  EXPECT_EQ(st.reply_bytes(), 7u);
}

TEST_F(StoreStateTest, ALargeValueIsSharedWithRepliesAndNeverChangedUnderThem) {
  const std::string big(StoredValue::kShareFrom, 'a');
  st.set("k", "short");
  EXPECT_EQ(st.value("k")->shared(), nullptr);  // short values are copied into replies
  st.set("k", big);
  SharedBytes held = st.value("k")->shared();  // as a queued reply holds it
  ASSERT_NE(held, nullptr);
  st.append("k", "+");
  st.set("k", std::string(big.size(), 'c'));
  EXPECT_EQ(*held, big);  // what the reply sends is what was read
  EXPECT_EQ(*st.get("k"), std::string(big.size(), 'c'));
  held.reset();
  const std::string* before = st.get("k");
  st.append("k", "+");  // unshared: grows in place
  EXPECT_EQ(st.get("k"), before);
  EXPECT_EQ(*st.get("k"), std::string(big.size(), 'c') + "+");
}

TEST_F(StoreStateTest, WriteGrowthIsWhatAWriteWouldAddBeforeItRuns) {
  auto req = [](Op op, std::vector<std::string_view> keys, std::vector<std::string_view> values) {
    Request r;
    r.op = op;
    r.keys = std::move(keys);
    r.values = std::move(values);
    return r;
  };
  st.set("k", "12345");
  EXPECT_EQ(write_growth(st, req(Op::kSet, {"new"}, {"abc"})), 6u);  // key and value
  EXPECT_EQ(write_growth(st, req(Op::kSet, {"k"}, {"1234567"})), 2u);
  EXPECT_EQ(write_growth(st, req(Op::kSet, {"k"}, {"1"})), 0u);  // shorter: nothing added
  EXPECT_EQ(write_growth(st, req(Op::kAppend, {"k"}, {"xy"})), 2u);
  EXPECT_EQ(write_growth(st, req(Op::kAppend, {"a"}, {"xy"})), 3u);
  // COMPARE_SET adds only when it would write.
  EXPECT_EQ(write_growth(st, req(Op::kCompareSet, {"k"}, {"no", "longer value"})), 0u);
  EXPECT_EQ(write_growth(st, req(Op::kCompareSet, {"k"}, {"12345", "longer value"})), 7u);
  EXPECT_EQ(write_growth(st, req(Op::kCompareSet, {"m"}, {"x", "value"})), 0u);
  EXPECT_EQ(write_growth(st, req(Op::kCompareSet, {"m"}, {"", "value"})), 6u);
  // ADD and BARRIER: the longest counter.
  EXPECT_EQ(write_growth(st, req(Op::kAdd, {"n"}, {})), 21u);
  EXPECT_EQ(write_growth(st, req(Op::kAdd, {"k"}, {})), 15u);
  EXPECT_EQ(write_growth(st, req(Op::kMultiSet, {"k", "new"}, {"1234567", "abc"})), 8u);
  EXPECT_EQ(write_growth(st, req(Op::kQueuePush, {"q"}, {"item"})), 5u);
  st.queue_push("q", "first");
  EXPECT_EQ(write_growth(st, req(Op::kQueuePush, {"q"}, {"item"})), 4u);
  for (Op read : {Op::kGet, Op::kCheck, Op::kDeleteKey, Op::kQueuePop, Op::kWait})
    EXPECT_EQ(write_growth(st, req(read, {"k"}, {})), 0u) << op_name(read);
}

TEST_F(StoreStateTest, AddStoresDecimalTextAndMissingCountsAsZero) {
  int64_t v;
  ASSERT_TRUE(st.add("c", -5, &v));
  EXPECT_EQ(v, -5);
  EXPECT_EQ(*st.get("c"), "-5");
  ASSERT_TRUE(st.add("c", 8, &v));
  EXPECT_EQ(*st.get("c"), "3");
}

TEST_F(StoreStateTest, AddParsesLikeStoll) {
  int64_t v;
  st.set("sp", " 12");
  ASSERT_TRUE(st.add("sp", 1, &v));
  EXPECT_EQ(v, 13);
  st.set("trail", "7abc");
  ASSERT_TRUE(st.add("trail", 1, &v));
  EXPECT_EQ(v, 8);
  st.set("word", "abc");
  EXPECT_FALSE(st.add("word", 1, &v));
  EXPECT_EQ(*st.get("word"), "abc");  // unchanged
  st.set("huge", "99999999999999999999");
  EXPECT_FALSE(st.add("huge", 1, &v));
  st.set("min", "-9223372036854775808");
  ASSERT_TRUE(st.add("min", 0, &v));
  EXPECT_EQ(v, INT64_MIN);
}

TEST_F(StoreStateTest, CompareSetAllFourCases) {
  st.set("k", "v1");
  EXPECT_EQ(st.compare_set("k", "v1", "v2"), "v2");  // present, equal: written
  EXPECT_EQ(st.compare_set("k", "zz", "v3"), "v2");  // present, different: current value
  EXPECT_EQ(*st.get("k"), "v2");
  EXPECT_EQ(st.compare_set("nokey", "exp", "des"), "exp");  // missing, non-empty expected: lies
  EXPECT_EQ(st.get("nokey"), nullptr);
  EXPECT_EQ(st.compare_set("nokey2", "", "des"), "des");  // missing, empty expected: created
  EXPECT_EQ(*st.get("nokey2"), "des");
}

TEST_F(StoreStateTest, WaitReadyAtOnceWhenKeysExist) {
  st.set("a", "1");
  EXPECT_EQ(st.wait(1, Keys{"a"}), StoreState::WaitResult::kReady);
  EXPECT_EQ(st.parked_waits(), 0u);
}

TEST_F(StoreStateTest, WaitParksUntilEveryKeyIsWritten) {
  st.set("a", "1");
  ASSERT_EQ(st.wait(1, Keys{"a", "b", "c"}), StoreState::WaitResult::kParked);
  st.set("b", "x");
  EXPECT_TRUE(rec.woken.empty());
  int64_t v;
  st.add("c", 1, &v);
  EXPECT_EQ(rec.woken, std::vector<SessionId>{1});
  EXPECT_EQ(st.parked_waits(), 0u);
}

TEST_F(StoreStateTest, WritesWakeWaitersInArrivalOrder) {
  for (SessionId s : {5, 3, 9}) ASSERT_EQ(st.wait(s, Keys{"k"}), StoreState::WaitResult::kParked);
  st.append("k", "z");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{5, 3, 9}));
}

TEST_F(StoreStateTest, CompareSetThatWritesWakesWaiters) {
  ASSERT_EQ(st.wait(1, Keys{"k"}), StoreState::WaitResult::kParked);
  st.compare_set("k", "other", "x");  // missing key, non-empty expected: no write, no wake
  EXPECT_TRUE(rec.woken.empty());
  st.compare_set("k", "", "x");
  EXPECT_EQ(rec.woken, std::vector<SessionId>{1});
}

TEST_F(StoreStateTest, CancelledAndDroppedWaitsAreNotWoken) {
  ASSERT_EQ(st.wait(1, Keys{"k"}), StoreState::WaitResult::kParked);
  ASSERT_EQ(st.wait(2, Keys{"k"}), StoreState::WaitResult::kParked);
  EXPECT_TRUE(st.cancel_wait(1));
  EXPECT_FALSE(st.cancel_wait(1));
  st.drop_session(2);
  st.set("k", "v");
  EXPECT_TRUE(rec.woken.empty());
  EXPECT_EQ(st.parked_waits(), 0u);
}

TEST_F(StoreStateTest, ManyCancellationsOnOneKeyStayConsistent) {
  // Beyond the eager-cleanup size, cancelled entries are compacted lazily.
  for (SessionId s = 1; s <= 1000; ++s)
    ASSERT_EQ(st.wait(s, Keys{"k"}), StoreState::WaitResult::kParked);
  for (SessionId s = 1; s <= 1000; s += 2) st.cancel_wait(s);
  // A session that cancelled waits again: only its new wait counts.
  ASSERT_EQ(st.wait(1, Keys{"k"}), StoreState::WaitResult::kParked);
  st.set("k", "v");
  std::vector<SessionId> expected;
  for (SessionId s = 2; s <= 1000; s += 2) expected.push_back(s);
  expected.push_back(1);
  EXPECT_EQ(rec.woken, expected);
}

TEST_F(StoreStateTest, BarrierReleasesEveryArrivalWhenTheLastArrives) {
  using R = StoreState::WaitResult;
  ASSERT_EQ(st.barrier(1, "b", 3), R::kParked);
  ASSERT_EQ(st.barrier(2, "b", 3), R::kParked);
  st.set("other", "x");  // other keys release nothing
  EXPECT_TRUE(rec.woken.empty());
  EXPECT_EQ(st.barrier(3, "b", 3), R::kReady);
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2}));
  EXPECT_EQ(*st.get("b"), "3");
  EXPECT_EQ(st.parked_waits(), 0u);
}

TEST_F(StoreStateTest, BarrierCountsCancelledArrivalsAndWakesOnAnyWriteThatReachesIt) {
  using R = StoreState::WaitResult;
  ASSERT_EQ(st.barrier(1, "b", 2), R::kParked);
  EXPECT_TRUE(st.cancel_wait(1));  // a timed-out arrival stays counted, as in PyTorch's store
  EXPECT_EQ(st.barrier(2, "b", 2), R::kReady);
  ASSERT_EQ(st.barrier(3, "c", 5), R::kParked);
  ASSERT_EQ(st.wait(4, Keys{"c"}), R::kReady);  // "c" exists once the barrier counted
  int64_t v;
  st.add("c", 1, &v);  // 2 of 5: still short
  EXPECT_TRUE(rec.woken.empty());
  st.set("c", "9");
  EXPECT_EQ(rec.woken, std::vector<SessionId>{3});
}

TEST_F(StoreStateTest, BarrierComparesTheCounterAfterItsArrivalWrappedLikeAdd) {
  st.set("w", "9223372036854775807");  // INT64_MAX: the arrival wraps it to INT64_MIN, short of 3
  EXPECT_EQ(st.barrier(1, "w", 3), StoreState::WaitResult::kParked);
  EXPECT_EQ(*st.get("w"), "-9223372036854775808");
}

TEST_F(StoreStateTest, BarrierOnTextOrBeyondTheWaiterLimitChangesNothing) {
  st.set("t", "text");
  EXPECT_EQ(st.barrier(1, "t", 2), StoreState::WaitResult::kNotACounter);
  EXPECT_EQ(*st.get("t"), "text");
  StoreState limited(&rec, 1);
  ASSERT_EQ(limited.wait(1, Keys{"k"}), StoreState::WaitResult::kParked);
  EXPECT_EQ(limited.barrier(2, "b", 2), StoreState::WaitResult::kTooManyWaiters);
  EXPECT_EQ(limited.get("b"), nullptr);
  EXPECT_EQ(limited.barrier(2, "b", 1), StoreState::WaitResult::kReady);  // needs no wait
}

TEST_F(StoreStateTest, WaiterLimit) {
  StoreState limited(&rec, 2);
  EXPECT_EQ(limited.wait(1, Keys{"k"}), StoreState::WaitResult::kParked);
  EXPECT_EQ(limited.wait(2, Keys{"k"}), StoreState::WaitResult::kParked);
  EXPECT_EQ(limited.wait(3, Keys{"k"}), StoreState::WaitResult::kTooManyWaiters);
}

TEST_F(StoreStateTest, NumKeysCountsEveryKeyButNotQueues) {
  int64_t v;
  st.add("init/", 1, &v);
  st.set("/k", "v");
  st.queue_push("q", "x");
  EXPECT_EQ(st.num_keys(), 2);
  EXPECT_TRUE(st.delete_key("/k"));
  EXPECT_FALSE(st.delete_key("/k"));
  EXPECT_EQ(st.num_keys(), 1);
}

TEST_F(StoreStateTest, QueuePushWakesOneWaiterAndPopsInOrder) {
  ASSERT_EQ(st.wait(1, Keys{"q"}), StoreState::WaitResult::kParked);
  ASSERT_EQ(st.wait(2, Keys{"q"}), StoreState::WaitResult::kParked);
  st.queue_push("q", "first");
  EXPECT_EQ(rec.woken, std::vector<SessionId>{1});
  st.queue_push("q", "second");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2}));
  EXPECT_TRUE(st.check(Keys{"q"}));
  EXPECT_EQ(st.queue_len("q"), 2);
  std::string v;
  EXPECT_EQ(st.queue_pop("q", &v), 2);
  EXPECT_EQ(v, "first");
  EXPECT_EQ(st.queue_pop("q", &v), 1);
  EXPECT_EQ(v, "second");
  EXPECT_EQ(st.queue_pop("q", &v), 0);
  EXPECT_FALSE(st.check(Keys{"q"}));
}

TEST_F(StoreStateTest, WatchersSeeCreateUpdateDeleteWithOldAndNewValues) {
  st.watch(7, "/w");
  st.set("/w", "new");
  st.set("/w", "newer");
  st.delete_key("/w");
  ASSERT_EQ(rec.watch_events.size(), 3u);
  // Captured from 1.13 after set("w", "new"): 01 + S"/w" + S"" + S"new".
  std::string created =
      cohort::testing::unhex("01 0200000000000000 2f77 0000000000000000 0300000000000000 6e6577");
  EXPECT_EQ(rec.watch_events[0].second, created);
  EXPECT_EQ(rec.watch_events[1].second[0], static_cast<char>(kWatchUpdated));
  EXPECT_NE(rec.watch_events[1].second.find("new"), std::string::npos);
  EXPECT_EQ(rec.watch_events[2].second[0], static_cast<char>(kWatchDeleted));
  st.drop_session(7);
  st.set("/w", "again");
  EXPECT_EQ(rec.watch_events.size(), 3u);
}

// Journal and listener write into one history: nobody may hear of a change before it is logged.
struct OrderJournal : StoreState::Journal, StoreListener {
  std::vector<std::string> history;
  int depth = 0;
  void on_change(std::string_view key, const std::string*) override {
    history.push_back(depth > 0 ? "batched " + std::string(key) : "logged " + std::string(key));
  }
  void on_reply(uint64_t, uint64_t, const std::string&) override {}
  void begin_batch() override { ++depth; }
  void end_batch() override {
    if (--depth == 0) history.push_back("logged batch");
  }
  void on_wait_satisfied(SessionId s) override { history.push_back("woke " + std::to_string(s)); }
  void on_watch_event(SessionId s, const WatchEvent&) override {
    history.push_back("notified " + std::to_string(s));
  }
};

TEST(StoreStateDurability, WaitersAndWatchersHearOfAChangeOnlyAfterItIsLogged) {
  OrderJournal j;
  StoreState st(&j, 0);
  st.set_journal(&j);
  st.watch(1, "k");
  std::vector<std::string_view> keys = {"k"};
  ASSERT_EQ(st.wait(2, keys), StoreState::WaitResult::kParked);
  st.set("k", "v");
  EXPECT_EQ(j.history, (std::vector<std::string>{"logged k", "notified 1", "woke 2"}));

  // In a batch (a MULTI_SET, a tagged write): after the whole batch is logged.
  j.history.clear();
  std::vector<std::string_view> later = {"n"};
  ASSERT_EQ(st.wait(2, later), StoreState::WaitResult::kParked);
  st.begin_batch();
  st.set("other", "x");
  st.set("k", "v2");
  st.append("n", "w");
  st.end_batch();
  EXPECT_EQ(j.history, (std::vector<std::string>{"batched other", "batched k", "batched n",
                                                 "logged batch", "notified 1", "woke 2"}));
}

// ---- shared waits (a relay link's channels, docs/RELAY.md §2) -------------------------------

class SharedWaitTest : public StoreStateTest {};

TEST_F(SharedWaitTest, OneKeyWaitsOfOneScopeShareOneParkedWaitAndAreWokenTogether) {
  const Keys go{"go"};
  EXPECT_EQ(st.wait(1, go, /*share_scope=*/7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.wait(2, go, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.wait(3, go, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.parked_waits(), 1u);
  EXPECT_EQ(st.sharing_waits(), 3u);
  st.set("go", "1");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2, 3}));
  EXPECT_EQ(st.parked_waits(), 0u);
  EXPECT_EQ(st.sharing_waits(), 0u);
}

TEST_F(SharedWaitTest, OtherScopesKeysAndMultiKeyWaitsAreNotShared) {
  EXPECT_EQ(st.wait(1, Keys{"go"}, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.wait(2, Keys{"go"}, 8), StoreState::WaitResult::kParked);  // another link
  EXPECT_EQ(st.wait(3, Keys{"go"}, 0), StoreState::WaitResult::kParked);  // a direct client
  EXPECT_EQ(st.wait(4, Keys{"other"}, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.wait(5, Keys{"go", "x"}, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(st.parked_waits(), 5u);
  st.set("go", "1");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2, 3}));
}

TEST_F(SharedWaitTest, PresentKeyIsReadyWithoutParking) {
  st.set("go", "1");
  EXPECT_EQ(st.wait(1, Keys{"go"}, 7), StoreState::WaitResult::kReady);
  EXPECT_EQ(st.parked_waits(), 0u);
}

TEST_F(SharedWaitTest, CancelledMemberIsNotWokenAndTheLastOneOutCancelsTheWait) {
  st.wait(1, Keys{"go"}, 7);
  st.wait(2, Keys{"go"}, 7);
  EXPECT_TRUE(st.cancel_wait(1));
  EXPECT_FALSE(st.cancel_wait(1));
  EXPECT_EQ(st.parked_waits(), 1u);
  st.drop_session(2);
  EXPECT_EQ(st.parked_waits(), 0u);
  st.set("go", "1");
  EXPECT_TRUE(rec.woken.empty());
  // A new wait on the key after the last member left parks afresh.
  EXPECT_EQ(st.wait(3, Keys{"go2"}, 7), StoreState::WaitResult::kParked);
  st.set("go2", "1");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{3}));
}

TEST_F(SharedWaitTest, AQueuePushWakesOneMemberAndTheOthersStayParked) {
  // A blocking QUEUE_POP is a WAIT on the queue's key: one push feeds one pop.
  st.wait(1, Keys{"q"}, 7);
  st.wait(2, Keys{"q"}, 7);
  st.wait(3, Keys{"q"}, 0);
  st.queue_push("q", "a");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1}));
  st.queue_push("q", "b");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2}));
  st.queue_push("q", "c");
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2, 3}));
  EXPECT_EQ(st.parked_waits(), 0u);
  EXPECT_EQ(st.sharing_waits(), 0u);
}

TEST_F(SharedWaitTest, JoiningDoesNotCountAgainstMaxWaiters) {
  Recorder r;
  StoreState limited(&r, /*max_waiters=*/1);
  EXPECT_EQ(limited.wait(1, Keys{"go"}, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(limited.wait(2, Keys{"go"}, 7), StoreState::WaitResult::kParked);
  EXPECT_EQ(limited.wait(3, Keys{"other"}, 7), StoreState::WaitResult::kTooManyWaiters);
}

TEST_F(SharedWaitTest, WakesAreHeldInABatchLikeOthers) {
  st.wait(1, Keys{"go"}, 7);
  st.wait(2, Keys{"go"}, 7);
  st.begin_batch();
  st.set("go", "1");
  EXPECT_TRUE(rec.woken.empty());
  st.end_batch();
  EXPECT_EQ(rec.woken, (std::vector<SessionId>{1, 2}));
}

}  // namespace
}  // namespace cohort::rdzv

// PrefixStore: every key of every operation becomes "<prefix>/<key>" in the store below, as in
// PyTorch's PrefixStore; counts, timeouts and interrupts are the store's.
#include "cohort/rdzv/prefix_store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>

#include "cohort/rdzv/memory_store.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

std::vector<std::string> list(std::initializer_list<const char*> keys) {
  return {keys.begin(), keys.end()};
}

TEST(PrefixStore, EveryOperationUsesThePrefixedKey) {
  MemoryStore base(0ms);
  PrefixStore p("job/7", base);
  EXPECT_EQ(p.prefix(), "job/7");
  p.set("a", "1");
  EXPECT_EQ(base.get("job/7/a"), "1");
  EXPECT_EQ(p.get("a"), "1");
  EXPECT_EQ(p.add("n", 2), 2);
  EXPECT_EQ(base.get("job/7/n"), "2");
  EXPECT_EQ(p.compare_set("c", "", "x"), "x");
  EXPECT_EQ(base.get("job/7/c"), "x");
  p.append("log", "ab");
  EXPECT_EQ(base.get("job/7/log"), "ab");
  p.multi_set(list({"m1", "m2"}), list({"u", "v"}));
  EXPECT_EQ(base.multi_get(list({"job/7/m1", "job/7/m2"})), list({"u", "v"}));
  EXPECT_EQ(p.multi_get(list({"m2", "m1"})), list({"v", "u"}));
  EXPECT_TRUE(p.check(list({"a", "n"})));
  base.set("a", "unprefixed");
  EXPECT_EQ(p.get("a"), "1");
  EXPECT_FALSE(p.check(list({"b"})));
  EXPECT_NO_THROW(p.wait(list({"a", "c"}), 0ms));
  EXPECT_THROW(p.wait(list({"b"}), 0ms), StoreTimeoutError);
  EXPECT_TRUE(p.delete_key("a"));
  EXPECT_FALSE(base.check(list({"job/7/a"})));
  EXPECT_EQ(base.get("a"), "unprefixed");
}

TEST(PrefixStore, CountsTimeoutsAndNamesAreTheStoresBelow) {
  MemoryStore base(3s);
  PrefixStore p("x", base);
  base.set("outside", "1");
  p.set("inside", "1");
  EXPECT_EQ(p.num_keys(), 2);  // the whole store's, as PyTorch's PrefixStore counts
  EXPECT_EQ(p.timeout(), 3s);
  p.set_timeout(4s);
  EXPECT_EQ(base.timeout(), 4s);
  EXPECT_EQ(p.describe(), "x/ on memory");
  PrefixStore nested("y", p);
  nested.set("k", "v");
  EXPECT_EQ(base.get("x/y/k"), "v");
  EXPECT_EQ(nested.describe(), "y/ on x/ on memory");
}

TEST(PrefixStore, ExpiringKeysOnlyWhereTheStoreBelowHasThem) {
  MemoryStore base(0ms);
  PrefixStore p("x", base);
  EXPECT_FALSE(p.supports_ttl());
  try {
    p.set_with_ttl("alive", "1", 5s);
    FAIL() << "no error";
  } catch (const StoreError& e) {
    EXPECT_EQ(e.key(), "x/alive");  // the key the store below was asked for
  }
}

TEST(PrefixStore, AnInterruptReachesTheStoreBelow) {
  MemoryStore base(1h);
  PrefixStore p("x", base);
  std::atomic<bool> failed{false};
  std::thread waiter([&] {
    try {
      base.wait(list({"never"}), 1h);
    } catch (const StoreError&) {
      failed = true;
    }
  });
  while (!failed) p.interrupt();
  waiter.join();
  EXPECT_TRUE(failed);
}

TEST(PrefixStore, ASharedStoreBelowLivesAsLongAsTheView) {
  auto base = std::make_shared<MemoryStore>(0ms);
  std::weak_ptr<MemoryStore> watch = base;
  auto p = std::make_unique<PrefixStore>("x", base);
  base.reset();
  p->set("k", "v");
  EXPECT_EQ(p->get("k"), "v");
  EXPECT_FALSE(watch.expired());
  p.reset();
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace cohort

// Store's defaults for its optional operations, on a backend that has only the required ones.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "cohort/rdzv/memory_store.h"
#include "cohort/rdzv/store.h"

namespace cohort {
namespace {

// The required operations of a MemoryStore and nothing else: what a new backend starts from.
class CoreOnlyStore : public Store {
 public:
  void set(std::string_view k, std::string_view v) override { s_.set(k, v); }
  std::string get(std::string_view k) override { return s_.get(k); }
  int64_t add(std::string_view k, int64_t d) override { return s_.add(k, d); }
  std::string compare_set(std::string_view k, std::string_view e, std::string_view d) override {
    return s_.compare_set(k, e, d);
  }
  bool check(std::span<const std::string> keys) override { return s_.check(keys); }
  using Store::wait;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds t) override {
    s_.wait(keys, t);
  }
  bool delete_key(std::string_view k) override { return s_.delete_key(k); }
  std::chrono::milliseconds timeout() const override { return s_.timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { s_.set_timeout(t); }
  std::string describe() const override { return "core-only"; }

 private:
  MemoryStore s_;
};

TEST(StoreDefaults, MultiGetAndMultiSetWorkKeyByKey) {
  CoreOnlyStore s;
  const std::vector<std::string> keys{"a", "b", "c"};
  s.multi_set(keys, std::vector<std::string>{"1", "2", "3"});
  EXPECT_EQ(s.multi_get(keys), (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_THROW(s.multi_set(keys, std::vector<std::string>{"1"}), StoreError);
  s.set_timeout(std::chrono::milliseconds(50));
  const std::vector<std::string> missing{"a", "never"};
  EXPECT_THROW(s.multi_get(missing), StoreTimeoutError);
}

TEST(StoreDefaults, AppendCreatesExtendsAndLosesNothingUnderConcurrentWriters) {
  CoreOnlyStore s;
  s.append("log", "x");
  s.append("log", "yz");
  EXPECT_EQ(s.get("log"), "xyz");
  s.set("empty", "");
  s.append("empty", "q");
  EXPECT_EQ(s.get("empty"), "q");

  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&s, t] {
      for (int i = 0; i < kEach; ++i)
        s.append("shared", std::string(1, static_cast<char>('a' + t)));
    });
  }
  for (auto& w : writers) w.join();
  const std::string all = s.get("shared");
  ASSERT_EQ(all.size(), static_cast<size_t>(kThreads * kEach));
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(std::count(all.begin(), all.end(), static_cast<char>('a' + t)), kEach);
}

TEST(StoreDefaults, CountingKeysNeedsTheBackend) {
  CoreOnlyStore s;
  EXPECT_THROW(s.num_keys(), StoreError);
}

}  // namespace
}  // namespace cohort

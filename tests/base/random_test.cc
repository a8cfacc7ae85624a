// Random tags and ids: the promised alphabet and length, and not the same twice.
#include "cohort/base/random.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>
#include <vector>

namespace cohort {
namespace {

TEST(Random, TagsAreLowerCaseLettersAndDigitsOfTheLengthAsked) {
  EXPECT_EQ(random_tag(0), "");
  std::set<char> seen;
  for (int i = 0; i < 200; ++i) {
    const std::string t = random_tag(8);
    ASSERT_EQ(t.size(), 8u);
    for (char c : t) {
      EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) << t;
      seen.insert(c);
    }
  }
  EXPECT_EQ(seen.size(), 36u);  // every character of the alphabet turns up in 1600 draws
}

TEST(Random, TagsAndIdsFromManyThreadsDoNotRepeat) {
  std::vector<std::vector<uint64_t>> ids(4);
  std::vector<std::thread> threads;
  for (auto& mine : ids)
    threads.emplace_back([&mine] {
      for (int i = 0; i < 1000; ++i) mine.push_back(random_u64());
    });
  for (auto& t : threads) t.join();
  std::set<uint64_t> all;
  for (const auto& mine : ids) all.insert(mine.begin(), mine.end());
  EXPECT_EQ(all.size(), 4000u);
  std::set<std::string> tags;
  for (int i = 0; i < 1000; ++i) tags.insert(random_tag(12));
  EXPECT_EQ(tags.size(), 1000u);
}

}  // namespace
}  // namespace cohort

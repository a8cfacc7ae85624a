// The lobby's records (rdzv/lobby.h): who waits in which run, what counts as fresh, what a hostile
// writer's lines do, and how a long value is cut.
#include "rdzv/lobby.h"

#include <gtest/gtest.h>

namespace cohort::launch::lobby {
namespace {

Waiting node(const std::string& run, const std::string& id, double since, double at) {
  return Waiting{run, id, "host-" + id, "train.py", "2:2", since, at};
}

TEST(Lobby, TheOtherRunsWaitingAreFoundOneNodeEach) {
  const std::string value =
      encode(node("job-a", "n1", 100, 103)) + encode(node("job-b", "n2", 101, 103)) +
      encode(node("job-b", "n3", 99, 102)) + encode(node("job-c", "n4", 50, 60));
  auto fresh_nodes = fresh(value, 104);
  EXPECT_EQ(fresh_nodes.size(), 3u);  // n4 wrote 44 s ago: no longer waiting
  auto others = other_runs(fresh_nodes, "job-a");
  ASSERT_EQ(others.size(), 1u);
  EXPECT_EQ(others[0].run_id, "job-b");
  EXPECT_EQ(others[0].node, "n3");  // the one waiting longest
  EXPECT_EQ(others[0].host, "host-n3");
  EXPECT_TRUE(other_runs(fresh_nodes, "job-b").size() == 1);
}

TEST(Lobby, ANodesLatestLineCounts) {
  const std::string value =
      encode(node("job-a", "n1", 100, 101)) + encode(node("job-a", "n1", 100, 110));
  auto f = fresh(value, 112);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].at, 110);
}

TEST(Lobby, LinesThatDoNotParseAreSkipped) {
  const std::string value = "{garbage\n" + std::string(5000, 'x') + "\n" +
                            R"({"run": 3, "node": "n"})" + "\n" + encode(node("job-b", "n2", 1, 2));
  auto f = fresh(value, 3);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_EQ(f[0].run_id, "job-b");
}

TEST(Lobby, ALongValueIsCutToItsFreshLines) {
  std::string value;
  for (int i = 0; value.size() <= kTrimBytes; ++i) {
    std::string id = std::to_string(i);  // (not "n" + ...: GCC 12's -Wrestrict false positive)
    value += encode(node("old", id, 1, 2));
  }
  EXPECT_FALSE(trimmed(encode(node("x", "y", 1, 2)), 3));  // small: left alone
  value += encode(node("job-new", "fresh", 1000, 1000));
  auto cut = trimmed(value, 1001);
  ASSERT_TRUE(cut);
  EXPECT_EQ(*cut, encode(node("job-new", "fresh", 1000, 1000)));
}

}  // namespace
}  // namespace cohort::launch::lobby

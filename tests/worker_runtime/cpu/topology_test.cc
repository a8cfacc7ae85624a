// The group's topology: shared memory, TCP or both (hierarchical), hosts and columns.
#include "cpu/topology.h"

#include <gtest/gtest.h>

namespace cohort::detail {
namespace {

TEST(Topology, ModesAndColumns) {
  auto t = Topology::build(2, {"a", "a", "b", "b"}, true);
  EXPECT_EQ(t.mode, Topology::Mode::kHierarchical);
  EXPECT_EQ(t.host, 1);
  EXPECT_EQ(t.local, 0);
  EXPECT_EQ(t.columns, 2);
  EXPECT_EQ(t.column(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(Topology::build(0, {"a", "a"}, true).mode, Topology::Mode::kShm);
  EXPECT_EQ(Topology::build(0, {"a", "a"}, false).mode, Topology::Mode::kTcp);
  EXPECT_EQ(Topology::build(0, {"a"}, true).mode, Topology::Mode::kSingle);
  auto u = Topology::build(1, {"a", "b", "a"}, true);
  EXPECT_EQ(u.hosts, (std::vector<std::vector<int>>{{0, 2}, {1}}));
  EXPECT_EQ(u.columns, 1);
}

}  // namespace
}  // namespace cohort::detail

// A round's records: NodeInfo in the store, the job-wide settings every node must share, and the
// ranks each node derives from the round's members.
#include "rdzv/round_types.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

NodeInfo node(int rank, int nproc, std::map<std::string, std::string> settings = {}) {
  NodeInfo n;
  n.id = "host" + std::to_string(rank) + ":42:abc";
  n.node_rank = rank;
  n.nproc = nproc;
  n.host = "host" + std::to_string(rank);
  n.settings = std::move(settings);
  return n;
}

TEST(RoundTypes, ANodeRecordSurvivesTheTripThroughTheStore) {
  NodeInfo n = node(2, 4, {{"--max-restarts", "3"}, {"--nproc-per-node", "4"}});
  n.pid = 4242;
  n.addr = "10.0.0.2";
  n.store_port = 29501;
  n.endpoint_store = true;
  const NodeInfo b = node_info_from_json(to_json(n));
  EXPECT_EQ(b.id, n.id);
  EXPECT_EQ(b.node_rank, 2);
  EXPECT_EQ(b.nproc, 4);
  EXPECT_EQ(b.host, "host2");
  EXPECT_EQ(b.pid, 4242);
  EXPECT_EQ(b.addr, "10.0.0.2");
  EXPECT_EQ(b.store_port, 29501);
  EXPECT_TRUE(b.endpoint_store);
  EXPECT_EQ(b.settings, n.settings);
  // An older agent's record, without the optional fields, reads with their defaults.
  const NodeInfo old = node_info_from_json(R"({"node_rank": 1, "nproc": 2})");
  EXPECT_EQ(old.nproc, 2);
  EXPECT_FALSE(old.endpoint_store);
  EXPECT_TRUE(old.settings.empty());
}

TEST(RoundTypes, AMalformedNodeRecordIsAProtocolErrorQuotingIt) {
  for (const char* bad :
       {"not json", R"({"nproc": 2})", R"({"node_rank": 0, "nproc": 0})",
        R"({"node_rank": 0, "nproc": 1, "settings": [1]})",
        // no whole int: refused, not converted (2.5 read as 2 before)
        R"({"node_rank": 0, "nproc": 2.5})", R"({"node_rank": 1e300, "nproc": 1})",
        R"({"node_rank": 0, "nproc": 1, "store_port": 4294967297})"}) {
    try {
      node_info_from_json(bad);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ProtocolError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("malformed node record in the store ('") +
                                           bad + "')"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(RoundTypes, RanksArePrefixSumsOfUnevenNodes) {
  const std::vector<NodeInfo> nodes{node(0, 2), node(1, 3), node(2, 1)};
  const RankAssignment a = assign_ranks(nodes, 1, 4, 2);
  EXPECT_EQ(a.round, 4);
  EXPECT_EQ(a.restart_count, 2);
  EXPECT_EQ(a.node_rank, 1);
  EXPECT_EQ(a.nnodes, 3);
  EXPECT_EQ(a.local_world_size, 3);
  EXPECT_EQ(a.world_size, 6);
  EXPECT_EQ(a.base_rank, 2);
  EXPECT_EQ(a.nodes.size(), 3u);
  EXPECT_EQ(assign_ranks(nodes, 0, 0, 0).base_rank, 0);
  EXPECT_EQ(assign_ranks(nodes, 2, 0, 0).base_rank, 5);
  EXPECT_EQ(assign_ranks(nodes, 2, 0, 0).local_world_size, 1);
}

TEST(RoundTypes, NodesThatDisagreeOnASettingAreRefusedNamingBothValues) {
  EXPECT_NO_THROW(check_same_settings({}));
  EXPECT_NO_THROW(check_same_settings(
      {node(0, 1, {{"--max-restarts", "3"}}), node(1, 2, {{"--max-restarts", "3"}})}));
  try {
    check_same_settings({node(0, 1, {{"--max-restarts", "3"}}),
                         node(1, 1, {{"--max-restarts", "3"}}),
                         node(2, 1, {{"--max-restarts", "5"}})});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the nodes of this job disagree on --max-restarts: node 0 (host0) has 3, node 2 "
              "(host2) has 5; start every node with the same value");
  }
  try {
    check_same_settings({node(0, 1, {{"--rdzv-conf", "join_timeout=5"}}), node(1, 1)});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("node 1 (host1) has (unset)"), std::string::npos)
        << e.what();
  }
  // A setting only a later node names is a disagreement too.
  try {
    check_same_settings({node(0, 1), node(1, 1, {{"--rdzv-conf", "join_timeout=5"}})});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the nodes of this job disagree on --rdzv-conf: node 0 (host0) has (unset), node 1 "
              "(host1) has join_timeout=5; start every node with the same value");
  }
}

}  // namespace
}  // namespace cohort::launch

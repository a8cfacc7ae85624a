// Every restart heals (issue 25) across hosts: the gloo DDP job of heal_torch_test.cc on two
// network-namespace nodes (scripts/cluster/netns_up.sh, prefix "chl", 10.83.0.0/24), one worker
// each, restarted COHORT_HEAL_RESTARTS times, once per PyTorch generation: a static job (node 0
// hosts the agents' store and each round's workers' store) and a c10d-elastic one (the endpoint's
// store started by node 1's agent). Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include "../common/netns_hosts.h"
#include "heal_fixture.h"

namespace cohort::testing {
namespace {

const char* const kNetEnv =
    "COHORT_NETNS_PREFIX=chl COHORT_NETNS_SUBNET=10.83.0 COHORT_NETNS_NODES=2";

std::vector<std::string> on_node(int node) {
  return {"ip", "netns", "exec", "chl-n" + std::to_string(node)};
}

class HealNetnsTest : public HealJobTest {
 protected:
  static void SetUpTestSuite() { ready_ = netns_hosts_up(kNetEnv); }
  static void TearDownTestSuite() {
    if (ready_) netns_hosts_down(kNetEnv);
  }
  void SetUp() override {
    if (::geteuid() != 0 || !ready_) GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
    HealJobTest::SetUp();
  }
  // Starts node `node`'s agent (1 worker) with `flags`.
  void agent(int node, std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--nproc-per-node", "1"});
    start("node" + std::to_string(node), flags, 1, on_node(node), {"GLOO_SOCKET_IFNAME=eth0"});
  }

  static inline bool ready_ = false;
};

TEST_F(HealNetnsTest, TwoStaticNodesHealEveryRestart) {
  for (int node : {1, 2}) {
    agent(node, {"--nnodes", "2", "--node-rank", std::to_string(node - 1), "--master-addr",
                 "10.83.0.1", "--master-port", "29520"});
  }
  expect_every_restart_healed(2);
}

TEST_F(HealNetnsTest, TwoElasticNodesHealEveryRestart) {
  for (int node : {1, 2}) {
    agent(node, {"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "10.83.0.1:29420",
                 "--rdzv-id", "heal", "--rdzv-conf", "last_call_timeout=0.5"});
  }
  expect_every_restart_healed(2);
}

}  // namespace
}  // namespace cohort::testing

// Every restart heals (issue 25) under the etcd rendezvous backend: the gloo DDP job of
// heal_torch_test.cc on two elastic nodes that meet through a real etcd (Debian's etcd-server on
// 127.0.0.1, tests/rendezvous/etcd/etcd_fixture.h), one worker each, restarted
// COHORT_HEAL_RESTARTS times, once per PyTorch generation. The agents' rendezvous is etcd's; each
// round's workers' store is hosted by that round's node 0 (rdzv/round_stores.h), so a key a
// worker wrote in one round must be absent in the next (heal_worker.py exits 9 otherwise).
#include <gtest/gtest.h>
#include <unistd.h>

#include "../rendezvous/etcd/etcd_fixture.h"
#include "heal_fixture.h"

namespace cohort::testing {
namespace {

class HealEtcdTest : public HealJobTest {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "etcd is not installed";
    HealJobTest::SetUp();
    etcd_ = std::make_unique<EtcdServer>();
  }
  void TearDown() override {
    HealJobTest::TearDown();  // the agents first, then the store they meet through
    etcd_.reset();
  }
  std::unique_ptr<EtcdServer> etcd_;
};

TEST_F(HealEtcdTest, TwoElasticNodesOnEtcdHealEveryRestart) {
  // cohortrun waits until etcd answers, so the agents start at once.
  const std::string endpoint = "127.0.0.1:" + std::to_string(etcd_->port());
  for (int node : {0, 1}) {
    start("node" + std::to_string(node),
          {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint",
           endpoint, "--rdzv-id", "heal", "--local-addr", "127.0.0.1", "--rdzv-conf",
           "last_call_timeout=0.5"},
          1);
  }
  expect_every_restart_healed(2);
}

}  // namespace
}  // namespace cohort::testing

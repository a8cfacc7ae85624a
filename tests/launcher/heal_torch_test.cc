// Every restart heals (issue 25): a gloo DDP job that rebuilds its process group in every attempt
// and loses a rank in all but the last, restarted COHORT_HEAL_RESTARTS times on one machine, with
// real PyTorch (once per generation): 2 and 4 workers under --standalone, the dying rank being 1
// or 0 (the rank that would host the store under a launcher that does not), two static nodes, and
// two elastic nodes meeting through a standalone cohortd. Each attempt's workers also check that
// nothing an earlier attempt wrote in the store is visible to them (heal_worker.py exits 9
// otherwise). Static and elastic nodes on network-namespace hosts are in heal_netns_test.cc.
#include <gtest/gtest.h>

#include "heal_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

class HealTest : public HealJobTest {
 protected:
  void TearDown() override {
    store_.reset();
    HealJobTest::TearDown();
  }
  std::unique_ptr<Subprocess> store_;  // a standalone cohortd
};

TEST_F(HealTest, TwoWorkersHealEveryRestart) {
  start("job", {"--standalone", "--nproc-per-node", "2"}, 1);
  expect_every_restart_healed(2);
}

TEST_F(HealTest, TwoWorkersHealWhenRankZeroDies) {
  start("job", {"--standalone", "--nproc-per-node", "2"}, 0);
  expect_every_restart_healed(2);
}

TEST_F(HealTest, FourWorkersHealEveryRestart) {
  start("job", {"--standalone", "--nproc-per-node", "4"}, 2);
  expect_every_restart_healed(4);
}

TEST_F(HealTest, TwoStaticNodesHealEveryRestart) {
  const std::string port = std::to_string(free_port());
  for (int node : {0, 1}) {
    start("node" + std::to_string(node),
          {"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node", "1",
           "--master-addr", "127.0.0.1", "--master-port", port},
          1);
  }
  expect_every_restart_healed(2);
}

TEST_F(HealTest, TwoElasticNodesOnAStandaloneCohortdHealEveryRestart) {
  store_ = std::make_unique<Subprocess>(
      std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"});
  auto addr = store_->read_line(10s);
  ASSERT_TRUE(addr) << "cohortd printed no address";
  for (int node : {0, 1}) {
    start("node" + std::to_string(node),
          {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
           *addr, "--rdzv-id", "heal", "--local-addr", "127.0.0.1", "--rdzv-conf",
           "last_call_timeout=0.5"},
          1);
  }
  expect_every_restart_healed(2);
}

}  // namespace
}  // namespace cohort::testing

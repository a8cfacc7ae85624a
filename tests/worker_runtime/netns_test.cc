// Two real hosts on one machine: network namespaces (scripts/cluster/netns_up.sh, prefix cwrt,
// subnet 10.79.0.0/24) with cohortd on node 1 and two workers per node. Each node's pair shares
// memory, the nodes talk TCP (the hierarchical mode): every collective against the serial
// reference, and a worker killed on node 2 named by everyone. Skipped unless root with iproute2.
#include <sys/inotify.h>
#include <sys/stat.h>

#include <fstream>

#include <gtest/gtest.h>

#include "process_harness.h"

namespace cohort::test {
namespace {

using Clock = std::chrono::steady_clock;

const char* const kEnv =
    "COHORT_NETNS_PREFIX=cwrt COHORT_NETNS_SUBNET=10.79.0 COHORT_NETNS_NODES=2";

class TwoHosts : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || std::system("command -v ip >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "needs root and iproute2 for network namespaces";
    }
    const std::string up =
        std::string(kEnv) + " " + COHORT_SCRIPTS + "/cluster/netns_up.sh >/dev/null";
    ASSERT_EQ(std::system(up.c_str()), 0) << up;
    up_ = true;
    // cohortd on node 1, its port written to a file once it listens.
    const std::string port_file = dir_.path() + "/port";
    const int watch = ::inotify_init1(IN_CLOEXEC);
    ::inotify_add_watch(watch, dir_.path().c_str(), IN_MOVED_TO | IN_CLOSE_WRITE);
    store_ = spawn({"/usr/bin/env", "ip", "netns", "exec", "cwrt-n1", COHORT_COHORTD, "--host",
                    "10.79.0.1", "--port", "0", "--port-file", port_file},
                   {}, dir_.path(), "cohortd");
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while ((port_ = read_file(port_file)).empty() || port_.back() != '\n') {
      ASSERT_LT(Clock::now(), deadline) << "cohortd did not start: " << store_.stderr_text();
      pollfd p{watch, POLLIN, 0};
      if (::poll(&p, 1, 200) > 0) {
        char buf[4096];
        (void)::read(watch, buf, sizeof(buf));
      }
    }
    ::close(watch);
    port_.pop_back();
  }
  void TearDown() override {
    kill_all(workers_);
    if (store_.pid > 0 && !store_.reaped) {
      ::kill(store_.pid, SIGTERM);
      if (!wait_child(store_, Clock::now() + std::chrono::seconds(5))) {
        std::vector<Child> rest{store_};
        kill_all(rest);
      }
    }
    if (up_) {
      const std::string down =
          std::string(kEnv) + " " + COHORT_SCRIPTS + "/cluster/netns_down.sh >/dev/null";
      EXPECT_EQ(std::system(down.c_str()), 0);
    }
  }

  // Ranks 0,1 on node 1 and 2,3 on node 2.
  void start(const std::string& mode, const std::string& run_id,
             std::map<std::string, std::string> extra = {}) {
    for (int r = 0; r < 4; ++r) {
      std::map<std::string, std::string> env = extra;
      env["RANK"] = std::to_string(r);
      env["LOCAL_RANK"] = std::to_string(r % 2);
      env["WORLD_SIZE"] = "4";
      env["LOCAL_WORLD_SIZE"] = "2";
      env["GROUP_RANK"] = std::to_string(r / 2);
      env["MASTER_ADDR"] = "10.79.0.1";
      env["MASTER_PORT"] = port_;
      env["TORCHELASTIC_RUN_ID"] = run_id;
      env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
      env["COHORT_TIMEOUT_S"] = "60";
      const std::string ns = r < 2 ? "cwrt-n1" : "cwrt-n2";
      workers_.push_back(
          spawn({"/usr/bin/env", "ip", "netns", "exec", ns, COHORT_TEST_WORKER, mode}, env,
                dir_.path(), "rank" + std::to_string(r)));
    }
  }

  TempDir dir_;
  bool up_ = false;
  Child store_;
  std::string port_;
  std::vector<Child> workers_;
};

TEST_F(TwoHosts, EveryCollectiveMatchesTheSerialReference) {
  start("collectives", "rtnetns" + std::to_string(::getpid()), {{"COHORT_TEST_SLOT", "8192"}});
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  for (int r = 0; r < 4; ++r) {
    ASSERT_TRUE(wait_child(workers_[r], deadline)) << "rank " << r;
    EXPECT_TRUE(workers_[r].exited_with(0)) << "rank " << r << ": " << workers_[r].stderr_text();
    EXPECT_NE(workers_[r].stdout_text().find("OK rank"), std::string::npos);
  }
}

// Under cohortrun, each node's workers reach the store through their node's relay
// (docs/RELAY.md) and present the job's token through it (the relay holds none): every
// collective still matches, TCP between the hosts included.
TEST_F(TwoHosts, CohortrunNodesThroughRelaysWithATokenMatchTheSerialReference) {
  const std::string token = dir_.path() + "/token";
  {
    std::ofstream(token) << "relay-netns-token-0123456789abcdef\n";
    ::chmod(token.c_str(), 0600);
  }
  for (int node = 1; node <= 2; ++node) {  // in workers_, so that TearDown stops them
    workers_.push_back(spawn({"/usr/bin/env",
                              "ip",
                              "netns",
                              "exec",
                              "cwrt-n" + std::to_string(node),
                              COHORT_COHORTRUN,
                              "--nnodes",
                              "2",
                              "--node-rank",
                              std::to_string(node - 1),
                              "--master-addr",
                              "10.79.0.1",
                              "--master-port",
                              "29523",
                              "--nproc-per-node",
                              "2",
                              "--store-relay",
                              "on",
                              "--auth-token-file",
                              token,
                              "--no-python",
                              COHORT_TEST_WORKER,
                              "collectives"},
                             {{"COHORT_TEST_SLOT", "8192"}, {"COHORT_LOG_LEVEL", "info"}},
                             dir_.path(), "node" + std::to_string(node)));
  }
  const auto deadline = Clock::now() + std::chrono::seconds(180);
  std::string out, err;
  for (auto& a : workers_) {
    ASSERT_TRUE(wait_child(a, deadline)) << a.stderr_text();
    EXPECT_TRUE(a.exited_with(0)) << a.stderr_text();
    out += a.stdout_text();
    err += a.stderr_text();
  }
  size_t oks = 0;
  for (size_t at = out.find("OK rank"); at != std::string::npos; at = out.find("OK rank", at + 1))
    ++oks;
  EXPECT_EQ(oks, 4u) << out;
  size_t relayed = 0;
  for (size_t at = err.find("through this node's relay"); at != std::string::npos;
       at = err.find("through this node's relay", at + 1))
    ++relayed;
  EXPECT_EQ(relayed, 2u) << err;
}

TEST_F(TwoHosts, WorkerKilledOnOneHostIsNamedOnBoth) {
  start("kill", "rtnetnskill" + std::to_string(::getpid()),
        {{"COHORT_TEST_VICTIM", "3"}, {"COHORT_TEST_ITER", "3"}});
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (int r = 0; r < 4; ++r) ASSERT_TRUE(wait_child(workers_[r], deadline)) << "rank " << r;
  // `ip netns exec` execs the worker, so the status is the worker's own.
  EXPECT_TRUE(workers_[3].killed_by(SIGKILL)) << workers_[3].status;
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(workers_[r].exited_with(3)) << "rank " << r << ": " << workers_[r].stderr_text();
    int blamed = -1;
    long long ms = -1;
    ASSERT_EQ(std::sscanf(workers_[r].stdout_text().c_str(), "BLAMED %d %lld", &blamed, &ms), 2)
        << workers_[r].stdout_text();
    EXPECT_EQ(blamed, 3) << "rank " << r << ": " << workers_[r].stderr_text();
    EXPECT_LT(ms, 10000);
  }
}

}  // namespace
}  // namespace cohort::test

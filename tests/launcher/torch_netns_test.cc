// Real PyTorch jobs (gloo) under cohortrun on separate network hosts, once per PyTorch
// generation: four network namespaces (scripts/cluster/netns_up.sh, prefix "ctn", 10.79.0.0/24,
// with the root-namespace guard route), nodes 1-3 for agents, node 4 for the store.
//   - static, 2 nodes: the DDP feature script (no_sync, all_gather_object, monitored_barrier...);
//   - static, 2 nodes: a rank that stalls while the other waits, named on both hosts (hangs);
//   - c10d-elastic, 3 nodes through a cohortd on node 4: a node is killed mid-run (the survivors
//     restart as 2 nodes), then comes back (the next round has all 3 again), and every agent ends
//     0.
// Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "../common/netns_hosts.h"
#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const char* const kNetEnv =
    "COHORT_NETNS_PREFIX=ctn COHORT_NETNS_SUBNET=10.79.0 COHORT_NETNS_NODES=4";
const std::string kInterop = COHORT_SOURCE_DIR "/tests/interop/";

std::vector<std::string> on_node(int node, std::vector<std::string> argv) {
  argv.insert(argv.begin(), {"ip", "netns", "exec", "ctn-n" + std::to_string(node)});
  return argv;
}

class TorchNetnsTest : public LauncherTest {
 protected:
  static void SetUpTestSuite() { ready_ = netns_hosts_up(kNetEnv); }
  static void TearDownTestSuite() {
    if (ready_) netns_hosts_down(kNetEnv);
  }
  void SetUp() override {
    if (::geteuid() != 0 || !ready_) GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
    COHORT_REQUIRE_TORCH();
    LauncherTest::SetUp();
    marks_ = dir_ + "/marks";
    std::filesystem::create_directories(marks_);
  }
  void TearDown() override {
    for (auto& a : agents_) a.reset();
    store_.reset();
    LauncherTest::TearDown();
  }

  Subprocess* agent(int node, std::vector<std::string> flags, const std::string& script,
                    std::vector<std::string> env = {}) {
    std::vector<std::string> argv{COHORTRUN_BIN, "--nproc-per-node", "1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(script);
    env.push_back("PYTHON_EXEC=" + torch_python());
    env.push_back("GLOO_SOCKET_IFNAME=eth0");
    env.push_back("MARK_DIR=" + marks_);
    agents_.push_back(std::make_unique<Subprocess>(on_node(node, argv), env));
    return agents_.back().get();
  }
  bool marked(int rank, int restart, const std::string& run = "torchjob") {
    return exists(marks_ + "/" + run + "." + std::to_string(rank) + "." + std::to_string(restart));
  }
  static int finish(Subprocess* a, std::chrono::milliseconds timeout = 180s) {
    auto st = a->wait(timeout);
    if (!st) return -1;
    return WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
  }

  static inline bool ready_ = false;
  std::string marks_;
  std::unique_ptr<Subprocess> store_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
};

TEST_F(TorchNetnsTest, TwoStaticNodesRunTheDdpFeatureScript) {
  std::vector<Subprocess*> a;
  for (int node : {1, 2}) {
    a.push_back(agent(node,
                      {"--nnodes", "2", "--node-rank", std::to_string(node - 1), "--master-addr",
                       "10.79.0.1", "--master-port", "29510"},
                      kInterop + "ddp_features.py"));
  }
  std::string out;
  for (auto* p : a) {
    EXPECT_EQ(finish(p), 0) << p->read_all_stderr(1s);
    out += p->read_all_stdout(1s);
  }
  EXPECT_EQ(count_of(out, ": ddp ok"), 2u) << out;
}

TEST_F(TorchNetnsTest, AHangIsNamedOnEveryHostWithTheCulpritOfTheOtherHost) {
  // Rank 1 (host 2) stalls in Python while rank 0 (host 1) waits in the allreduce: each agent asks
  // its own worker, the answers meet in the store, and both summaries name rank 1 with its line.
  std::vector<Subprocess*> a;
  for (int node : {1, 2}) {
    a.push_back(agent(node,
                      {"--nnodes", "2", "--node-rank", std::to_string(node - 1), "--master-addr",
                       "10.79.0.1", "--master-port", "29511", "--worker-hang-timeout", "3"},
                      kInterop + "hang_scenarios.py", {"HANG_SCENARIO=stall"}));
  }
  for (auto* p : a) {
    EXPECT_EQ(finish(p), 1);
    const std::string err = p->read_all_stderr(1s);
    const auto root = err.find("Root Cause");
    ASSERT_NE(root, std::string::npos) << err;
    const std::string summary = err.substr(root);
    EXPECT_NE(summary.find("rank      : 1 (local_rank: 0)"), std::string::npos) << summary;
    EXPECT_NE(summary.find("reason    : hung: never entered "), std::string::npos) << summary;
    EXPECT_NE(summary.find("in stuck_in_data_loading"), std::string::npos) << summary;
    EXPECT_NE(summary.find("waiting   : rank 0 ("), std::string::npos) << summary;
    EXPECT_NE(err.find("<NO_OTHER_FAILURES>"), std::string::npos) << err;
  }
}

TEST_F(TorchNetnsTest, AnElasticJobSurvivesANodeLossAndTakesTheNodeBack) {
  store_ = std::make_unique<Subprocess>(
      on_node(4, {COHORTD_BIN, "--host", "10.79.0.4", "--port", "29400"}));
  ASSERT_TRUE(store_->read_line(10s)) << "cohortd did not start";
  const std::vector<std::string> flags{
      "--nnodes",        "2:3",
      "--rdzv-backend",  "c10d",
      "--rdzv-endpoint", "10.79.0.4:29400",
      "--rdzv-id",       "torchjob",
      "--max-restarts",  "3",
      "--rdzv-conf",     "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3"};
  // Long enough (200 allreduces, 50 ms apart) for the loss and the return to happen mid-run.
  const std::vector<std::string> env{"STEPS=200"};
  Subprocess* a1 = agent(1, flags, kInterop + "steps_worker.py", env);
  Subprocess* a2 = agent(2, flags, kInterop + "steps_worker.py", env);
  Subprocess* a3 = agent(3, flags, kInterop + "steps_worker.py", env);
  ASSERT_TRUE(wait_for([&] { return marked(0, 0) && marked(1, 0) && marked(2, 0); }, 120s))
      << a1->read_all_stderr(1s);

  a3->signal(SIGKILL);  // the node is gone, its worker with it (parent-death signal)
  ASSERT_TRUE(wait_for([&] { return marked(0, 1) && marked(1, 1); }, 60s))
      << a1->read_all_stderr(1s);
  EXPECT_EQ(finish(a3, 10s), 128 + SIGKILL);

  // The node comes back: the survivors make room for it in a new round (no restart spent).
  std::filesystem::remove(marks_ + "/torchjob.0.1");
  Subprocess* back = agent(3, flags, kInterop + "steps_worker.py", env);
  ASSERT_TRUE(wait_for([&] { return marked(2, 1) && marked(0, 1); }, 90s))
      << a1->read_all_stderr(1s);
  std::string out;
  for (auto* p : {a1, a2, back}) {
    EXPECT_EQ(finish(p), 0) << p->read_all_stderr(1s);
    out += p->read_all_stdout(1s);
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(out.find("rank " + std::to_string(r) + "/3: steps ok after restart 1"),
              std::string::npos)
        << out;
  }
}

TEST_F(TorchNetnsTest, TwoHostsStartedTheUsualWayMeetWithoutARunId) {
  // No --rdzv-id, a per-node --output_dir, and the script named by its full path on one host and
  // as ./gloo_worker.py from its folder on the other: one job (they waited apart for 600 s).
  store_ = std::make_unique<Subprocess>(
      on_node(4, {COHORTD_BIN, "--host", "10.79.0.4", "--port", "29401"}));
  ASSERT_TRUE(store_->read_line(10s)) << "cohortd did not start";
  auto node = [&](int n, const std::string& folder, const std::string& script) {
    std::string cmd = "cd '" + folder + "' && exec '" + COHORTRUN_BIN +
                      "' --nproc-per-node 1 --nnodes 2 --rdzv-backend c10d --rdzv-endpoint "
                      "10.79.0.4:29401 " +
                      script + " --output_dir /tmp/node" + std::to_string(n);
    agents_.push_back(std::make_unique<Subprocess>(
        on_node(n, {"/bin/sh", "-c", cmd}),
        std::vector<std::string>{"PYTHON_EXEC=" + torch_python(), "GLOO_SOCKET_IFNAME=eth0"}));
    return agents_.back().get();
  };
  Subprocess* a = node(1, "/", kInterop + "gloo_worker.py");
  Subprocess* b = node(2, kInterop, "./gloo_worker.py");
  std::string out;
  for (auto* p : {a, b}) {
    EXPECT_EQ(finish(p), 0) << p->read_all_stderr(1s);
    out += p->read_all_stdout(1s);
  }
  EXPECT_EQ(count_of(out, "/2: allreduce ok"), 2u) << out;
}

}  // namespace
}  // namespace cohort::testing

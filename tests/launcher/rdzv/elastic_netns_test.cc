// The elastic rendezvous on separate network hosts: four network namespaces on one machine
// (scripts/cluster/netns_up.sh, prefix "cel", 10.78.0.0/24, with the root-namespace guard route):
// nodes 1-3 run cohortrun agents, node 4 runs the store (cohortd or a real etcd), outside every
// agent's failure domain. Each scenario runs with both backends. Needs root (CI runs as root).
#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <set>

#include "../launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const char* const kNetEnv =
    "COHORT_NETNS_PREFIX=cel COHORT_NETNS_SUBNET=10.78.0 COHORT_NETNS_NODES=4";
const std::string kStoreHost = "10.78.0.4";
const std::string kFastConf =
    "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3,join_timeout=60";

std::string ns(int node) {
  return "cel-n" + std::to_string(node);
}

class ElasticNetnsTest : public LauncherTest, public ::testing::WithParamInterface<std::string> {
 protected:
  static void SetUpTestSuite() {
    if (::geteuid() != 0) return;
    std::string up =
        std::string(kNetEnv) + " " + COHORT_SOURCE_DIR + "/scripts/cluster/netns_up.sh >/dev/null";
    ready_ = std::system(up.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    if (!ready_) return;
    std::string down = std::string(kNetEnv) + " " + COHORT_SOURCE_DIR +
                       "/scripts/cluster/netns_down.sh >/dev/null";
    (void)std::system(down.c_str());
  }

  void SetUp() override {
    if (::geteuid() != 0 || !ready_) GTEST_SKIP() << "needs root and iproute2 (network namespaces)";
    LauncherTest::SetUp();
    if (GetParam() == "cohortd") {
      store_ = std::make_unique<Subprocess>(std::vector<std::string>{
          "ip", "netns", "exec", ns(4), COHORTD_BIN, "--host", kStoreHost, "--port", "29400"});
      ASSERT_TRUE(store_->read_line(10s)) << "cohortd did not start";
      endpoint_ = kStoreHost + ":29400";
    } else {
      if (::access("/usr/bin/etcd", X_OK) != 0) GTEST_SKIP() << "etcd is not installed";
      std::string c = "http://" + kStoreHost + ":2379", p = "http://" + kStoreHost + ":2380";
      store_ =
          std::make_unique<Subprocess>(std::vector<std::string>{"ip",
                                                                "netns",
                                                                "exec",
                                                                ns(4),
                                                                "/usr/bin/etcd",
                                                                "--name",
                                                                "e",
                                                                "--data-dir",
                                                                dir_ + "/etcd",
                                                                "--listen-client-urls",
                                                                c,
                                                                "--advertise-client-urls",
                                                                c,
                                                                "--listen-peer-urls",
                                                                p,
                                                                "--initial-advertise-peer-urls",
                                                                p,
                                                                "--initial-cluster",
                                                                "e=" + p,
                                                                "--heartbeat-interval",
                                                                "10",
                                                                "--election-timeout",
                                                                "100",
                                                                "--logger",
                                                                "zap",
                                                                "--log-outputs",
                                                                "stderr"});
      endpoint_ = kStoreHost + ":2379";  // cohortrun waits until etcd answers
    }
  }
  void TearDown() override {
    // Whatever a test left in the node namespaces (a partitioned agent) goes with its fixture.
    for (auto& a : agents_) a.reset();
    store_.reset();
    heal(3);
    LauncherTest::TearDown();
  }

  // An agent on network node `node`.
  Subprocess* start_agent(int node, const std::string& nnodes, const std::string& job,
                          std::vector<std::string> entry, int nproc = 1,
                          std::vector<std::string> env = {}) {
    std::vector<std::string> argv{"ip", "netns", "exec", ns(node), COHORTRUN_BIN, "--nnodes",
                                  nnodes, "--nproc-per-node", std::to_string(nproc),
                                  "--rdzv-backend", GetParam() == "cohortd" ? "c10d" : "etcd",
                                  "--rdzv-endpoint", endpoint_, "--rdzv-id", job, "--rdzv-conf",
                                  kFastConf, "--max-restarts", "2",
                                  // A node cut off from the store stops its workers after 3 s.
                                  "--store-loss-grace", "3"};
    argv.insert(argv.end(), entry.begin(), entry.end());
    env.push_back("PYTHON_EXEC=" COHORT_TORCH_PYTHON);
    env.push_back("GLOO_SOCKET_IFNAME=eth0");
    agents_.push_back(std::make_unique<Subprocess>(argv, env));
    return agents_.back().get();
  }
  std::vector<std::string> worker(std::vector<std::string> args) {
    std::vector<std::string> v{"--no-python", TEST_WORKER_BIN, "--out", dir_};
    v.insert(v.end(), args.begin(), args.end());
    return v;
  }
  // What a lost machine does to its processes: all of them die at once (SIGKILL).
  void kill_everything_on(int node) {
    std::string pids;
    Subprocess ps({"ip", "netns", "pids", ns(node)});
    while (auto line = ps.read_line(2s)) pids += *line + " ";
    ps.wait(5s);
    if (!pids.empty()) (void)std::system(("kill -9 " + pids + "2>/dev/null").c_str());
  }
  void partition(int node) {
    (void)std::system(("ip -n cel-sw link set p" + std::to_string(node) + " down").c_str());
  }
  void heal(int node) {
    (void)std::system(
        ("ip -n cel-sw link set p" + std::to_string(node) + " up 2>/dev/null").c_str());
  }
  std::map<int, std::map<std::string, std::string>> envs(int restart, int max_rank = 8) {
    std::map<int, std::map<std::string, std::string>> out;
    for (int r = 0; r < max_rank; ++r)
      if (exists(worker_file(r, restart, "env"))) out[r] = worker_env(r, restart);
    return out;
  }
  int finish(Subprocess* a, std::chrono::milliseconds timeout = 90s) {
    auto st = a->wait(timeout);
    if (!st) return -1;
    return WIFEXITED(*st) ? WEXITSTATUS(*st) : 128 + WTERMSIG(*st);
  }

  static inline bool ready_ = false;
  std::unique_ptr<Subprocess> store_;
  std::string endpoint_;
  std::vector<std::unique_ptr<Subprocess>> agents_;
};

TEST_P(ElasticNetnsTest, ThreeNodesTimesTwoWorkersRunAGlooAllreduceJob) {
  std::vector<Subprocess*> a;
  for (int n = 1; n <= 3; ++n)
    a.push_back(
        start_agent(n, "3", "gloo", {COHORT_SOURCE_DIR "/tests/interop/gloo_worker.py"}, 2));
  std::string out;
  for (auto* p : a) {
    EXPECT_EQ(finish(p, 240s), 0) << p->read_all_stderr(1s);
    out += p->read_all_stdout(1s);
  }
  for (int r = 0; r < 6; ++r)
    EXPECT_NE(out.find("rank " + std::to_string(r) + "/6: allreduce ok"), std::string::npos) << out;
}

TEST_P(ElasticNetnsTest, KilledAgentLeavesTwoSurvivorsThatFinishWithOneRestart) {
  std::vector<Subprocess*> a;
  for (int n = 1; n <= 3; ++n) a.push_back(start_agent(n, "2:3", "kill", worker({"--sleep", "4"})));
  ASSERT_TRUE(wait_for([&] { return envs(0).size() == 3; }, 60s));
  a[2]->signal(SIGKILL);
  ASSERT_TRUE(wait_for([&] { return envs(1).size() == 2; }, 30s));
  EXPECT_EQ(finish(a[0]), 0) << a[0]->read_all_stderr(1s);
  EXPECT_EQ(finish(a[1]), 0) << a[1]->read_all_stderr(1s);
  for (auto& [r, env] : envs(1)) {
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1") << "rank " << r;
  }
}

TEST_P(ElasticNetnsTest, PartitionedNodeIsDroppedWithinTheKeepAliveWindow) {
  std::vector<Subprocess*> a;
  for (int n = 1; n <= 3; ++n) a.push_back(start_agent(n, "2:3", "part", worker({"--sleep", "5"})));
  ASSERT_TRUE(wait_for([&] { return envs(0).size() == 3; }, 60s));
  partition(3);
  auto cut = std::chrono::steady_clock::now();
  ASSERT_TRUE(wait_for([&] { return envs(1).size() == 2; }, 30s));
  // keep_alive_interval x keep_alive_max_attempt = 1.5 s to notice (etcd: its 2 s lease), then
  // the last call (0.5 s) and the restart.
  EXPECT_LT(std::chrono::steady_clock::now() - cut, 6s);
  EXPECT_EQ(finish(a[0]), 0) << a[0]->read_all_stderr(1s);
  EXPECT_EQ(finish(a[1]), 0) << a[1]->read_all_stderr(1s);
  // The cut-off node gives up by itself, its workers stopped.
  int rc = finish(a[2], 60s);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "the partitioned agent did not stop";
}

TEST_P(ElasticNetnsTest, NodeStartingLateJoinsAtTheNextRound) {
  Subprocess* a1 = start_agent(1, "2:3", "late", worker({"--sleep", "3"}));
  Subprocess* a2 = start_agent(2, "2:3", "late", worker({"--sleep", "3"}));
  ASSERT_TRUE(wait_for([&] { return envs(0).size() == 2; }, 60s));
  Subprocess* a3 = start_agent(3, "2:3", "late", worker({"--sleep", "3"}));
  for (auto* p : {a1, a2, a3}) EXPECT_EQ(finish(p), 0) << p->read_all_stderr(1s);
  auto last = envs(0);
  ASSERT_EQ(last.size(), 3u);
  for (auto& [r, env] : last) {
    EXPECT_EQ(env["WORLD_SIZE"], "3") << "rank " << r;
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
  }
}

TEST_P(ElasticNetnsTest, CoLocatedJobsOnOneEndpointNeverMix) {
  std::string da = dir_ + "/a", db = dir_ + "/b";
  std::filesystem::create_directories(da);
  std::filesystem::create_directories(db);
  std::vector<Subprocess*> a;
  for (int n = 1; n <= 2; ++n) {
    a.push_back(start_agent(n, "2", "jobA", {"--no-python", TEST_WORKER_BIN, "--out", da}));
    a.push_back(start_agent(n, "2", "jobB", {"--no-python", TEST_WORKER_BIN, "--out", db}));
  }
  for (auto* p : a) EXPECT_EQ(finish(p), 0) << p->read_all_stderr(1s);
  for (const auto& [d, id] : {std::pair{da, "jobA"}, std::pair{db, "jobB"}}) {
    std::set<std::string> stores;
    for (int r = 0; r < 2; ++r) {
      std::ifstream f(d + "/" + std::to_string(r) + ".attempt0.env");
      std::map<std::string, std::string> env;
      std::string line;
      while (std::getline(f, line))
        env[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
      EXPECT_EQ(env["WORLD_SIZE"], "2");
      EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], id);
      stores.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]);
    }
    EXPECT_EQ(stores.size(), 1u);
  }
}

// The store an agent started on its own machine (the endpoint is node 1's address) dies with that
// machine: the survivors move it to the next node and carry on in a new round.
TEST_P(ElasticNetnsTest, AStoreWhoseMachineDiesIsTakenOverByASurvivor) {
  if (GetParam() != "cohortd") GTEST_SKIP() << "an etcd endpoint is never started by an agent";
  endpoint_ = "10.78.0.1:29400";  // node 1's agent starts the endpoint's cohortd
  std::vector<Subprocess*> a;
  for (int n = 1; n <= 3; ++n) a.push_back(start_agent(n, "2:3", "move", worker({"--sleep", "6"})));
  ASSERT_TRUE(wait_for([&] { return envs(0).size() == 3; }, 60s)) << a[0]->read_all_stderr(1s);
  // Node 1's machine is lost: everything running there dies at once, its cohortd too.
  const auto lost_at = std::chrono::steady_clock::now();
  kill_everything_on(1);
  ASSERT_TRUE(wait_for([&] { return envs(1).size() == 2; }, 60s)) << a[1]->read_all_stderr(1s);
  EXPECT_LT(std::chrono::steady_clock::now() - lost_at, 15s);
  EXPECT_EQ(finish(a[1]), 0) << a[1]->read_all_stderr(1s);
  EXPECT_EQ(finish(a[2]), 0) << a[2]->read_all_stderr(1s);
  for (auto& [r, env] : envs(1)) {
    EXPECT_EQ(env["WORLD_SIZE"], "2") << "rank " << r;
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "1") << "rank " << r;
  }
  const std::string err = a[1]->read_all_stderr(1s) + a[2]->read_all_stderr(1s);
  EXPECT_NE(err.find("the job moves it to node"), std::string::npos) << err;
  kill_everything_on(2);  // the moved store would linger 30 s after its last client
}

INSTANTIATE_TEST_SUITE_P(Backends, ElasticNetnsTest, ::testing::Values("cohortd", "etcd"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace cohort::testing

// cohortrun's elastic rendezvous on loopback: agents of one job meet through a standalone cohortd
// (or one of them hosts the store), rounds re-form when a node dies or arrives, co-located jobs
// stay apart. The same scenarios on separate network hosts are in elastic_netns_test.cc.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <regex>
#include <set>
#include <thread>

#include "../launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

// Fast keep-alives so that a lost node is noticed in 1.5 s; a short last call.
const std::string kFastConf =
    "last_call_timeout=0.5,keep_alive_interval=0.5,keep_alive_max_attempt=3";

class ElasticTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    store_ = std::make_unique<Subprocess>(
        std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"});
    auto line = store_->read_line(10s);
    ASSERT_TRUE(line);
    endpoint_ = *line;
  }

  std::vector<std::string> agent(const std::string& nnodes, const std::string& job,
                                 std::vector<std::string> worker_args,
                                 std::vector<std::string> extra = {},
                                 const std::string& conf = kFastConf) {
    // --local-addr 127.0.0.1: every "node" of these tests runs on this machine.
    std::vector<std::string> args{"--nnodes",       nnodes,     "--nproc-per-node", "2",
                                  "--rdzv-backend", "c10d",     "--rdzv-endpoint",  endpoint_,
                                  "--rdzv-id",      job,        "--rdzv-conf",      conf,
                                  "--local-addr",   "127.0.0.1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return cohortrun(args, test_worker(worker_args));
  }

  // Global ranks that wrote an env file for `restart`, with their WORLD_SIZE.
  std::map<int, std::string> ranks_of(int restart, int max_rank = 16) {
    std::map<int, std::string> out;
    for (int r = 0; r < max_rank; ++r)
      if (exists(worker_file(r, restart, "env"))) out[r] = worker_env(r, restart)["WORLD_SIZE"];
    return out;
  }

  std::unique_ptr<Subprocess> store_;
  std::string endpoint_;
};

TEST_F(ElasticTest, ThreeNodesFormOneRoundThroughAStandaloneStore) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(std::make_unique<Subprocess>(agent("3", "three", {})));
  for (auto& a : agents) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << a->read_all_stderr(1s);
  }
  auto ranks = ranks_of(0);
  ASSERT_EQ(ranks.size(), 6u);
  std::set<std::string> masters, group_ranks;
  for (auto& [r, ws] : ranks) {
    EXPECT_EQ(ws, "6");
    auto env = worker_env(r, 0);
    masters.insert(env["MASTER_ADDR"] + ":" + env["MASTER_PORT"]);
    group_ranks.insert(env["GROUP_RANK"]);
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "3");
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
  }
  EXPECT_EQ(masters.size(), 1u) << "every worker must use the same store";
  EXPECT_EQ(group_ranks, (std::set<std::string>{"0", "1", "2"}));
}

TEST_F(ElasticTest, SurvivorsOfAKilledAgentFormANewRoundAndFinish) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(std::make_unique<Subprocess>(
        agent("2:3", "kill", {"--sleep", "3"}, {"--max-restarts", "2"})));
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 6; }, 30s));
  agents[2]->signal(SIGKILL);
  auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(agents[2]->wait(5s));
  // The survivors' workers of the next round are running again within a few seconds.
  ASSERT_TRUE(wait_for([&] { return ranks_of(1).size() == 4; }, 20s));
  auto back_after = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(back_after, 10s);
  for (int i = 0; i < 2; ++i) {
    auto st = agents[i]->wait(60s);
    ASSERT_TRUE(st);
    std::string err = agents[i]->read_all_stderr(1s);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << err;
    // Whichever survivor noticed first ended the round; both say why.
    EXPECT_NE(err.find("lost: no keep-alive for 1.5 s"), std::string::npos) << err;
  }
  for (auto& [r, ws] : ranks_of(1)) {
    EXPECT_EQ(ws, "4");
    EXPECT_EQ(worker_env(r, 1)["TORCHELASTIC_RESTART_COUNT"], "1");  // counted once, job-wide
  }
}

TEST_F(ElasticTest, ALateNodeJoinsAtTheNextRoundWithoutSpendingARestart) {
  auto a0 = std::make_unique<Subprocess>(agent("2:3", "late", {"--sleep", "3"}));
  auto a1 = std::make_unique<Subprocess>(agent("2:3", "late", {"--sleep", "3"}));
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 4; }, 30s));
  auto a2 = std::make_unique<Subprocess>(agent("2:3", "late", {"--sleep", "3"}));
  for (auto* a : {a0.get(), a1.get(), a2.get()}) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st) << a->read_all_stderr(1s);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << a->read_all_stderr(1s);
  }
  // Restart count 0 throughout, and the last round had all three nodes.
  auto ranks = ranks_of(0);
  ASSERT_EQ(ranks.size(), 6u);
  for (auto& [r, ws] : ranks) {
    EXPECT_EQ(ws, "6") << "rank " << r;
    EXPECT_EQ(worker_env(r, 0)["TORCHELASTIC_RESTART_COUNT"], "0");
  }
  EXPECT_FALSE(exists(worker_file(0, 1, "env")));
}

TEST_F(ElasticTest, CoLocatedJobsWithDifferentIdsNeverMix) {
  std::string dir_a = dir_ + "/a", dir_b = dir_ + "/b";
  std::filesystem::create_directories(dir_a);
  std::filesystem::create_directories(dir_b);
  auto job = [&](const std::string& id, const std::string& out) {
    return cohortrun(
        {"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         endpoint_, "--rdzv-id", id, "--rdzv-conf", kFastConf, "--local-addr", "127.0.0.1"},
        {"--no-python", TEST_WORKER_BIN, "--out", out, "--sleep", "0.5"});
  };
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i) {
    agents.push_back(std::make_unique<Subprocess>(job("jobA", dir_a)));
    agents.push_back(std::make_unique<Subprocess>(job("jobB", dir_b)));
  }
  for (auto& a : agents) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << a->read_all_stderr(1s);
  }
  for (const auto& d : {dir_a, dir_b}) {
    std::set<std::string> ports;
    for (int r = 0; r < 2; ++r) {
      std::ifstream f(d + "/" + std::to_string(r) + ".attempt0.env");
      std::string line, ws, port, run;
      while (std::getline(f, line)) {
        if (line.rfind("WORLD_SIZE=", 0) == 0) ws = line.substr(11);
        if (line.rfind("MASTER_PORT=", 0) == 0) port = line.substr(12);
        if (line.rfind("TORCHELASTIC_RUN_ID=", 0) == 0) run = line.substr(20);
      }
      EXPECT_EQ(ws, "2");
      EXPECT_EQ(run, d == dir_a ? "jobA" : "jobB");
      ports.insert(port);
    }
    EXPECT_EQ(ports.size(), 1u);
  }
}

TEST_F(ElasticTest, AnAgentHostsTheStoreWhenNoDaemonServesTheEndpoint) {
  store_.reset();  // no cohortd: the endpoint is free on this machine
  endpoint_ = "127.0.0.1:" + std::to_string(free_port());
  auto a0 = std::make_unique<Subprocess>(agent("2", "hosted", {}));
  auto a1 = std::make_unique<Subprocess>(agent("2", "hosted", {}));
  for (auto* p : {a0.get(), a1.get()}) {
    auto st = p->wait(60s);
    ASSERT_TRUE(st) << "an agent still runs after 60 s:\n"
                    << a0->read_all_stderr(1s) << "\n----\n"
                    << a1->read_all_stderr(1s);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << p->read_all_stderr(1s);
  }
  EXPECT_EQ(ranks_of(0).size(), 4u);
}

TEST_F(ElasticTest, AJobOutlastsTheJobWhoseAgentStartedTheSharedEndpoint) {
  store_.reset();  // no cohortd: the first agent starts the endpoint's store
  endpoint_ = "127.0.0.1:" + std::to_string(free_port());
  std::string dir_a = dir_ + "/a", dir_b = dir_ + "/b";
  std::filesystem::create_directories(dir_a);
  std::filesystem::create_directories(dir_b);
  auto job = [&](const std::string& id, const std::string& nnodes, const std::string& out,
                 const std::string& sleep) {
    return std::make_unique<Subprocess>(cohortrun(
        {"--nnodes", nnodes, "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
         endpoint_, "--rdzv-id", id, "--rdzv-conf", kFastConf, "--local-addr", "127.0.0.1"},
        {"--no-python", TEST_WORKER_BIN, "--out", out, "--sleep", sleep}));
  };
  auto a = job("jobA", "1", dir_a, "0.5");
  ASSERT_TRUE(wait_for([&] { return exists(dir_a + "/0.attempt0.env"); }, 30s))
      << a->read_all_stderr(1s);
  auto b0 = job("jobB", "2", dir_b, "4");
  auto b1 = job("jobB", "2", dir_b, "4");
  ASSERT_TRUE(wait_for([&] { return exists(dir_b + "/1.attempt0.env"); }, 30s));
  // Job A ends while B runs: B's rendezvous store was never inside A's agent.
  auto st = a->wait(30s);
  ASSERT_TRUE(st);
  const std::string err_a = a->read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*st), 0) << err_a;
  for (auto* p : {b0.get(), b1.get()}) {
    auto sb = p->wait(60s);
    ASSERT_TRUE(sb);
    EXPECT_EQ(WEXITSTATUS(*sb), 0) << p->read_all_stderr(1s);
  }
  EXPECT_FALSE(exists(dir_b + "/0.attempt1.env"));  // B was not restarted either
}

TEST_F(ElasticTest, TheSurvivorFinishesWhenTheAgentThatStartedTheStoreIsKilled) {
  store_.reset();
  endpoint_ = "127.0.0.1:" + std::to_string(free_port());
  const std::vector<std::string> budget{"--max-restarts", "1"};
  auto a0 = std::make_unique<Subprocess>(agent("1:2", "host-killed", {"--sleep", "3"}, budget));
  ASSERT_TRUE(wait_for([&] { return !ranks_of(0).empty(); }, 30s));
  auto a1 = std::make_unique<Subprocess>(agent("1:2", "host-killed", {"--sleep", "3"}, budget));
  // The late node re-forms the group with both nodes (ranks 2 and 3 appear).
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 4; }, 30s)) << a1->read_all_stderr(1s);
  a0->signal(SIGKILL);  // the agent that started the endpoint's cohortd
  ASSERT_TRUE(a0->wait(5s));
  auto st = a1->wait(60s);
  ASSERT_TRUE(st) << a1->read_all_stderr(1s);
  const std::string err = a1->read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*st), 0) << err;
  EXPECT_NE(err.find("lost: no keep-alive"), std::string::npos) << err;
}

TEST(EndpointCohortd, ExitsOnlyOnceNoClientHasBeenConnectedForItsIdleTime) {
  Subprocess d({COHORTD_BIN, "--host", "127.0.0.1", "--port", "0", "--exit-when-idle", "0.5"});
  auto line = d.read_line(10s);
  ASSERT_TRUE(line);
  const int port = std::stoi(line->substr(line->rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  // Four idle periods with a client connected: still serving.
  EXPECT_FALSE(d.wait(2s)) << "cohortd left while a client was connected";
  ::close(fd);
  auto st = d.wait(10s);
  ASSERT_TRUE(st) << "cohortd did not exit once idle";
  EXPECT_EQ(WEXITSTATUS(*st), 0);
}

TEST_F(ElasticTest, TooFewNodesTimesOutWithTheReason) {
  auto r = run(agent("3", "alone", {}, {}, kFastConf + ",join_timeout=1"));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("fewer than 3 nodes joined"), std::string::npos) << r.err;
}

TEST_F(ElasticTest, UnreachableEndpointIsNamedWithTheSystemError) {
  endpoint_ = "127.0.0.1:1";  // is_host=0: do not try to serve it ourselves
  auto r = run(agent("2", "nowhere", {}, {}, kFastConf + ",join_timeout=0.5,is_host=0"));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Connection refused (errno 111)"), std::string::npos) << r.err;
}

// cohortd --data-dir restarted on the same port and directory after a SIGKILL.
class ElasticStoreCrashTest : public ElasticTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    port_ = free_port();
    endpoint_ = "127.0.0.1:" + std::to_string(port_);
    start_store();
  }
  void start_store() {
    store_ = std::make_unique<Subprocess>(
        std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port",
                                 std::to_string(port_), "--data-dir", dir_ + "/store"});
    ASSERT_TRUE(store_->read_line(10s));
  }
  void crash_and_restart_store() {
    store_->signal(SIGKILL);
    ASSERT_TRUE(store_->wait(5s));
    start_store();
  }
  int port_ = 0;
};

// Keep-alives slow enough to outlast the store's restart.
const std::string kPatientConf =
    "last_call_timeout=0.5,keep_alive_interval=1,keep_alive_max_attempt=5,is_host=0";

TEST_F(ElasticStoreCrashTest, RendezvousCompletesAcrossAStoreCrash) {
  auto a0 = std::make_unique<Subprocess>(agent("3", "crash1", {}, {}, kPatientConf));
  auto a1 = std::make_unique<Subprocess>(agent("3", "crash1", {}, {}, kPatientConf));
  // Two of three nodes are in the round's state when the store dies.
  ASSERT_TRUE(wait_for(
      [&] {
        std::ifstream f(dir_ + "/store/store.log", std::ios::binary);
        std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        return count_of(log, "participants") >= 2;
      },
      30s));
  crash_and_restart_store();
  auto a2 = std::make_unique<Subprocess>(agent("3", "crash1", {}, {}, kPatientConf));
  for (auto* a : {a0.get(), a1.get(), a2.get()}) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st) << a->read_all_stderr(1s);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << a->read_all_stderr(1s);
  }
  EXPECT_EQ(ranks_of(0).size(), 6u);
}

TEST_F(ElasticStoreCrashTest, TrainingCarriesOnAcrossAStoreCrash) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(
        std::make_unique<Subprocess>(agent("3", "crash2", {"--sleep", "4"}, {}, kPatientConf)));
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 6; }, 30s));
  crash_and_restart_store();
  for (auto& a : agents) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << a->read_all_stderr(1s);
  }
  // The workers were never restarted: one round, restart count 0.
  EXPECT_FALSE(exists(worker_file(0, 1, "env")));
  for (auto& [r, ws] : ranks_of(0)) EXPECT_EQ(worker_env(r, 0)["TORCHELASTIC_RESTART_COUNT"], "0");
}

TEST_F(ElasticStoreCrashTest, WorkersKeepRunningThroughTenSecondsWithoutTheStore) {
  // Keep-alives notice a silent peer in 1.5 s; the store is gone for 10 s; the grace covers it.
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i)
    agents.push_back(std::make_unique<Subprocess>(agent(
        "2", "grace", {"--sleep", "12"}, {"--store-loss-grace", "30"}, kFastConf + ",is_host=0")));
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 4; }, 30s));
  store_->signal(SIGKILL);
  ASSERT_TRUE(store_->wait(5s));
  std::this_thread::sleep_for(10s);  // the outage itself, not a wait for a condition
  start_store();
  for (auto& a : agents) {
    auto st = a->wait(60s);
    ASSERT_TRUE(st);
    const std::string err = a->read_all_stderr(1s);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << err;
    EXPECT_NE(err.find("the workers keep running"), std::string::npos) << err;
  }
  // The workers were never stopped: one attempt, restart count 0.
  EXPECT_FALSE(exists(worker_file(0, 1, "env")));
  for (auto& [r, ws] : ranks_of(0)) EXPECT_EQ(worker_env(r, 0)["TORCHELASTIC_RESTART_COUNT"], "0");
}

TEST_F(ElasticStoreCrashTest, AStoreThatStaysLostStopsTheWorkersAfterTheGrace) {
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (int i = 0; i < 2; ++i)
    agents.push_back(std::make_unique<Subprocess>(agent(
        "2", "lost", {"--sleep", "120"}, {"--store-loss-grace", "3"}, kFastConf + ",is_host=0")));
  ASSERT_TRUE(wait_for([&] { return ranks_of(0).size() == 4; }, 30s));
  store_->signal(SIGKILL);
  ASSERT_TRUE(store_->wait(5s));
  for (auto& a : agents) {
    auto st = a->wait(30s);  // 3 s of grace, then the workers' stop; far less than their 120 s
    ASSERT_TRUE(st) << "an agent outlived its --store-loss-grace";
    const std::string err = a->read_all_stderr(1s);
    EXPECT_NE(WEXITSTATUS(*st), 0) << err;
    EXPECT_NE(err.find("--store-loss-grace 3 s"), std::string::npos) << err;
  }
}

}  // namespace
}  // namespace cohort::testing

// The CPU process group as real processes (test_worker.cc) rendezvousing through a real store
// server: every collective against the serial reference over shared memory and over TCP; a peer
// killed mid-run is named by the survivors well within the timeout; a silent peer is named at the
// deadline; a crash during setup leaves no shared-memory segment behind; error files.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/inotify.h>
#include <sys/socket.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "../common/free_port.h"
#include "cohort/rdzv/server.h"
#include "process_harness.h"

namespace cohort::test {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class Workers {
 public:
  explicit Workers(std::string run_id) : run_id_(std::move(run_id)) {
    rdzv::StoreServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::make_unique<rdzv::StoreServerThread>(o);
  }
  ~Workers() { kill_all(children_); }

  // Starts `n` workers in `mode` with extra environment.
  void start(int n, const std::string& mode, std::map<std::string, std::string> extra = {}) {
    for (int r = 0; r < n; ++r) {
      std::map<std::string, std::string> env = extra;
      env["RANK"] = std::to_string(r);
      env["LOCAL_RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(n);
      env["LOCAL_WORLD_SIZE"] = std::to_string(n);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(server_->port());
      env["TORCHELASTIC_RUN_ID"] = run_id_;
      env["TORCHELASTIC_RESTART_COUNT"] = "0";
      env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
      if (env.count("COHORT_TIMEOUT_S") == 0) env["COHORT_TIMEOUT_S"] = "60";
      children_.push_back(
          spawn({COHORT_TEST_WORKER, mode}, env, dir_.path(), "rank" + std::to_string(r)));
      ASSERT_GT(children_.back().pid, 0) << "cannot spawn " << COHORT_TEST_WORKER;
    }
  }
  // Waits for every worker; false (and a test failure) if one is still running at the deadline.
  bool wait_all(Clock::duration limit) {
    const auto deadline = Clock::now() + limit;
    bool ok = true;
    for (size_t r = 0; r < children_.size(); ++r) {
      if (!wait_child(children_[r], deadline)) {
        ADD_FAILURE() << "rank " << r << " still running; stderr:\n" << children_[r].stderr_text();
        ok = false;
      }
    }
    return ok;
  }
  Child& operator[](int r) { return children_[r]; }
  const std::string& dir() const { return dir_.path(); }
  // What the segment names of this run contain (the sanitised run id).
  std::string shm_needle() const {
    std::string s;
    for (char c : run_id_) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    return s;
  }

 private:
  std::string run_id_;
  TempDir dir_;
  std::unique_ptr<rdzv::StoreServerThread> server_;
  std::vector<Child> children_;
};

std::string unique_run(const std::string& what) {
  return "rt" + what + std::to_string(::getpid());
}

struct CollectiveCase {
  std::string name;
  int world;
  bool shm;
};

class CpuGroupProcesses : public ::testing::TestWithParam<CollectiveCase> {};

TEST_P(CpuGroupProcesses, EveryCollectiveMatchesTheSerialReference) {
  const auto& c = GetParam();
  Workers w(unique_run(c.name));
  w.start(c.world, "collectives",
          {{"COHORT_TEST_SHM", c.shm ? "1" : "0"}, {"COHORT_TEST_SLOT", "8192"}});
  ASSERT_TRUE(w.wait_all(seconds(120)));
  for (int r = 0; r < c.world; ++r) {
    EXPECT_TRUE(w[r].exited_with(0)) << "rank " << r << " status " << w[r].status << "\n"
                                     << w[r].stderr_text();
    EXPECT_NE(w[r].stdout_text().find("OK rank"), std::string::npos);
  }
  EXPECT_TRUE(shm_entries(w.shm_needle()).empty());
}

INSTANTIATE_TEST_SUITE_P(Transports, CpuGroupProcesses,
                         ::testing::Values(CollectiveCase{"shm_w2", 2, true},
                                           CollectiveCase{"shm_w4", 4, true},
                                           CollectiveCase{"tcp_w3", 3, false}),
                         [](const auto& info) { return info.param.name; });

class PeerDeath : public ::testing::TestWithParam<bool> {};

// Rank 1 is SIGKILLed (by itself) between collectives while ranks 0 and 2 are inside one: they
// fail naming rank 1 quickly (its exit, or its closed connection), long before the 60 s timeout.
// Nothing is left in /dev/shm.
TEST_P(PeerDeath, SurvivorsNameTheDeadRankQuickly) {
  const bool shm = GetParam();
  Workers w(unique_run(shm ? "killshm" : "killtcp"));
  w.start(3, "kill",
          {{"COHORT_TEST_SHM", shm ? "1" : "0"},
           {"COHORT_TEST_VICTIM", "1"},
           {"COHORT_TEST_ITER", "3"}});
  ASSERT_TRUE(w.wait_all(seconds(60)));
  EXPECT_TRUE(w[1].killed_by(SIGKILL)) << w[1].status;
  for (int r : {0, 2}) {
    EXPECT_TRUE(w[r].exited_with(3)) << "rank " << r << ": " << w[r].stderr_text();
    int blamed = -1;
    long long ms = -1;
    ASSERT_EQ(std::sscanf(w[r].stdout_text().c_str(), "BLAMED %d %lld", &blamed, &ms), 2)
        << w[r].stdout_text();
    EXPECT_EQ(blamed, 1) << w[r].stderr_text();
    EXPECT_LT(ms, 10000) << "rank " << r << " took " << ms << " ms to notice";
    EXPECT_NE(w[r].stderr_text().find("rank 1"), std::string::npos) << w[r].stderr_text();
  }
  EXPECT_TRUE(shm_entries(w.shm_needle()).empty());
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerDeath, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "shm" : "tcp"; });

// Rank 2 stops (alive, silent): the others fail at the 2 s deadline naming it.
TEST(PeerHang, SilentRankIsNamedAtTheDeadline) {
  Workers w(unique_run("hang"));
  w.start(3, "hang",
          {{"COHORT_TEST_VICTIM", "2"}, {"COHORT_TEST_ITER", "2"}, {"COHORT_TIMEOUT_S", "2"}});
  const auto deadline = Clock::now() + seconds(60);
  for (int r : {0, 1}) {
    ASSERT_TRUE(wait_child(w[r], deadline)) << w[r].stderr_text();
    EXPECT_TRUE(w[r].exited_with(3)) << w[r].stderr_text();
    int blamed = -1;
    long long ms = -1;
    ASSERT_EQ(std::sscanf(w[r].stdout_text().c_str(), "BLAMED %d %lld", &blamed, &ms), 2);
    EXPECT_EQ(blamed, 2);
    EXPECT_GE(ms, 1900);
    EXPECT_LT(ms, 15000);
  }
  EXPECT_FALSE(w[2].reaped);  // still paused; the destructor kills it
}

// The segment's creator (rank 0) is killed after creating the segment, before rank 1 joins:
// rank 1 fails naming rank 0, and the segment the dead creator could not remove is gone.
TEST(ShmCleanup, CreatorKilledDuringSetupLeavesNoSegment) {
  Workers w(unique_run("setupkill"));
  const std::string go = w.dir() + "/go";
  const int watch = ::inotify_init1(IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(::inotify_add_watch(watch, "/dev/shm", IN_CREATE), 0);
  w.start(2, "wait-go",
          {{"COHORT_TIMEOUT_S", "20"}, {"COHORT_TEST_GO", go}, {"COHORT_TEST_WAITER", "1"}});
  // Wait (on inotify, with a deadline) for rank 0's segment to appear.
  const auto deadline = Clock::now() + seconds(30);
  while (shm_entries(w.shm_needle()).empty()) {
    ASSERT_LT(Clock::now(), deadline) << "rank 0 never created its segment";
    pollfd p{watch, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) {
      char buf[4096];
      (void)::read(watch, buf, sizeof(buf));
    }
  }
  ::close(watch);
  ::kill(w[0].pid, SIGKILL);
  ASSERT_TRUE(wait_child(w[0], Clock::now() + seconds(10)));
  std::ofstream(go) << "go";
  ASSERT_TRUE(wait_child(w[1], Clock::now() + seconds(60))) << w[1].stderr_text();
  EXPECT_TRUE(w[1].exited_with(3)) << w[1].stderr_text();
  int blamed = -1;
  long long ms = -1;
  ASSERT_EQ(std::sscanf(w[1].stdout_text().c_str(), "BLAMED %d %lld", &blamed, &ms), 2)
      << w[1].stdout_text() << w[1].stderr_text();
  EXPECT_EQ(blamed, 0) << w[1].stderr_text();
  EXPECT_TRUE(shm_entries(w.shm_needle()).empty());
}

// A manual env:// launch (no agent store): rank 0 hosts the store inside its Context, as
// PyTorch's env:// init does, and the others connect to it.
TEST(DirectLaunch, RankZeroHostsTheStore) {
  const std::string port = std::to_string(cohort::testing::free_port());
  TempDir dir;
  std::vector<Child> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawn({COHORT_TEST_WORKER, "collectives"},
                          {{"RANK", std::to_string(r)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {"WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", port},
                           {"COHORT_TIMEOUT_S", "60"}},
                          dir.path(), "rank" + std::to_string(r)));
  }
  for (auto& c : ranks) {
    ASSERT_TRUE(wait_child(c, Clock::now() + seconds(120)));
    EXPECT_TRUE(c.exited_with(0)) << c.stderr_text();
  }
}

// A token set by hand (COHORT_STORE_TOKEN): rank 0's store requires it, both ranks present it,
// and neither keeps it in its environment (nor in /proc/self/environ) for its children.
TEST(DirectLaunch, AHandSetTokenProtectsTheStoreAndLeavesTheEnvironment) {
  const std::string port = std::to_string(cohort::testing::free_port());
  TempDir dir;
  std::vector<Child> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(spawn({COHORT_TEST_WORKER, "token-env"},
                          {{"RANK", std::to_string(r)},
                           {"LOCAL_RANK", std::to_string(r)},
                           {"WORLD_SIZE", "2"},
                           {"MASTER_ADDR", "127.0.0.1"},
                           {"MASTER_PORT", port},
                           {"COHORT_STORE_TOKEN", "hand-set-secret-0123456789"},
                           {"COHORT_TIMEOUT_S", "60"}},
                          dir.path(), "rank" + std::to_string(r)));
  }
  for (auto& c : ranks) {
    ASSERT_TRUE(wait_child(c, Clock::now() + seconds(120)));
    EXPECT_TRUE(c.exited_with(0)) << c.stderr_text();
    EXPECT_NE(c.stdout_text().find("CLEAN rank"), std::string::npos) << c.stdout_text();
  }
}

TEST(ErrorFile, UncaughtExceptionIsWrittenInTorchrunFormat) {
  TempDir dir;
  const std::string file = dir.path() + "/error.json";
  Child c = spawn({COHORT_TEST_WORKER, "throw"}, {{"TORCHELASTIC_ERROR_FILE", file}, {"RANK", "5"}},
                  dir.path(), "w");
  ASSERT_TRUE(wait_child(c, Clock::now() + seconds(30)));
  EXPECT_TRUE(c.exited_with(1)) << c.status;
  const auto j = nlohmann::json::parse(read_file(file));
  EXPECT_EQ(j["message"]["message"], "std::runtime_error: boom from the test worker");
  const std::string stack = j["message"]["extraInfo"]["py_callstack"];
  // The stack is the throw site's: the handler runs before anything unwinds.
  EXPECT_NE(stack.find("worker_main"), std::string::npos) << stack;
  const std::string ts = j["message"]["extraInfo"]["timestamp"];
  EXPECT_GT(std::stoll(ts), 1600000000);
  const std::string err = c.stderr_text();
  EXPECT_NE(err.find("[cohort] rank 5: uncaught std::runtime_error: boom"), std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

TEST(ErrorFile, FatalSignalIsWrittenInTorchrunFormat) {
  TempDir dir;
  const std::string file = dir.path() + "/error.json";
  Child c =
      spawn({COHORT_TEST_WORKER, "segv"}, {{"TORCHELASTIC_ERROR_FILE", file}}, dir.path(), "w");
  ASSERT_TRUE(wait_child(c, Clock::now() + seconds(30)));
  EXPECT_TRUE(c.killed_by(SIGSEGV)) << c.status;
  const auto j = nlohmann::json::parse(read_file(file));
  EXPECT_EQ(j["message"]["message"],
            "Signal 11 (SIGSEGV) received by PID " + std::to_string(c.pid));
  const std::string stack = j["message"]["extraInfo"]["py_callstack"];
  EXPECT_NE(stack.find("worker_main"), std::string::npos) << stack;
  EXPECT_NE(c.stderr_text().find("Signal 11 (SIGSEGV)"), std::string::npos);
}

}  // namespace
}  // namespace cohort::test

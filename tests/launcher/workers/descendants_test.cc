// cohortrun against what escapes: descendants that leave their worker's process group (setsid,
// a double fork), a console nobody reads or that goes away, a job in another pid namespace, and
// what agents killed by SIGKILL leave behind. Real processes.
#include <gtest/gtest.h>

#include <fstream>

#include "../launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

class DescendantsTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    // Leases of this test's agents stay in its own folder: the sweep of one test must not act
    // on what another test's agents leave (tests run side by side).
    lease_dir_ = dir_ + "/leases";
    std::filesystem::create_directories(lease_dir_);
  }
  std::vector<std::string> env() const { return {"COHORT_LEASE_DIR=" + lease_dir_}; }
  pid_t pid_in(const std::string& file) const {
    std::ifstream f(file);
    pid_t p = 0;
    f >> p;
    return p;
  }
  // True once `pid` is gone (reaped or a zombie of someone else's) within `timeout`.
  bool gone_within(pid_t pid, std::chrono::milliseconds timeout) {
    return wait_for([&] { return !process_alive(pid); }, timeout);
  }
  std::string lease_dir_;
};

TEST_F(DescendantsTest, RestartWhileAnEscapedDescendantStillWritesReportsTheNewAttempt) {
  Subprocess p(cohortrun({"--nproc-per-node", "1", "--max-restarts", "1"},
                         test_worker({"--escape-chatter", "4", "--exit-code", "1", "--stderr",
                                      "attempt {attempt} failed"})),
               env());
  auto st = p.wait(60s);
  ASSERT_TRUE(st);
  const std::string err = p.read_all_stderr(2s);
  EXPECT_EQ(WEXITSTATUS(*st), 1) << err;
  const auto root = err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << err;
  const std::string summary = err.substr(root);
  EXPECT_NE(summary.find("attempt 1 failed"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("chatter"), std::string::npos) << summary;
  // The chattering descendant died with its group, before the next attempt began.
  pid_t escaped = pid_in(worker_file(0, 0, "escaped"));
  ASSERT_GT(escaped, 0);
  EXPECT_FALSE(process_alive(escaped));
}

TEST_F(DescendantsTest, ADaemonAWorkerStartedIsGoneWhenTheJobEnds) {
  Subprocess p(cohortrun({"--nproc-per-node", "1"}, test_worker({"--escape-daemon"})), env());
  auto st = p.wait(60s);
  ASSERT_TRUE(st);
  EXPECT_EQ(WEXITSTATUS(*st), 0) << p.read_all_stderr(1s);
  pid_t daemon = pid_in(worker_file(0, 0, "daemon"));
  ASSERT_GT(daemon, 0);
  EXPECT_TRUE(gone_within(daemon, 1s));
}

TEST_F(DescendantsTest, ADaemonAWorkerStartedIsGoneAfterASigterm) {
  Subprocess p(cohortrun({"--nproc-per-node", "1", "--term-timeout", "2"},
                         test_worker({"--escape-daemon", "--sleep", "120"})),
               env());
  ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "daemon")); }, 30s));
  pid_t daemon = pid_in(worker_file(0, 0, "daemon"));
  ASSERT_TRUE(process_alive(daemon));
  p.signal(SIGTERM);
  auto st = p.wait(10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(WEXITSTATUS(*st), 128 + SIGTERM);
  EXPECT_TRUE(gone_within(daemon, 1s));
}

TEST_F(DescendantsTest, ADaemonAWorkerStartedIsGoneAfterASigkillOfCohortrun) {
  Subprocess p(
      cohortrun({"--nproc-per-node", "1"}, test_worker({"--escape-daemon", "--sleep", "120"})),
      env());
  ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "daemon")); }, 30s));
  pid_t daemon = pid_in(worker_file(0, 0, "daemon"));
  ASSERT_TRUE(process_alive(daemon));
  p.signal(SIGKILL);  // cohortrun only: its reaper lives on
  ASSERT_TRUE(p.wait(5s));
  EXPECT_TRUE(gone_within(daemon, 1s));
}

TEST_F(DescendantsTest, ADaemonIsGoneAfterASigkillOfCohortrunsWholeProcessGroup) {
  // `timeout -s KILL`, `kill -9 -PGID`: the reaper leads a session of its own, out of reach; with
  // a cgroup for the workers (root here), even a descendant that cleared its environment goes.
  for (const std::string cgroup : {"off", "on"}) {
    SCOPED_TRACE("COHORT_WORKER_CGROUP=" + cgroup);
    auto e = env();
    e.push_back("COHORT_WORKER_CGROUP=" + cgroup);
    Subprocess p(
        cohortrun({"--nproc-per-node", "1"}, test_worker({"--escape-daemon", "--sleep", "120"})),
        e);
    ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "daemon")); }, 30s));
    pid_t daemon = pid_in(worker_file(0, 0, "daemon"));
    ASSERT_TRUE(process_alive(daemon));
    ::kill(-p.pid(), SIGKILL);  // cohortrun leads the Subprocess's group
    ASSERT_TRUE(p.wait(5s));
    EXPECT_TRUE(gone_within(daemon, 2s));
    std::filesystem::remove(worker_file(0, 0, "daemon"));
  }
}

// cohortrun's reaper: its child that leads a session of its own.
pid_t reaper_of(pid_t agent) {
  std::ifstream children("/proc/" + std::to_string(agent) + "/task/" + std::to_string(agent) +
                         "/children");
  for (pid_t child; children >> child;)
    if (::getsid(child) == child) return child;
  return -1;
}

TEST_F(DescendantsTest, WhatOutlivesTheAgentAndItsReaperIsSweptByTheNextAgent) {
  for (const std::string cgroup : {"off", "on"}) {
    SCOPED_TRACE("COHORT_WORKER_CGROUP=" + cgroup);
    auto e = env();
    e.push_back("COHORT_WORKER_CGROUP=" + cgroup);
    Subprocess p(
        cohortrun({"--nproc-per-node", "1"}, test_worker({"--escape-daemon", "--sleep", "120"})),
        e);
    ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "daemon")); }, 30s));
    pid_t daemon = pid_in(worker_file(0, 0, "daemon"));
    const pid_t reaper = reaper_of(p.pid());
    ASSERT_GT(reaper, 0);
    // Both at once, as kill -9 -1 or the OOM killer might: nothing is left to kill the daemon.
    ::kill(reaper, SIGKILL);
    ::kill(-p.pid(), SIGKILL);
    ASSERT_TRUE(p.wait(5s));
    ASSERT_TRUE(process_alive(daemon));
    auto r = run(cohortrun({"--nproc-per-node", "1", "--no-python"}, {"/bin/true"}), e);
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_NE(r.err.find("process(es) left behind by earlier cohortrun agents"), std::string::npos)
        << r.err;
    EXPECT_TRUE(gone_within(daemon, 1s));
    std::filesystem::remove(worker_file(0, 0, "daemon"));
  }
}

TEST_F(DescendantsTest, AnAgentThatExitedNormallyLeavesNothingToSweep) {
  auto first = run(cohortrun({"--nproc-per-node", "1"}, test_worker({})), env());
  ASSERT_EQ(first.exit_code(), 0) << first.err;
  EXPECT_TRUE(std::filesystem::is_empty(lease_dir_));
  auto second = run(cohortrun({"--nproc-per-node", "1"}, test_worker({})), env());
  EXPECT_EQ(second.err.find("left behind"), std::string::npos) << second.err;
}

TEST_F(DescendantsTest, AJobInAnotherPidNamespaceSurvivesTheSweep) {
  if (::geteuid() != 0) GTEST_SKIP() << "unshare --pid needs root";
  if (std::system("unshare --pid --fork --mount-proc true 2>/dev/null") != 0)
    GTEST_SKIP() << "unshare --pid is not permitted here";
  std::vector<std::string> argv{"unshare", "--pid", "--fork", "--mount-proc"};
  for (auto& a : cohortrun({"--nproc-per-node", "1"}, test_worker({"--sleep", "6"})))
    argv.push_back(a);
  // Both agents use one lease folder, as two cohortruns on one host do.
  Subprocess contained(argv, env());
  ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "pid")); }, 30s));
  auto host = run(cohortrun({"--nproc-per-node", "1", "--no-python"}, {"/bin/true"}), env());
  EXPECT_EQ(host.exit_code(), 0) << host.err;
  EXPECT_EQ(host.err.find("left behind"), std::string::npos) << host.err;
  auto st = contained.wait(60s);
  ASSERT_TRUE(st);
  EXPECT_EQ(WEXITSTATUS(*st), 0) << contained.read_all_stderr(1s);
}

TEST_F(DescendantsTest, AConsoleNobodyReadsDoesNotStopTheLauncher) {
  // -t 3: both streams pass through cohortrun to its stdout and stderr, pipes this test never
  // reads. The worker writes far more than they hold.
  Subprocess p(cohortrun({"--nproc-per-node", "1", "-t", "3", "--term-timeout", "2"},
                         test_worker({"--lines", "300000", "--lines-done", "--sleep", "120"})),
               env());
  ASSERT_TRUE(wait_for([&] { return exists(worker_file(0, 0, "lines_done")); }, 60s))
      << "cohortrun stopped reading its worker's output";
  p.signal(SIGTERM);
  auto start = std::chrono::steady_clock::now();
  auto st = p.wait(10s);
  ASSERT_TRUE(st) << "cohortrun did not act on SIGTERM";
  EXPECT_EQ(WEXITSTATUS(*st), 128 + SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 4s);
}

TEST_F(DescendantsTest, AConsoleThatGoesAwayDoesNotKillTheLauncher) {
  Subprocess p(cohortrun({"--nproc-per-node", "1", "-t", "3"},
                         test_worker({"--lines", "20000", "--lines-done"})),
               env());
  p.close_stdout();
  auto st = p.wait(60s);
  ASSERT_TRUE(st);
  ASSERT_TRUE(WIFEXITED(*st)) << "killed by signal " << WTERMSIG(*st);
  EXPECT_EQ(WEXITSTATUS(*st), 0) << p.read_all_stderr(1s);
}

}  // namespace
}  // namespace cohort::testing

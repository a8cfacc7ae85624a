// cohortrun end to end: real processes, real signals, real store.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include "../common/sanitizer.h"
#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(LauncherTest, TwoWorkersGetTorchrunsEnvironment) {
  auto r = run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "3", "--rdzv-id", "job7",
                          "--role", "trainer", "--log-dir", dir_ + "/logs"},
                         test_worker({})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  const char* omp = std::getenv("OMP_NUM_THREADS");
  int cores = static_cast<int>(std::thread::hardware_concurrency());
  for (int rank = 0; rank < 2; ++rank) {
    auto env = worker_env(rank, 0);
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(env["ROLE_NAME"], "trainer");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_TRUE(std::regex_match(env["MASTER_PORT"], std::regex("[0-9]+")));
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "3");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job7");
    EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "True");
    EXPECT_TRUE(std::regex_match(env["TORCHELASTIC_ERROR_FILE"],
                                 std::regex(dir_ + "/logs/job7_[a-z0-9_]+/attempt_0/" +
                                            std::to_string(rank) + "/error.json")))
        << env["TORCHELASTIC_ERROR_FILE"];
    EXPECT_EQ(env.count("NCCL_ASYNC_ERROR_HANDLING"), 0u);  // 1.13's spelling; 2.x deprecates it
    EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "1");
    EXPECT_EQ(env["OMP_NUM_THREADS"],
              omp ? std::string(omp) : std::to_string(std::max(1, cores / 2)));
    EXPECT_FALSE(env["COHORT_HEARTBEAT_FD"].empty());
  }
  EXPECT_FALSE(exists(worker_file(0, 1, "env")));
}

TEST_F(LauncherTest, PetVariablesAreDefaultsAndFlagsWin) {
  auto r = run(cohortrun({}, test_worker({})), {"PET_NPROC_PER_NODE=3", "PET_RDZV_ID=frompet"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(exists(worker_file(2, 0, "env")));
  EXPECT_EQ(worker_env(0, 0)["TORCHELASTIC_RUN_ID"], "frompet");
  auto r2 = run(cohortrun({"--nproc_per_node=1"}, test_worker({})), {"PET_NPROC_PER_NODE=3"});
  ASSERT_EQ(r2.exit_code(), 0) << r2.err;
  EXPECT_EQ(worker_env(0, 0)["WORLD_SIZE"], "1");
}

TEST_F(LauncherTest, ExitCodeRestartsExactlyMaxRestartsTimesAndLeavesNothing) {
  auto start = std::chrono::steady_clock::now();
  auto r = run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "2"},
                         test_worker({"--exit-code", "3", "--on-rank", "1", "--stderr",
                                      "boom on rank 1", "--grandchild", "--sleep", "60"})));
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
  for (int attempt = 0; attempt < 3; ++attempt) {
    for (int rank = 0; rank < 2; ++rank) {
      EXPECT_TRUE(exists(worker_file(rank, attempt, "env"))) << rank << "/" << attempt;
      EXPECT_EQ(worker_env(rank, attempt)["TORCHELASTIC_RESTART_COUNT"], std::to_string(attempt));
    }
  }
  EXPECT_FALSE(exists(worker_file(0, 3, "env")));
  EXPECT_EQ(count_of(r.err, "FAILED\n"), 1u) << r.err;
  EXPECT_NE(r.err.find("Root Cause (first observed failure):"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("traceback : boom on rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << r.err;
  // Every worker and every worker's child, of every attempt, is gone.
  for (int attempt = 0; attempt < 3; ++attempt)
    for (int rank = 0; rank < 2; ++rank)
      for (pid_t p : worker_pids(rank, attempt)) EXPECT_FALSE(process_alive(p)) << p;
}

TEST_F(LauncherTest, RestartedGroupThatSucceedsEndsWithZero) {
  auto r =
      run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "3"},
                    test_worker({"--exit-code", "5", "--on-rank", "0", "--until-attempt", "2"})));
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_TRUE(exists(worker_file(1, 2, "env")));
  EXPECT_FALSE(exists(worker_file(1, 3, "env")));
  EXPECT_EQ(r.err.find("FAILED"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, SegfaultIsNamedInTheSummary) {
  auto r = run(cohortrun({"--nproc-per-node", "2"},
                         test_worker({"--signal", "SEGV", "--on-rank", "1", "--sleep", "60"})));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("exitcode  : -11"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by SIGSEGV"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, ARankThatTimedOutWaitingNamesTheRanksThatHadNotFailed) {
  // Rank 2 times out waiting (as PyTorch's store says it); ranks 0, 1 and 3 are still busy.
  auto r = run(cohortrun(
      {"--nproc-per-node", "4"},
      test_worker({"--exit-code", "1", "--on-rank", "2", "--stderr",
                   "RuntimeError: Wait timeout after 10000ms, keys: rank_3", "--sleep", "60"})));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("Rank 2 timed out waiting; these ranks had not failed"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("among them):\n  0, 1, 3\n"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, SigkilledWorkerIsNamedInTheSummary) {
  auto r = run(cohortrun({"--nproc-per-node", "2"},
                         test_worker({"--signal", "KILL", "--on-rank", "0", "--sleep", "60"})));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("exitcode  : -9"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("killed by SIGKILL"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank      : 0 (local_rank: 0)"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, ErrorFileContentIsTheTraceback) {
  auto r = run(cohortrun({"--nproc-per-node", "2"},
                         test_worker({"--exit-code", "1", "--on-rank", "1", "--error-file",
                                      "disk on fire", "--sleep", "60"})));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_TRUE(std::regex_search(r.err, std::regex("error_file: /.*/attempt_0/1/error.json")))
      << r.err;
  EXPECT_NE(r.err.find("RuntimeError: disk on fire"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Traceback (most recent call last):"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, PythonExceptionWithoutErrorFileShowsItsTraceback) {
  std::string script = dir_ + "/fail.py";
  std::ofstream(script) << "import os\n"
                           "if os.environ['RANK'] == '1':\n"
                           "    raise ValueError('boom from rank 1 attempt ' + "
                           "os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
                           "import time; time.sleep(60)\n";
  auto r = run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "1"}, {script}));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("fail.py FAILED"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ValueError: boom from rank 1 attempt 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("Traceback (most recent call last):"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, SigtermReachesTheWorkersAndSetsTheExitStatus) {
  Subprocess p(cohortrun({"--nproc-per-node", "2"}, test_worker({"--trap-term", "--sleep", "60"})));
  ASSERT_TRUE(wait_for(
      [&] { return exists(worker_file(0, 0, "pid")) && exists(worker_file(1, 0, "pid")); }, 20s));
  p.signal(SIGTERM);
  auto st = p.wait(20s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(WIFEXITED(*st));
  EXPECT_EQ(WEXITSTATUS(*st), 128 + SIGTERM);
  EXPECT_TRUE(exists(dir_ + "/0.term"));
  EXPECT_TRUE(exists(dir_ + "/1.term"));
}

TEST_F(LauncherTest, Usr1IsForwardedAndTheJobCarriesOn) {
  // Without any flag (outside --slurm too), and even when --signals-to-handle names it.
  for (std::vector<std::string> flags :
       {std::vector<std::string>{},
        std::vector<std::string>{"--signals-to-handle", "SIGTERM,SIGUSR1"}}) {
    for (const char* f : {"/0.usr1", "/1.usr1"}) std::filesystem::remove(dir_ + f);
    for (int r : {0, 1}) std::filesystem::remove(worker_file(r, 0, "pid"));
    flags.insert(flags.begin(), {"--nproc-per-node", "2"});
    Subprocess p(cohortrun(flags, test_worker({"--trap-usr1", "--sleep", "2"})));
    ASSERT_TRUE(wait_for(
        [&] { return exists(worker_file(0, 0, "pid")) && exists(worker_file(1, 0, "pid")); }, 20s));
    p.signal(SIGUSR1);
    ASSERT_TRUE(
        wait_for([&] { return exists(dir_ + "/0.usr1") && exists(dir_ + "/1.usr1"); }, 10s));
    auto st = p.wait(30s);
    ASSERT_TRUE(st);
    EXPECT_TRUE(WIFEXITED(*st)) << "killed by signal " << WTERMSIG(*st);
    EXPECT_EQ(WEXITSTATUS(*st), 0) << p.read_all_stderr(1s);
  }
}

TEST_F(LauncherTest, SigkilledCohortrunLeavesNoWorkerBehind) {
  Subprocess p(
      cohortrun({"--nproc-per-node", "2"}, test_worker({"--grandchild", "--sleep", "120"})));
  ASSERT_TRUE(wait_for(
      [&] { return worker_pids(0, 0).size() == 2 && worker_pids(1, 0).size() == 2; }, 20s));
  std::vector<pid_t> pids = worker_pids(0, 0);
  for (pid_t q : worker_pids(1, 0)) pids.push_back(q);
  for (pid_t q : pids) ASSERT_TRUE(process_alive(q));
  p.signal(SIGKILL);
  ASSERT_TRUE(p.wait(5s));
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(wait_for(
      [&] {
        for (pid_t q : pids)
          if (process_alive(q)) return false;
        return true;
      },
      10s));
  // Gone at once (the parent-death signal), not after the workers' 120 s sleep: the bound leaves a
  // loaded machine room.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

TEST_F(LauncherTest, TwoStaticNodesFormOneJob) {
  std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    return cohortrun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "2",
                      "--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-id", "twonode"},
                     test_worker({}));
  };
  Subprocess n1(node(1));  // the second node may start first: it waits for node 0's store
  Subprocess n0(node(0));
  auto s0 = n0.wait(60s), s1 = n1.wait(60s);
  ASSERT_TRUE(s0 && s1);
  EXPECT_EQ(WEXITSTATUS(*s0), 0) << n0.read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*s1), 0) << n1.read_all_stderr(1s);
  for (int rank = 0; rank < 4; ++rank) {
    auto env = worker_env(rank, 0);
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    // The round's own workers' store on node 0 (rdzv/round_stores.h), not the agents' store on
    // --master-port; the same one for every rank.
    EXPECT_NE(env["MASTER_PORT"], port);
    EXPECT_EQ(env["MASTER_PORT"], worker_env(0, 0)["MASTER_PORT"]);
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
  }
}

TEST_F(LauncherTest, FailureOnOneNodeRestartsEveryNode) {
  std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    return cohortrun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
                      "--master-port", port, "--max-restarts", "1"},
                     test_worker({"--exit-code", "7", "--on-rank", "1", "--until-attempt", "1",
                                  "--sleep", "1"}));
  };
  Subprocess n0(node(0)), n1(node(1));
  auto s0 = n0.wait(60s), s1 = n1.wait(60s);
  ASSERT_TRUE(s0 && s1);
  EXPECT_EQ(WEXITSTATUS(*s0), 0) << n0.read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*s1), 0) << n1.read_all_stderr(1s);
  EXPECT_TRUE(exists(worker_file(0, 1, "env")));
  EXPECT_TRUE(exists(worker_file(1, 1, "env")));
  // Each round's workers have a store of their own, on a port no earlier round used.
  EXPECT_EQ(worker_env(0, 1)["MASTER_PORT"], worker_env(1, 1)["MASTER_PORT"]);
  EXPECT_NE(worker_env(0, 1)["MASTER_PORT"], worker_env(0, 0)["MASTER_PORT"]);
}

TEST_F(LauncherTest, FailureOnOneNodeIsTheRootCauseOnBoth) {
  std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    return cohortrun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
                      "--master-port", port},
                     test_worker({"--exit-code", "9", "--on-rank", "1", "--stderr",
                                  "node one broke", "--sleep", "60"}));
  };
  Subprocess n0(node(0)), n1(node(1));
  auto s0 = n0.wait(60s), s1 = n1.wait(60s);
  ASSERT_TRUE(s0 && s1);
  EXPECT_EQ(WEXITSTATUS(*s0), 1);
  EXPECT_EQ(WEXITSTATUS(*s1), 1);
  std::string err0 = n0.read_all_stderr(1s);
  EXPECT_NE(err0.find("node one broke"), std::string::npos) << err0;
  EXPECT_NE(err0.find("exitcode  : 9"), std::string::npos) << err0;
}

TEST_F(LauncherTest, LogDirLayoutRedirectsAndTee) {
  std::string logs = dir_ + "/logs";
  auto r = run(cohortrun(
      {"--nproc-per-node", "2", "--log-dir", logs, "--tee", "0:3,1:0", "--redirects", "1:1"},
      test_worker({"--lines", "3"})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  std::string run_dir;
  for (auto& e : std::filesystem::directory_iterator(logs)) run_dir = e.path();
  ASSERT_TRUE(std::regex_search(run_dir, std::regex("/none_[a-z0-9_]+$"))) << run_dir;
  auto slurp = [](const std::string& p) {
    std::ifstream f(p);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  };
  // Rank 0 tees both streams: files and prefixed console lines.
  EXPECT_EQ(slurp(run_dir + "/attempt_0/0/stdout.log"), "out line 0\nout line 1\nout line 2\n");
  EXPECT_EQ(slurp(run_dir + "/attempt_0/0/stderr.log"), "err line 0\nerr line 1\nerr line 2\n");
  EXPECT_NE(r.out.find("[default0]:out line 2\n"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("[default0]:err line 2\n"), std::string::npos) << r.err;
  // Rank 1 redirects stdout only: a file, nothing on the console; its stderr stays plain.
  EXPECT_EQ(slurp(run_dir + "/attempt_0/1/stdout.log"), "out line 0\nout line 1\nout line 2\n");
  EXPECT_FALSE(exists(run_dir + "/attempt_0/1/stderr.log"));
  EXPECT_EQ(count_of(r.out, "out line 1\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.err, "err line 1\n"), 2u) << r.err;  // rank 0 prefixed + rank 1 plain
}

TEST_F(LauncherTest, LocalRanksFilterKeepsOtherRanksOffTheConsole) {
  auto r = run(cohortrun({"--nproc-per-node", "3", "--local-ranks-filter", "1"},
                         test_worker({"--lines", "2"})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(count_of(r.out, "out line 0\n"), 1u) << r.out;
  EXPECT_EQ(count_of(r.err, "err line 0\n"), 1u) << r.err;
}

TEST_F(LauncherTest, WorkerThatStopsBeatingIsDeclaredHungAndRestarted) {
  auto r = run(
      cohortrun({"--nproc-per-node", "2", "--worker-hang-timeout", "0.5", "--max-restarts", "1",
                 "--term-timeout", "1"},
                test_worker({"--beat", "3", "--hang", "--on-rank", "1", "--until-attempt", "1"})));
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("hung: no heartbeat for 0.5 s"), std::string::npos) << r.err;
  EXPECT_TRUE(exists(worker_file(1, 1, "env")));
}

TEST_F(LauncherTest, HangTimeoutIgnoresWorkersThatNeverBeat) {
  auto r = run(cohortrun({"--nproc-per-node", "1", "--worker-hang-timeout", "0.2"},
                         test_worker({"--sleep", "1"})));
  EXPECT_EQ(r.exit_code(), 0) << r.err;
}

// torchrun 2.x's TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT: a worker in uninterruptible sleep (D
// state) that long ends the job without a restart; a shorter spell in D state is no failure.
TEST_F(LauncherTest, AWorkerStuckInUninterruptibleSleepEndsTheJobWithoutARestart) {
#ifdef COHORT_TEST_TSAN
  GTEST_SKIP() << "TSan's runtime turns the test worker's vfork() into a fork(), so its parent "
                  "never sleeps in D state";
#endif
  const auto start = std::chrono::steady_clock::now();
  auto r =
      run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "3", "--term-timeout", "1"},
                    test_worker({"--uninterruptible", "60", "--on-rank", "1", "--sleep", "60"})),
          {"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=0.4"}, 60s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 20s);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_NE(r.err.find("stuck in uninterruptible sleep (D state) for"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank      : 1"), std::string::npos) << r.err;
  EXPECT_FALSE(exists(worker_file(0, 1, "env"))) << "a restart was attempted";

  auto brief = run(cohortrun({"--nproc-per-node", "1"},
                             test_worker({"--uninterruptible", "0.2", "--sleep", "0.3"})),
                   {"TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT=5"}, 60s);
  EXPECT_EQ(brief.exit_code(), 0) << brief.err;
}

// Without --log-dir, the folder cohortrun makes under $TMPDIR goes when the job succeeded and
// holds nothing (no redirects), and stays when a worker failed (its error file is there).
TEST_F(LauncherTest, ATemporaryLogFolderIsRemovedAfterASuccessAndKeptAfterAFailure) {
  const std::string tmp = dir_ + "/tmp";
  std::filesystem::create_directories(tmp);
  auto entries = [&] {
    return std::distance(std::filesystem::directory_iterator(tmp),
                         std::filesystem::directory_iterator());
  };
  auto ok = run(cohortrun({"--nproc-per-node", "2"}, test_worker({})), {"TMPDIR=" + tmp});
  EXPECT_EQ(ok.exit_code(), 0) << ok.err;
  EXPECT_EQ(entries(), 0) << "a succeeded job left its log folder";
  auto teed = run(cohortrun({"--nproc-per-node", "1", "--tee", "3"}, test_worker({"--lines", "1"})),
                  {"TMPDIR=" + tmp});
  EXPECT_EQ(teed.exit_code(), 0) << teed.err;
  EXPECT_EQ(entries(), 1) << "the worker's log files went with their folder";
  auto failed = run(cohortrun({"--nproc-per-node", "1"}, test_worker({"--exit-code", "3"})),
                    {"TMPDIR=" + tmp});
  EXPECT_EQ(failed.exit_code(), 1);
  EXPECT_EQ(entries(), 2) << "a failed job's log folder went";
}

TEST_F(LauncherTest, UsageErrorsNameTheProblem) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  };
  std::vector<Case> cases = {
      {{"--nproc-per-node", "2"}, "no entry point"},
      {{"--nproc-per-node", "zero", "x"}, "--nproc-per-node must be"},
      {{"--nnodes", "0", "x"}, "--nnodes"},
      {{"--nnodes", "2:1", "x"}, "--nnodes"},
      {{"--rdzv-backend", "c10d", "x"}, "needs --rdzv-endpoint"},
      {{"--rdzv-backend", "etcd-v2", "x"}, "not supported"},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:99999", "x"}, "port '99999'"},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "[::1", "x"}, "without ']'"},
      {{"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1", "--rdzv-conf", "bogus=1", "x"},
       "unknown key 'bogus'"},
      {{"--nnodes", "2", "--node-rank", "2", "x"}, "--node-rank 2"},
      {{"--redirects", "7", "x"}, "--redirects"},
      {{"--no-such-flag", "x"}, "no-such-flag"},
  };
  for (const auto& c : cases) {
    auto r = run(cohortrun(c.args, {}));
    EXPECT_EQ(r.exit_code(), 2) << c.expect << "\n" << r.err;
    EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
  }
}

TEST_F(LauncherTest, MissingProgramFailsWithAClearMessage) {
  auto r = run(cohortrun({"--no-python"}, {dir_ + "/no_such_program"}));
  EXPECT_EQ(r.exit_code(), 1);
  EXPECT_NE(r.err.find("cannot execute"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exitcode  : 127"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, MetricsListenOnLoopbackUnlessToldOtherwise) {
  auto r = run(cohortrun({"--nproc-per-node", "1", "--metrics-port", "0"}, test_worker({})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("serving metrics at http://127.0.0.1:"), std::string::npos) << r.err;
  auto wide =
      run(cohortrun({"--nproc-per-node", "1", "--metrics-addr", "0.0.0.0:0"}, test_worker({})));
  ASSERT_EQ(wide.exit_code(), 0) << wide.err;
  EXPECT_NE(wide.err.find("serving metrics at http://0.0.0.0:"), std::string::npos) << wide.err;
}

}  // namespace
}  // namespace cohort::testing

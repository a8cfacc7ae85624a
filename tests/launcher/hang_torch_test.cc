// Hangs of unchanged scripts under cohortrun (real PyTorch, each generation): the culprit named
// from every rank's answers to a hang probe (HangTest: tests/interop/hang_scenarios.py, one node
// and two), a script without torch judged by its beats, and a worker whose elastic file timer
// expires, killed as torchrun 2.x kills it.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <optional>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

TEST_F(LauncherTest, AHungPyTorchWorkerIsFoundWithItsStack) {
  COHORT_REQUIRE_TORCH();
  const auto start = std::chrono::steady_clock::now();
  auto r = run(cohortrun({"--nproc-per-node", "2", "--worker-hang-timeout", "3"},
                         {COHORT_SOURCE_DIR "/tests/interop/hung_worker.py"}),
               {}, 120s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.exit_code(), 1) << r.err;
  const auto root = r.err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << summary;
  // No collective between the ranks: it stopped while rank 0 still beat.
  EXPECT_NE(summary.find("hung: no heartbeat for"), std::string::npos) << summary;
  EXPECT_NE(summary.find("while rank 0 still beat, and inside no collective"), std::string::npos)
      << summary;
  // Its answer to the probe: where the hung thread was, to the line.
  EXPECT_NE(summary.find("in stuck_waiting_for_data"), std::string::npos) << summary;
  // Found within the timeout and a beat, after PyTorch's start-up (not after its 600 s sleep).
  EXPECT_LT(took, 60s);
}

TEST_F(LauncherTest, AScriptWithoutTorchThatBeatsAndStallsIsHungAsBefore) {
  // One rank, no torch: no collective to tell a quiet phase from a hang, so its beats judge it.
  const auto start = std::chrono::steady_clock::now();
  auto r = run(cohortrun({"--nproc-per-node", "1", "--worker-hang-timeout", "2"},
                         {COHORT_SOURCE_DIR "/tests/interop/beat_then_stall.py"}),
               {}, 60s);
  ASSERT_EQ(r.exit_code(), 1) << r.err;
  const auto root = r.err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("reason    : hung: no heartbeat for"), std::string::npos) << summary;
  EXPECT_NE(summary.find("it uses no collective that could tell a quiet phase from a hang"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find("in stuck_without_torch"), std::string::npos) << summary;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);  // not its 600 s sleep
}

TEST_F(LauncherTest, APyTorchScriptInNoGroupThatBeatsByHandAndStallsIsHung) {
  COHORT_REQUIRE_TORCH();
  // One rank with PyTorch and no process group (a one-GPU script) under the worker module. Its
  // beats by hand promise a beat in every phase, so its silence judges it.
  const auto start = std::chrono::steady_clock::now();
  auto r = run(cohortrun({"--nproc-per-node", "1", "--worker-hang-timeout", "2"},
                         {COHORT_SOURCE_DIR "/tests/interop/torch_beat_then_stall.py"}),
               {"BEAT_BY_HAND=1"}, 120s);
  ASSERT_EQ(r.exit_code(), 1) << r.err;
  const auto root = r.err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("reason    : hung: no heartbeat for"), std::string::npos) << summary;
  EXPECT_NE(summary.find("in stuck_in_a_kernel"), std::string::npos) << summary;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 60s);  // not its 600 s sleep
}

TEST_F(LauncherTest, APyTorchScriptInNoGroupWhoseOnlyBeatsAreItsOptimizerStepsIsQuietWhenItStops) {
  COHORT_REQUIRE_TORCH();
  // The same script without beats by hand: the worker module beat on its optimizer steps, which
  // promise nothing of a phase without steps. 5 s without one, against a 2 s timeout, is quiet,
  // and the job finishes.
  auto r = run(cohortrun({"--nproc-per-node", "1", "--worker-hang-timeout", "2"},
                         {COHORT_SOURCE_DIR "/tests/interop/torch_beat_then_stall.py"}),
               {"STALL_S=5"}, 120s);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.err.find("hung"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("done"), std::string::npos) << r.out;
}

TEST_F(LauncherTest, WithoutTheCohortModuleAnUnchangedScriptNeverBeats) {
  COHORT_REQUIRE_TORCH();
  // Rank 1 stalls for 4 s, twice the hang timeout, and then finishes: without the worker module
  // the script never beats, so it is never judged, and the job succeeds.
  auto r =
      run(cohortrun({"--nproc-per-node", "2", "--worker-hang-timeout", "2", "--no-cohort-module"},
                    {COHORT_SOURCE_DIR "/tests/interop/hung_worker.py"}),
          {"STEPS=30", "HANG_SECONDS=4"}, 120s);
  EXPECT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(r.err.find("hung"), std::string::npos) << r.err;
}

TEST_F(LauncherTest, AWorkerWhoseFileTimerExpiresIsKilledAndNamedInTheSummary) {
  COHORT_REQUIRE_TORCH();
  const std::string fifo = dir_ + "/timer.fifo";
  const auto start = std::chrono::steady_clock::now();
  auto r = run(
      cohortrun({"--nproc-per-node", "2"}, {COHORT_SOURCE_DIR "/tests/interop/timer_worker.py"}),
      {"TORCHELASTIC_ENABLE_FILE_TIMER=1", "TORCHELASTIC_TIMER_FILE=" + fifo}, 120s);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(r.exit_code(), 1) << r.out << r.err;
  EXPECT_NE(r.out.find("rank 0: step done"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rank 1: step done"), std::string::npos) << r.out;
  const auto root = r.err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("its file timer 'data_step' expired: killed by SIGKILL"),
            std::string::npos)
      << summary;
  EXPECT_FALSE(std::filesystem::exists(fifo)) << "the FIFO outlived cohortrun";
  EXPECT_LT(took, 60s);  // the deadline, not rank 1's 120 s sleep
}

// ---- hangs between ranks (tests/interop/hang_scenarios.py: unchanged DDP scripts) -------------

struct HangRun {
  RunResult r;
  std::string summary;        // from "Root Cause" on
  std::optional<double> lag;  // seconds from the misbehaviour to cohortrun's "the job is hung"
};

// The Unix time of a cohortrun log line "[2026-12-04 22:54:24.470] ..." that holds `what`.
std::optional<double> logged_at(const std::string& err, const std::string& what) {
  const size_t at = err.find(what);
  if (at == std::string::npos) return std::nullopt;
  const size_t line = err.rfind('\n', at);
  const std::string text = err.substr(line == std::string::npos ? 0 : line + 1, 25);
  std::tm tm{};
  int ms = 0;
  if (std::sscanf(text.c_str(), "[%d-%d-%d %d:%d:%d.%d]", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
                  &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  tm.tm_isdst = -1;
  return static_cast<double>(std::mktime(&tm)) + ms / 1000.0;
}

class HangTest : public LauncherTest {
 protected:
  HangRun scenario(const std::string& name, int nproc, std::vector<std::string> flags,
                   std::vector<std::string> env = {}) {
    const std::string mark = dir_ + "/mark";
    env.push_back("HANG_SCENARIO=" + name);
    env.push_back("HANG_MARK=" + mark);
    flags.insert(flags.begin(), {"--nproc-per-node", std::to_string(nproc)});
    HangRun h;
    h.r = run(cohortrun(flags, {COHORT_SOURCE_DIR "/tests/interop/hang_scenarios.py"}), env, 180s);
    const auto root = h.r.err.find("Root Cause");
    if (root != std::string::npos) h.summary = h.r.err.substr(root);
    std::ifstream f(mark);
    double marked = 0;
    if (f >> marked) {
      if (auto hung = logged_at(h.r.err, "the job is hung")) h.lag = *hung - marked;
    }
    return h;
  }
};

TEST_F(HangTest, ARankStalledInPythonIsNamedWithItsLineAndTheRankWaitingForIt) {
  COHORT_REQUIRE_TORCH();
  HangRun h = scenario("stall", 2, {"--worker-hang-timeout", "3"});
  ASSERT_EQ(h.r.exit_code(), 1) << h.r.err;
  EXPECT_NE(h.summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("reason    : hung: never entered "), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("waiting   : rank 0 ("), std::string::npos) << h.summary;
  // Its stack, to the line.
  EXPECT_NE(h.summary.find("in stuck_in_data_loading\n      time.sleep(stall_s)"),
            std::string::npos)
      << h.summary;
  EXPECT_NE(h.r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << h.r.err;
  ASSERT_TRUE(h.lag.has_value()) << h.r.err;
  EXPECT_LT(*h.lag, 3 + 5) << h.r.err;  // within the hang timeout plus 5 s
}

TEST_F(HangTest, OfFourRanksTheOneBlockedInANativeCallIsNamedAndTheOthersWait) {
  COHORT_REQUIRE_TORCH();
  HangRun h = scenario("native", 4, {"--worker-hang-timeout", "3"}, {"HANG_RANK=2"});
  ASSERT_EQ(h.r.exit_code(), 1) << h.r.err;
  EXPECT_NE(h.summary.find("rank      : 2 (local_rank: 2)"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("reason    : hung: never entered "), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("in blocked_in_native_code\n      libc.sleep(int(stall_s))"),
            std::string::npos)
      << h.summary;
  for (int r : {0, 1, 3}) {
    EXPECT_NE(h.summary.find("rank " + std::to_string(r) + " (vm"), std::string::npos) << h.summary;
  }
  EXPECT_EQ(count_of(h.summary, ": waits in "), 3u) << h.summary;  // one line each, no failures
  ASSERT_TRUE(h.lag.has_value()) << h.r.err;
  EXPECT_LT(*h.lag, 3 + 5) << h.r.err;
}

TEST_F(HangTest, ARankHoldingTheGilInNativeCodeIsNamedAndOnlyItIsAskedForItsStack) {
  COHORT_REQUIRE_TORCH();
  // Rank 1 sleeps in libc holding the GIL: its helper thread cannot answer. It is named as the
  // rank that did not answer while rank 0 waited, and only it gets SIGABRT (faulthandler prints
  // its stack); rank 0, which only waited, is stopped as the rest of the group is.
  HangRun h = scenario("native_gil", 2, {"--worker-hang-timeout", "3"});
  ASSERT_EQ(h.r.exit_code(), 1) << h.r.err;
  EXPECT_NE(h.summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("reason    : hung: no answer in time"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("(its stack, asked for with SIGABRT, below)"), std::string::npos)
      << h.summary;
  EXPECT_NE(h.summary.find("blocked_in_native_code"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("waiting   : rank 0 ("), std::string::npos) << h.summary;
  EXPECT_NE(h.r.err.find("<NO_OTHER_FAILURES>"), std::string::npos) << h.r.err;
  // One faulthandler dump as the workers' output went by (rank 1's), and its copy in the summary.
  EXPECT_EQ(count_of(h.r.err, "Fatal Python error: Aborted"), 2u) << h.r.err;
  EXPECT_EQ(count_of(h.summary, "Fatal Python error: Aborted"), 1u) << h.summary;
  ASSERT_TRUE(h.lag.has_value()) << h.r.err;
  EXPECT_LT(*h.lag, 3 + 5) << h.r.err;
}

TEST_F(HangTest, ADesynchronisedCollectiveIsNamedAsSuch) {
  COHORT_REQUIRE_TORCH();
  HangRun h = scenario("desync", 2, {"--worker-hang-timeout", "3"});
  ASSERT_EQ(h.r.exit_code(), 1) << h.r.err;
  EXPECT_NE(h.summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("hung: desynchronised collective: called all_gather"), std::string::npos)
      << h.summary;
  EXPECT_NE(h.summary.find("where rank 0 called all_reduce"), std::string::npos) << h.summary;
  ASSERT_TRUE(h.lag.has_value()) << h.r.err;
  EXPECT_LT(*h.lag, 3 + 5) << h.r.err;
}

TEST_F(HangTest, ARankThatExitsWhileTheOthersWaitIsACrashAsBefore) {
  COHORT_REQUIRE_TORCH();
  HangRun h = scenario("exit", 2, {"--worker-hang-timeout", "3"});
  ASSERT_EQ(h.r.exit_code(), 1) << h.r.err;
  EXPECT_NE(h.summary.find("rank      : 1 (local_rank: 1)"), std::string::npos) << h.summary;
  EXPECT_NE(h.summary.find("reason    : exited with code 3"), std::string::npos) << h.summary;
  EXPECT_EQ(h.r.err.find("the job is hung"), std::string::npos) << h.r.err;
}

TEST_F(HangTest, AnEvaluationPhaseFourTimesTheTimeoutIsNeverAHang) {
  COHORT_REQUIRE_TORCH();
  // 8 s in which no rank is inside a collective and none steps, against a 2 s timeout: probed
  // about every 2 s, judged quiet each time. One generation is enough (the judgement is the
  // same; 1.13's collective counts are tested with the stall).
  if (torch_is_1x()) GTEST_SKIP() << "run under PyTorch 2.x only";
  HangRun h = scenario("eval", 2, {"--worker-hang-timeout", "2"}, {"HANG_EVAL_S=8"});
  EXPECT_EQ(h.r.exit_code(), 0) << h.r.err;
  EXPECT_EQ(h.r.err.find("hung"), std::string::npos) << h.r.err;
  EXPECT_NE(h.r.out.find("rank 1: done"), std::string::npos) << h.r.out;
}

TEST_F(HangTest, ASlowRankIsAStragglerNotAHang) {
  COHORT_REQUIRE_TORCH();
  // Rank 1 takes 0.4 s longer every step; the others wait for it in the allreduce, and all beat.
  HangRun h = scenario("straggler", 2, {"--worker-hang-timeout", "3", "--straggler-window", "2"},
                       {"HANG_SLOW_S=0.4", "STEPS=25"});
  EXPECT_EQ(h.r.exit_code(), 0) << h.r.err;
  EXPECT_EQ(h.r.err.find("hung"), std::string::npos) << h.r.err;
  EXPECT_NE(h.r.err.find("straggler: rank 1 on "), std::string::npos) << h.r.err;
}

TEST_F(HangTest, OnTwoNodesTheCulpritOnTheOtherNodeIsNamedFromRecordsInTheStore) {
  COHORT_REQUIRE_TORCH();
  // Two cohortrun agents, two ranks each; rank 3 (node 1) stalls while ranks 0-2 wait in the
  // allreduce. Each node asks its own workers and publishes their answers in the store; the
  // summary of node 0, which has no culprit of its own, names rank 3 with its stack.
  const std::string port = std::to_string(free_port());
  const std::string mark = dir_ + "/mark";
  auto node = [&](int rank) {
    return cohortrun(
        {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", port, "--worker-hang-timeout", "3"},
        {COHORT_SOURCE_DIR "/tests/interop/hang_scenarios.py"});
  };
  const std::vector<std::string> env{"PYTHON_EXEC=" + torch_python(), "HANG_SCENARIO=stall",
                                     "HANG_RANK=3", "HANG_MARK=" + mark};
  Subprocess n0(node(0), env), n1(node(1), env);
  n0.close_stdin();
  n1.close_stdin();
  const auto s0 = n0.wait(180s), s1 = n1.wait(180s);
  const std::string err0 = n0.read_all_stderr(2s), err1 = n1.read_all_stderr(2s);
  ASSERT_TRUE(s0 && s1) << err0 << err1;
  EXPECT_EQ(WEXITSTATUS(*s0), 1) << err0;
  EXPECT_EQ(WEXITSTATUS(*s1), 1) << err1;
  for (const std::string* err : {&err0, &err1}) {
    const auto root = err->find("Root Cause");
    ASSERT_NE(root, std::string::npos) << *err;
    const std::string summary = err->substr(root);
    EXPECT_NE(summary.find("rank      : 3 (local_rank: 1)"), std::string::npos) << summary;
    EXPECT_NE(summary.find("reason    : hung: never entered "), std::string::npos) << summary;
    EXPECT_NE(summary.find("in stuck_in_data_loading\n      time.sleep(stall_s)"),
              std::string::npos)
        << summary;
    // The three others wait, one line each; none of them is a failure.
    EXPECT_EQ(count_of(summary, ": waits in "), 3u) << summary;
    EXPECT_NE(err->find("<NO_OTHER_FAILURES>"), std::string::npos) << *err;
  }
  std::ifstream f(mark);
  double marked = 0;
  ASSERT_TRUE(f >> marked);
  std::optional<double> hung = logged_at(err0, "the job is hung");
  if (!hung) hung = logged_at(err1, "the job is hung");
  ASSERT_TRUE(hung.has_value()) << err0 << err1;
  EXPECT_LT(*hung - marked, 3 + 5) << err0 << err1;
}

TEST_F(HangTest, CohortctlStatusShowsTheCulpritWhileTheJobIsStillHung) {
  COHORT_REQUIRE_TORCH();
  // Reported, not stopped (--hang-report-after alone): the job stays hung until the test ends it.
  const int port = free_port();
  const std::string mark = dir_ + "/mark";
  Subprocess job(cohortrun({"--nproc-per-node", "2", "--master-port", std::to_string(port),
                            "--rdzv-id", "hung-job", "--hang-report-after", "3"},
                           {COHORT_SOURCE_DIR "/tests/interop/hang_scenarios.py"}),
                 {"PYTHON_EXEC=" + torch_python(), "HANG_SCENARIO=stall", "HANG_MARK=" + mark});
  job.close_stdin();
  std::string status;
  const bool named = wait_for(
      [&] {
        Subprocess ctl({COHORTCTL_BIN, "status", "--store", "127.0.0.1:" + std::to_string(port),
                        "--job", "hung-job", "--json"});
        ctl.close_stdin();
        status = ctl.read_all_stdout(10s);
        ctl.wait(10s);
        return status.find("\"verdict\":\"hung\"") != std::string::npos;
      },
      120s);
  ::kill(-job.pid(), SIGTERM);
  EXPECT_TRUE(job.wait(60s).has_value());
  ASSERT_TRUE(named) << status;
  EXPECT_NE(status.find("\"rank\":1"), std::string::npos) << status;
  EXPECT_NE(status.find("never entered"), std::string::npos) << status;
  EXPECT_NE(status.find("stuck_in_data_loading"), std::string::npos) << status;
  EXPECT_NE(status.find("waits in"), std::string::npos) << status;
}

}  // namespace
}  // namespace cohort::testing

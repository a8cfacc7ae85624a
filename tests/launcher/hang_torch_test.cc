// A hung PyTorch worker, found by the heartbeats cohortrun's worker module gives an unchanged
// script, and its Python stack in the failure summary; a worker whose elastic file timer expires,
// killed as torchrun 2.x kills it (real PyTorch, each generation).
#include <gtest/gtest.h>

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
  EXPECT_NE(summary.find("hung: no heartbeat for 3 s (its stack, asked for with SIGABRT"),
            std::string::npos)
      << summary;
  // faulthandler's dump: where the hung thread was.
  EXPECT_NE(summary.find("stuck_waiting_for_data"), std::string::npos) << summary;
  // Found within the timeout and a beat, after PyTorch's start-up (not after its 600 s sleep).
  EXPECT_LT(took, 60s);
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

}  // namespace
}  // namespace cohort::testing

// torchrun 2.x's launcher features in cohortrun, on real processes: --virtual-local-rank, the
// event log, duplicate filters and the log-line prefix template, --standalone among cluster
// defaults, torch.distributed.launch's --local-rank argument, and c10d endpoints on port 0.
#include <gtest/gtest.h>

#include <fstream>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST_F(LauncherTest, VirtualLocalRankGivesEachWorkerItsOwnDeviceAsZero) {
  auto r = run(cohortrun({"--nproc-per-node", "2", "--virtual-local-rank"}, test_worker({})),
               {"CUDA_VISIBLE_DEVICES=3,5"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  for (int rank : {0, 1}) {
    auto env = worker_env(rank, 0);
    EXPECT_EQ(env["LOCAL_RANK"], "0");
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], rank == 0 ? "3" : "5");
  }
  auto plain =
      run(cohortrun({"--nproc-per-node", "2"}, test_worker({})), {"CUDA_VISIBLE_DEVICES=3,5"});
  ASSERT_EQ(plain.exit_code(), 0) << plain.err;
  EXPECT_EQ(worker_env(1, 0)["LOCAL_RANK"], "1");
  EXPECT_EQ(worker_env(1, 0)["CUDA_VISIBLE_DEVICES"], "3,5");
}

TEST_F(LauncherTest, DevicesChooseTheGpusAndTheWorkerCount) {
  // Two devices: two workers; the list is what they see, in that order, and each knows its own.
  auto r = run(cohortrun({"--devices", "2,5"}, test_worker({})), {"CUDA_VISIBLE_DEVICES=0,1,2,5"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  for (int rank : {0, 1}) {
    auto env = worker_env(rank, 0);
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank));
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "2,5");
    EXPECT_EQ(env["COHORT_DEVICE"], rank == 0 ? "2" : "5");
  }
  EXPECT_FALSE(exists(worker_file(2, 0, "env")));
  // With --virtual-local-rank each sees only its own, as device 0.
  auto v = run(cohortrun({"--devices", "4,7", "--virtual-local-rank"}, test_worker({})));
  ASSERT_EQ(v.exit_code(), 0) << v.err;
  EXPECT_EQ(worker_env(1, 0)["CUDA_VISIBLE_DEVICES"], "7");
  EXPECT_EQ(worker_env(1, 0)["LOCAL_RANK"], "0");
  // More workers than devices is refused up front, naming both.
  auto bad = run(cohortrun({"--devices", "2,5", "--nproc-per-node", "3"}, test_worker({})));
  EXPECT_EQ(bad.exit_code(), 2) << bad.err;
  EXPECT_NE(bad.err.find("--devices names only 2"), std::string::npos) << bad.err;
}

TEST_F(LauncherTest, ConsoleEventLogHandlerPrintsTorchrunsEvents) {
  auto r = run(
      cohortrun({"--nproc-per-node", "2", "--event-log-handler", "console", "--max-restarts", "0"},
                test_worker({"--exit-code", "4", "--on-rank", "1"})));
  ASSERT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_EQ(count_of(r.err, "\"name\":\"torchelastic.worker.status.START\""), 2u) << r.err;
  EXPECT_EQ(count_of(r.err, "\"name\":\"torchelastic.worker.status.FAILED\",\"source\":\"WORKER\""),
            1u);
  EXPECT_NE(r.err.find("\\\"exit_code\\\":[4]"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("\"source\":\"AGENT\""), std::string::npos) << r.err;
  auto quiet = run(cohortrun({"--nproc-per-node", "1"}, test_worker({})));
  EXPECT_EQ(quiet.err.find("torchelastic.worker.status"), std::string::npos);
}

TEST_F(LauncherTest, DuplicateFiltersAndThePrefixTemplate) {
  auto r = run(cohortrun({"--nproc-per-node", "2", "-t", "3", "--log-dir", dir_ + "/logs",
                          "--duplicate-stdout-filters", "line 1,line 3",
                          "--log-line-prefix-template", "${hostname}:${rank}:${local_rank}| "},
                         test_worker({"--lines", "5"})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.out.find(":1:1| out line 4\n"), std::string::npos) << r.out;
  std::string filtered;
  for (auto& run_dir : std::filesystem::directory_iterator(dir_ + "/logs"))
    filtered = read_file(run_dir.path().string() + "/attempt_0/filtered_stdout.log");
  EXPECT_EQ(count_of(filtered, "\n"), 4u) << filtered;  // lines 1 and 3 of both ranks
  EXPECT_NE(filtered.find(":0:0| out line 1\n"), std::string::npos) << filtered;
  EXPECT_NE(filtered.find(":1:1| out line 3\n"), std::string::npos) << filtered;
  EXPECT_EQ(filtered.find("line 2"), std::string::npos) << filtered;
}

TEST_F(LauncherTest, StandaloneIgnoresClusterRendezvousDefaultsWithOneWarning) {
  auto r = run(cohortrun({"--standalone", "--nproc-per-node", "2"}, test_worker({})),
               {"PET_RDZV_BACKEND=c10d", "PET_RDZV_ENDPOINT=10.255.255.1:29400"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(count_of(r.err, "--standalone: ignoring --rdzv-backend, --rdzv-endpoint"), 1u) << r.err;
}

TEST_F(LauncherTest, AppendLocalRankGivesEachWorkerItsLocalRankArgument) {
  const std::string script = COHORT_SOURCE_DIR "/tests/launcher/print_args.py";
  auto r = run(cohortrun({"--nproc-per-node", "2", "--append-local-rank"}, {script, "--lr", "3"}),
               {"COHORT_TEST_OUT=" + dir_, "PYTHON_EXEC=/usr/bin/python3"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(read_file(dir_ + "/1.args"), "--local-rank=1\n--lr\n3\n");
  auto old =
      run(cohortrun({"--nproc-per-node", "1", "--local-rank-flag", "--local_rank"}, {script}),
          {"COHORT_TEST_OUT=" + dir_, "PYTHON_EXEC=/usr/bin/python3"});
  ASSERT_EQ(old.exit_code(), 0) << old.err;
  EXPECT_EQ(read_file(dir_ + "/0.args"), "--local_rank=0\n");
}

TEST_F(LauncherTest, TwoJobsOnLocalhostPortZeroRunSideBySide) {
  auto job = [&](const std::string& name) {
    return cohortrun({"--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                      "localhost:0", "--rdzv-id", name},
                     test_worker({"--sleep", "1"}));
  };
  Subprocess a(job("a")), b(job("b"));
  auto sa = a.wait(60s), sb = b.wait(60s);
  ASSERT_TRUE(sa && sb);
  EXPECT_EQ(WEXITSTATUS(*sa), 0) << a.read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*sb), 0) << b.read_all_stderr(1s);
  auto multi =
      run(cohortrun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"},
                    test_worker({})));
  EXPECT_EQ(multi.exit_code(), 2);
  EXPECT_NE(multi.err.find("port 0 (a free port) works only for a one-node job"), std::string::npos)
      << multi.err;
}

}  // namespace
}  // namespace cohort::testing

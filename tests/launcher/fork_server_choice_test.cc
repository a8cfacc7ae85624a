// When cohortrun starts fork servers for a Python job, and what a restart does when a server
// cannot serve: decisions of cohortrun's, the same for every PyTorch, so these run once, on a job
// that never imports torch (ForkServerTorchTest checks the forked workers under each PyTorch).
// The servers run the build's Python (COHORT_TORCH_PYTHON) and import what it has.
#include <gtest/gtest.h>

#include <fstream>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

class ForkServerChoiceTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    // Rank 1 of attempt 0 fails; every other worker succeeds.
    job_ = dir_ + "/job.py";
    std::ofstream(job_) << "import os\n"
                        << "if os.environ['TORCHELASTIC_RESTART_COUNT'] == '0' and "
                        << "os.environ['RANK'] == '1':\n"
                        << "    os._exit(3)\n";
  }

  RunResult run_job(std::vector<std::string> flags, std::vector<std::string> env = {}) {
    std::vector<std::string> args{"--nproc-per-node", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    env.push_back("COHORT_LOG_LEVEL=info");
    return run(cohortrun(args, {job_}), env, 120s);
  }

  std::string job_;
};

// The case the others turn off: a job that can restart has its restart forked.
TEST_F(ForkServerChoiceTest, AJobThatCanRestartIsRestartedFromItsServers) {
  auto r = run_job({"--max-restarts", "1"});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(count_of(r.err, "worker forked by its fork server"), 2u) << r.err;
}

TEST_F(ForkServerChoiceTest, TurnedOffByFlagOrVariableNoServerStarts) {
  for (bool by_flag : {true, false}) {
    SCOPED_TRACE(by_flag ? "--no-fork-server" : "COHORT_FORK_SERVER=0");
    std::vector<std::string> flags{"--max-restarts", "1"};
    if (by_flag) flags.push_back("--no-fork-server");
    auto r = run_job(flags, by_flag ? std::vector<std::string>{}
                                    : std::vector<std::string>{"COHORT_FORK_SERVER=0"});
    ASSERT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_EQ(r.err.find("fork server"), std::string::npos) << r.err;
  }
}

TEST_F(ForkServerChoiceTest, WithoutRestartsNoServerStarts) {
  auto r = run_job({"--max-restarts", "0"});
  // Rank 1 fails and nothing restarts it.
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_EQ(r.err.find("fork server"), std::string::npos) << r.err;
}

TEST_F(ForkServerChoiceTest, AServerThatDiesAtStartLeavesTheRestartToExec) {
  std::ofstream(dir_ + "/dies.py") << "import os\nos._exit(9)\n";
  auto r = run_job({"--max-restarts", "1"}, {"COHORT_FORK_PRELOAD=dies", "PYTHONPATH=" + dir_});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("cannot serve: it exited with code 9"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.err, "worker forked by its fork server"), 0u) << r.err;
}

}  // namespace
}  // namespace cohort::testing

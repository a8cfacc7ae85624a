// What a newcomer meets with a real PyTorch script (once per PyTorch generation): the descriptors
// a worker and its DataLoader inherit, and the failure summary of a Python worker that dies of a
// signal (issue 27).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const std::string kInterop = COHORT_SOURCE_DIR "/tests/interop/";

class NewcomerTest : public LauncherTest {
 protected:
  void SetUp() override {
    COHORT_REQUIRE_TORCH();
    LauncherTest::SetUp();
  }
  // What tests/interop/descriptors_worker.py wrote for `rank`.
  nlohmann::json descriptors(int rank) {
    std::ifstream f(dir_ + "/fds." + std::to_string(rank) + ".json");
    return nlohmann::json::parse(f, nullptr, false);
  }
  void expect_nothing_inherited(const std::string& how) {
    for (int rank : {0, 1}) {
      auto d = descriptors(rank);
      ASSERT_FALSE(d.is_discarded()) << how << ": rank " << rank << " wrote nothing";
      // Only the heartbeat pipe (torchrun's workers hold nothing above 2).
      const std::string heartbeat = std::to_string(d["heartbeat"].get<int>()) + " -> ";
      ASSERT_EQ(d["start"].size(), 1u) << how << ": " << d.dump();
      EXPECT_EQ(d["start"][0].get<std::string>().rfind(heartbeat, 0), 0u) << d.dump();
      EXPECT_TRUE(d["shared"].empty())
          << how << ": the DataLoader worker holds cohortrun's " << d["shared"].dump();
    }
  }
};

TEST_F(NewcomerTest, WorkersAndTheirDataLoadersHoldNoDescriptorOfCohortrun) {
  // A descriptor cohortrun inherited without close-on-exec (as from a shell's redirection).
  const int inherited = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(inherited, 3);
  // Standalone: the workers' store is inside cohortrun, its listening socket and the server side
  // of every worker's connection open there when the workers start.
  auto r = run(cohortrun({"--nproc-per-node", "2"}, {kInterop + "descriptors_worker.py"}),
               {"OUT=" + dir_}, 180s);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  expect_nothing_inherited("standalone");
  for (int rank : {0, 1}) std::filesystem::remove(dir_ + "/fds." + std::to_string(rank) + ".json");
  // A c10d endpoint this agent serves: its cohortd, the agent's store connections, the round's
  // worker store.
  const int port = free_port();
  r = run(cohortrun({"--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                     "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "fds"},
                    {kInterop + "descriptors_worker.py"}),
          {"OUT=" + dir_}, 180s);
  ::close(inherited);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  expect_nothing_inherited("c10d");
}

TEST_F(NewcomerTest, FaulthandlersModuleListStaysOutOfTheSummary) {
  // After a fatal signal's stack, faulthandler lists every extension module loaded (torch's are
  // many): a line of kilobytes in every summary.
  const std::string script = dir_ + "/abort.py";
  std::ofstream(script) << "import os, torch\n"
                           "def deep_in_the_step():\n"
                           "    os.abort()\n"
                           "deep_in_the_step()\n";
  auto r = run(cohortrun({"--nproc-per-node", "1", "--max-restarts", "0"}, {script}),
               {"PYTHONFAULTHANDLER=1"}, 120s);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  const size_t summary = r.err.find("Root Cause");
  ASSERT_NE(summary, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("deep_in_the_step", summary), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("Extension modules:", summary), std::string::npos) << r.err;
}

TEST_F(NewcomerTest, ATorchDistributedLaunchScriptRunsWithOneFlagAndTheSummaryNamesIt) {
  const std::string script = kInterop + "local_rank_arg.py";
  // torchrun 2.x's --local-rank=N: argparse refuses it; the summary names the flag that works,
  // and the interpreter with the PyTorch it found.
  auto wrong =
      run(cohortrun({"--nproc-per-node", "2", "--append-local-rank"}, {script, "--epochs", "1"}),
          {}, 120s);
  EXPECT_EQ(wrong.exit_code(), 1) << wrong.err;
  EXPECT_NE(wrong.err.find("unrecognized arguments: --local-rank"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("run it with --legacy-local-rank"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("the workers ran under PYTHON_EXEC=" + torch_python() + ": Python "),
            std::string::npos)
      << wrong.err;
  EXPECT_NE(wrong.err.find("torch " + torch_version()), std::string::npos) << wrong.err;
  auto right =
      run(cohortrun({"--nproc-per-node", "2", "--legacy-local-rank"}, {script, "--epochs", "1"}),
          {}, 120s);
  EXPECT_EQ(right.exit_code(), 0) << right.err;
  EXPECT_EQ(count_of(right.out + right.err, "allreduce ok"), 2u) << right.out << right.err;
}

}  // namespace
}  // namespace cohort::testing

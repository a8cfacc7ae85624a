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
      // Only the heartbeat pipe and the control socket of hang probes (torchrun's workers hold
      // nothing above 2).
      const std::string heartbeat = std::to_string(d["heartbeat"].get<int>()) + " -> pipe:";
      const std::string control = std::to_string(d["control"].get<int>()) + " -> socket:";
      ASSERT_EQ(d["start"].size(), 2u) << how << ": " << d.dump();
      int found = 0;
      for (const auto& fd : d["start"]) {
        const std::string what = fd.get<std::string>();
        found += what.rfind(heartbeat, 0) == 0 || what.rfind(control, 0) == 0;
      }
      EXPECT_EQ(found, 2) << d.dump();
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

// A cohortd on a free port of 127.0.0.1 for the nodes to meet at; its port.
int start_endpoint(std::unique_ptr<Subprocess>* store) {
  *store = std::make_unique<Subprocess>(
      std::vector<std::string>{COHORTD_BIN, "--host", "127.0.0.1", "--port", "0"});
  const std::string line = (*store)->read_line(std::chrono::seconds(10)).value_or(":0");
  return std::stoi(line.substr(line.rfind(':') + 1));
}

// cohortrun in `folder`, as a node started there by hand would be.
std::vector<std::string> in_folder(const std::string& folder,
                                   const std::vector<std::string>& argv) {
  std::string cmd = "cd '" + folder + "' && exec";
  for (const auto& a : argv) cmd += " '" + a + "'";
  return {"/bin/sh", "-c", cmd};
}

TEST_F(NewcomerTest, NodesStartedTheUsualWayMeetWithoutARunId) {
  // The same script, one node by its full path and with an argument of its own, the other from
  // its folder as ./gloo_worker.py with another: one job (they waited apart for 600 s).
  std::unique_ptr<Subprocess> store;
  const std::string endpoint = "127.0.0.1:" + std::to_string(start_endpoint(&store));
  auto node = [&](const std::string& script, const std::string& out) {
    return cohortrun({"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", endpoint, "--local-addr", "127.0.0.1"},
                     {script, "--output_dir", out});
  };
  const std::vector<std::string> env{"PYTHON_EXEC=" + torch_python()};
  Subprocess a(node(kInterop + "gloo_worker.py", dir_ + "/a"), env);
  Subprocess b(in_folder(kInterop, node("./gloo_worker.py", dir_ + "/b")), env);
  auto sa = a.wait(180s), sb = b.wait(180s);
  const std::string out = a.read_all_stdout(2s) + b.read_all_stdout(2s);
  const std::string err = a.read_all_stderr(2s) + b.read_all_stderr(2s);
  ASSERT_TRUE(sa && sb) << err;
  EXPECT_EQ(WEXITSTATUS(*sa), 0) << err;
  EXPECT_EQ(WEXITSTATUS(*sb), 0) << err;
  EXPECT_EQ(count_of(out, "/2: allreduce ok"), 2u) << out << err;
}

TEST_F(NewcomerTest, NodesWaitingApartAtOneEndpointSaySoAndNameTheFix) {
  // Two scripts: two run ids. Each node says within seconds that the other waits there.
  std::unique_ptr<Subprocess> store;
  const std::string endpoint = "127.0.0.1:" + std::to_string(start_endpoint(&store));
  const std::string other = dir_ + "/other_worker.py";
  std::filesystem::copy_file(kInterop + "gloo_worker.py", other);
  auto node = [&](const std::string& script) {
    return cohortrun({"--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", endpoint, "--local-addr", "127.0.0.1"},
                     {script});
  };
  const std::vector<std::string> env{"PYTHON_EXEC=" + torch_python()};
  Subprocess a(node(kInterop + "gloo_worker.py"), env), b(node(other), env);
  std::string err_a, err_b;
  const auto start = std::chrono::steady_clock::now();
  const bool said = wait_for(
      [&] {
        err_a += a.read_some_stderr(std::chrono::milliseconds(50));
        err_b += b.read_some_stderr(std::chrono::milliseconds(50));
        return err_a.find("nodes of another job wait") != std::string::npos &&
               err_b.find("nodes of another job wait") != std::string::npos;
      },
      30s);
  const auto took = std::chrono::steady_clock::now() - start;
  a.signal(SIGTERM);
  b.signal(SIGTERM);
  a.wait(10s);
  b.wait(10s);
  ASSERT_TRUE(said) << err_a << err_b;
  EXPECT_LT(took, 10s);
  EXPECT_NE(err_a.find("(other_worker.py, --nnodes 2:2"), std::string::npos) << err_a;
  EXPECT_NE(err_b.find("(gloo_worker.py, --nnodes 2:2"), std::string::npos) << err_b;
  EXPECT_NE(err_a.find("start every node with the same --rdzv-id"), std::string::npos) << err_a;
}

}  // namespace
}  // namespace cohort::testing

// Restarted PyTorch workers forked from cohortrun's fork servers (real PyTorch, each generation):
// attempt 1 is forked and is the process attempt 0 (exec'd) was, in all that a worker can see;
// a module changed between attempts is read anew; a server with CUDA initialised in it leaves the
// restart to an ordinary exec, and the job heals; a forked worker's tree dies with cohortrun.
// When servers start at all, and a server dead at start, are the same for every PyTorch:
// fork_server_choice_test.cc, once.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const std::string kProbe = COHORT_SOURCE_DIR "/tests/interop/fork_probe.py";

class ForkServerTorchTest : public LauncherTest {
 protected:
  void SetUp() override {
    LauncherTest::SetUp();
    // The probe and its helper module, in a folder of the test's own (the tests change them).
    for (const char* f : {"fork_probe.py", "fork_probe_helper.py"})
      std::filesystem::copy_file(COHORT_SOURCE_DIR "/tests/interop/" + std::string(f),
                                 dir_ + "/" + f);
    probe_ = dir_ + "/fork_probe.py";
  }

  // cohortrun, 2 workers, the probe with `action`; output records <dir>/<rank>.<attempt>.json.
  RunResult run_probe(std::vector<std::string> flags, const std::string& action,
                      std::vector<std::string> env = {}) {
    std::vector<std::string> args{"--nproc-per-node", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    env.push_back("COHORT_LOG_LEVEL=info");
    return run(cohortrun(args, {probe_, dir_ + "/%(rank)s.%(attempt)s.json", action}), env, 180s);
  }

  nlohmann::json record(int rank, int attempt) {
    std::ifstream f(dir_ + "/" + std::to_string(rank) + "." + std::to_string(attempt) + ".json");
    if (!f) return nullptr;
    return nlohmann::json::parse(f, nullptr, false);
  }

  std::string probe_;
};

// What differs between two attempts of one rank, and must: the launcher's per-attempt variables.
const std::set<std::string> kPerAttempt = {
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE", "MASTER_PORT", "COHORT_RESTART_REASON",
    "COHORT_RESTART_FAILED_RANK", "COHORT_RESTART_FAILED_HOST", "COHORT_HEARTBEAT_FD",
    "COHORT_WORKER_PID", "COHORT_CONTROL_FD",
    // In the attempt's log folder (worker_specs.cc).
    "TORCH_NCCL_DEBUG_INFO_PIPE_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"};

TEST_F(ForkServerTorchTest, ARestartedWorkerIsForkedAndIsWhatAnExecdOneWas) {
  COHORT_REQUIRE_TORCH();
  auto r = run_probe({"--max-restarts", "1"}, "crash-once");
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(count_of(r.err, "worker forked by its fork server"), 2u) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    nlohmann::json e = record(rank, 0), f = record(rank, 1);
    ASSERT_TRUE(e.is_object() && f.is_object());
    EXPECT_FALSE(e["forked"].get<bool>());
    EXPECT_TRUE(f["forked"].get<bool>()) << "attempt 1 was not forked from the server";
    // The heartbeat pipe and the control socket may have other numbers in each attempt; their
    // kinds may not.
    for (nlohmann::json* rec : {&e, &f}) {
      for (const auto& [var, name] :
           {std::pair{"COHORT_HEARTBEAT_FD", "HB"}, std::pair{"COHORT_CONTROL_FD", "CONTROL"}}) {
        if (!(*rec)["env"].contains(var)) continue;
        const std::string fd = (*rec)["env"][var];
        (*rec)["fds"][name] = (*rec)["fds"][fd];
        (*rec)["fds"].erase(fd);
      }
      for (const auto& k : kPerAttempt) (*rec)["env"].erase(k);
      // The probe writes its record to a file named after the attempt.
      for (auto& [fd, what] : (*rec)["fds"].items())
        if (what.get<std::string>().ends_with(".json.tmp")) what = "record";
    }
    for (const auto& [key, value] : e.items()) {
      if (key == "forked" || key == "pid" || key == "random" || key == "numpy_random") continue;
      if (key == "argv" || key == "orig_argv" || key == "cmdline") continue;  // below
      EXPECT_EQ(f[key], value) << key;
    }
    // The command line names the same template; only its expansion differs.
    EXPECT_EQ(f["argv"], e["argv"]);
    EXPECT_EQ(f["orig_argv"], e["orig_argv"]);
    EXPECT_EQ(f["cmdline"], e["cmdline"]) << "ps shows another command line";
    EXPECT_EQ(f["ppid"], e["ppid"]) << "not cohortrun's child";
    EXPECT_TRUE(f["leads_group"].get<bool>());
    EXPECT_EQ(f["pdeathsig"].get<int>(), SIGKILL);
    EXPECT_NE(f["random"], e["random"]);
  }
}

TEST_F(ForkServerTorchTest, AModuleChangedBetweenAttemptsIsReadAgain) {
  COHORT_REQUIRE_TORCH();
  // marked.py is pre-imported by the servers (COHORT_FORK_PRELOAD); attempt 0 changes it once a
  // server has imported it (the module notes each import), then crashes. Attempt 1 must see the
  // new text (its server is stale: exec'd), and so must attempt 2 (forked by a new server).
  const std::string marked = dir_ + "/marked.py";
  std::ofstream(marked) << "import os\n"
                        << "VALUE = 'old'\n"
                        << "open(" << nlohmann::json(dir_ + "/imports").dump()
                        << ", 'a').write('%d\\n' % os.getpid())\n";
  std::ofstream(dir_ + "/job.py")
      << "import os, sys, time\n"
      << "import marked\n"
      << "d = " << nlohmann::json(dir_).dump() << "\n"
      << "rank, attempt = os.environ['RANK'], os.environ['TORCHELASTIC_RESTART_COUNT']\n"
      << "open('%s/value.%s.%s' % (d, rank, attempt), 'w').write(marked.VALUE)\n"
      << "if attempt == '0' and rank == '1':\n"
      << "    deadline = time.monotonic() + 120\n"
      << "    while time.monotonic() < deadline:  # until both servers imported marked\n"
      << "        pids = set(open(d + '/imports').read().split()) - {str(os.getpid())}\n"
      << "        if len(pids) >= 3: break  # rank 0's and the two servers'\n"
      << "        time.sleep(0.05)\n"
      << "    open(" << nlohmann::json(marked).dump()
      << ", 'w').write(\"VALUE = 'new, longer'\\n\")\n"
      << "    os._exit(3)\n"
      << "if attempt == '1' and rank == '1':\n"
      << "    os._exit(3)\n";
  auto r = run(cohortrun({"--nproc-per-node", "2", "--max-restarts", "2"}, {dir_ + "/job.py"}),
               {"COHORT_LOG_LEVEL=info", "COHORT_FORK_PRELOAD=marked", "PYTHONPATH=" + dir_}, 180s);
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  auto value = [&](int rank, int attempt) {
    std::ifstream f(dir_ + "/value." + std::to_string(rank) + "." + std::to_string(attempt));
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(value(rank, 0), "old");
    EXPECT_EQ(value(rank, 1), "new, longer");
    EXPECT_EQ(value(rank, 2), "new, longer");
  }
  EXPECT_NE(r.err.find("changed on disk"), std::string::npos) << r.err;
  EXPECT_GE(count_of(r.err, "worker forked by its fork server"), 2u) << r.err;  // attempt 2
}

TEST_F(ForkServerTorchTest, AServerWithCudaInitialisedIsRefusedAndTheRestartExecs) {
  COHORT_REQUIRE_TORCH();
  // No GPU here: the module marks CUDA initialised as torch.cuda itself records it.
  std::ofstream(dir_ + "/cuda_marker.py") << "import torch\ntorch.cuda._initialized = True\n";
  auto r = run_probe({"--max-restarts", "1"}, "crash-once",
                     {"COHORT_FORK_PRELOAD=cuda_marker", "PYTHONPATH=" + dir_});
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_NE(r.err.find("CUDA is initialised in the fork server"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.err, "worker forked by its fork server"), 0u) << r.err;
  for (int rank = 0; rank < 2; ++rank) EXPECT_FALSE(record(rank, 1)["forked"].get<bool>());
}

TEST_F(ForkServerTorchTest, AForkedWorkersExceptionIsSummarisedWithTheScriptsTraceback) {
  COHORT_REQUIRE_TORCH();
  auto r = run_probe({"--max-restarts", "1"}, "crash-once-then:raise");
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_EQ(count_of(r.err, "worker forked by its fork server"), 2u) << r.err;
  const auto root = r.err.find("Root Cause");
  ASSERT_NE(root, std::string::npos) << r.err;
  const std::string summary = r.err.substr(root);
  EXPECT_NE(summary.find("ValueError: the probe raised on purpose"), std::string::npos) << summary;
  EXPECT_NE(summary.find("fork_probe.py\", line"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("_forkserver"), std::string::npos) << summary;
}

TEST_F(ForkServerTorchTest, AForkedWorkersTreeAndTheServersDieWithAKilledCohortrun) {
  COHORT_REQUIRE_TORCH();
  std::vector<std::string> argv =
      cohortrun({"--nproc-per-node", "2", "--max-restarts", "1"},
                {probe_, dir_ + "/%(rank)s.%(attempt)s.json", "crash-once-then:family"});
  Subprocess p(argv, {"PYTHON_EXEC=" + torch_python(), "COHORT_LOG_LEVEL=info"});
  p.close_stdin();
  std::vector<pid_t> pids;
  ASSERT_TRUE(wait_for(
      [&] {
        pids.clear();
        for (int rank = 0; rank < 2; ++rank) {
          std::ifstream f(dir_ + "/" + std::to_string(rank) + ".1.json.family");
          for (pid_t pid; f >> pid;) pids.push_back(pid);
        }
        return pids.size() == 4;
      },
      150s))
      << p.read_all_stderr(1000ms);
  // The fork servers: cohortrun's children running _forkserver.py.
  std::vector<pid_t> servers;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string cmdline = proc_text("/proc/" + name + "/cmdline");
    if (cmdline.find("_forkserver.py") != std::string::npos &&
        proc_text("/proc/" + name + "/stat").find(") S " + std::to_string(p.pid()) + " ") !=
            std::string::npos)
      servers.push_back(std::stoi(name));
  }
  EXPECT_EQ(servers.size(), 2u);
  pids.insert(pids.end(), servers.begin(), servers.end());
  ::kill(p.pid(), SIGKILL);
  p.wait(10s);
  EXPECT_TRUE(wait_for(
      [&] {
        for (pid_t pid : pids)
          if (::kill(pid, 0) == 0 &&
              proc_text("/proc/" + std::to_string(pid) + "/stat").find(") Z ") == std::string::npos)
            return false;
        return true;
      },
      10s))
      << "a forked worker, its child or a fork server outlived cohortrun";
}

}  // namespace
}  // namespace cohort::testing

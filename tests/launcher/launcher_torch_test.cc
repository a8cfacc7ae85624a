// cohortrun with real PyTorch 1.13: the same worker environment as torchrun, a DDP script, and a
// two-node gloo job whose store is the embedded cohortd.
#include <gtest/gtest.h>

#include <regex>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;

const std::string kInterop = COHORT_SOURCE_DIR "/tests/interop/";

TEST_F(LauncherTest, WorkerEnvironmentMatchesTorchrun) {
  // Debian's torchrun 1.13 crashes on Python 3.11 without explicit -r/-t values (see
  // docs/TORCHRUN.md §3.1), hence -r 1 -t 1.
  std::string torch_dir = dir_ + "/torchrun", ours_dir = dir_ + "/cohortrun";
  std::filesystem::create_directories(torch_dir);
  std::filesystem::create_directories(ours_dir);
  // This generation's own torchrun (1.13 or 2.x).
  auto t = run({torch_bin_dir() + "/torchrun", "--nproc_per_node", "2", "--no_python", "-r", "1",
                "-t", "1", TEST_WORKER_BIN, "--out", torch_dir},
               {}, 120s);
  ASSERT_EQ(t.exit_code(), 0) << t.err;
  auto c = run(cohortrun({"--nproc_per_node", "2", "--no_python", "-r", "1", "-t", "1"},
                         {TEST_WORKER_BIN, "--out", ours_dir}));
  ASSERT_EQ(c.exit_code(), 0) << c.err;

  auto load = [](const std::string& path) {
    std::map<std::string, std::string> env;
    std::ifstream f(path);
    std::string line;
    while (std::getline(f, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return env;
  };
  std::map<std::string, std::string> parent;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    parent[kv.substr(0, kv.find('='))] = kv.substr(kv.find('=') + 1);
  }
  for (int rank = 0; rank < 2; ++rank) {
    auto te = load(torch_dir + "/" + std::to_string(rank) + ".attempt0.env");
    auto ce = load(ours_dir + "/" + std::to_string(rank) + ".attempt0.env");
    ASSERT_FALSE(te.empty());
    int compared = 0;
    for (const auto& [k, v] : te) {
      if (k == "_" || (parent.contains(k) && parent[k] == v)) continue;  // inherited, or shell's
      ++compared;
      // 1.13's spelling, deprecated in 2.x (which warns about it): cohortrun sets only
      // TORCH_NCCL_ASYNC_ERROR_HANDLING, as torchrun 2.x does (docs/TORCHRUN.md §3.2).
      if (k == "NCCL_ASYNC_ERROR_HANDLING" && torch_is_1x()) continue;
      ASSERT_TRUE(ce.contains(k)) << "cohortrun does not set " << k;
      if (k == "MASTER_ADDR" && v == "localhost") {
        // torchrun 2.x runs a single node without --master-port as --standalone (c10d on
        // localhost:0); cohortrun names the address it listens on (docs/TORCHRUN.md §3.2).
        EXPECT_EQ(ce[k], "127.0.0.1");
      } else if (k == "TORCHELASTIC_RUN_ID" && !torch_is_1x()) {
        // ... and gives that job a random uuid; cohortrun keeps static's "none".
        EXPECT_EQ(ce[k], "none");
      } else if (k == "MASTER_PORT") {
        EXPECT_TRUE(std::regex_match(ce[k], std::regex("[0-9]+")));
      } else if (k == "TORCHELASTIC_ERROR_FILE") {
        EXPECT_TRUE(std::regex_search(ce[k], std::regex("/none_[a-z0-9_]+/attempt_0/" +
                                                        std::to_string(rank) + "/error.json$")))
            << ce[k];
      } else if (k == "OMP_NUM_THREADS" && std::thread::hardware_concurrency() != 2) {
        // torchrun's blanket 1 against cohortrun's cores / workers: equal only on 2 cores.
      } else {
        EXPECT_EQ(ce[k], v) << k;
      }
    }
    EXPECT_GE(compared, 18) << "torchrun set fewer variables than expected";
    for (const auto& [k, v] : ce) {
      if (te.contains(k) || (parent.contains(k) && parent[k] == v)) continue;
      // 2.x's variables, which 1.13's torchrun does not set.
      EXPECT_TRUE(k.rfind("COHORT_", 0) == 0 || k == "TORCH_NCCL_ASYNC_ERROR_HANDLING" ||
                  k == "TORCHELASTIC_SIGNALS_TO_HANDLE")
          << "cohortrun adds " << k;
    }
  }
}

TEST_F(LauncherTest, PyTorchDdpScriptRunsUnchanged) {
  auto r = run(cohortrun({"--nproc-per-node", "2"}, {kInterop + "ddp_features.py"}), {}, 180s);
  ASSERT_EQ(r.exit_code(), 0) << r.out << r.err;
  EXPECT_EQ(count_of(r.out, ": ddp ok"), 2u) << r.out;
}

// A script that raises on rank 1, with and without torchrun's @record: with it, the error file
// PyTorch writes (each generation's own format) is the summary's source; without it, the
// worker's stderr. Either way the summary names the rank and shows the exception and its
// traceback; with @record the one restart allowed ran (its count is in the message).
TEST_F(LauncherTest, ARaisingScriptIsSummarisedWithAndWithoutRecord) {
  for (bool record : {true, false}) {
    SCOPED_TRACE(record ? "with @record" : "without @record");
    const std::string script = dir_ + (record ? "/raise_record.py" : "/raise_plain.py");
    std::ofstream(script) << "import os, time\n"
                          << "from torch.distributed.elastic.multiprocessing.errors import record\n"
                          << (record ? "@record\n" : "") << "def main():\n"
                          << "    if os.environ['RANK'] == '1':\n"
                          << "        raise KeyError('bad batch at attempt ' + "
                             "os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
                          << "    time.sleep(60)\n"
                          << "main()\n";
    const int restarts = record ? 1 : 0;  // one restart is enough to prove, and costs an attempt
    auto r = run(
        cohortrun({"--nproc-per-node", "2", "--max-restarts", std::to_string(restarts)}, {script}),
        {}, 120s);
    EXPECT_EQ(r.exit_code(), 1) << r.err;
    EXPECT_NE(r.err.find("FAILED"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("rank      : 1"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("KeyError"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("bad batch at attempt " + std::to_string(restarts)), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("Traceback (most recent call last)"), std::string::npos) << r.err;
    if (record) {
      EXPECT_TRUE(std::regex_search(r.err, std::regex("error_file: /.*/attempt_1/1/error.json")))
          << r.err;
    } else {
      EXPECT_NE(r.err.find("error_file: <N/A>"), std::string::npos) << r.err;
    }
  }
}

TEST_F(LauncherTest, ProtectedStoreAdmitsPyTorchWorkersOnlyFromListedNetworks) {
  std::string token = dir_ + "/token";
  std::ofstream(token) << "job-secret-of-16-bytes-or-more\n";
  auto refused = run(cohortrun({"--nproc-per-node", "2", "--auth-token-file", token},
                               {kInterop + "gloo_worker.py"}),
                     {}, 180s);
  EXPECT_EQ(refused.exit_code(), 1) << refused.out << refused.err;
  auto admitted = run(cohortrun({"--nproc-per-node", "2", "--auth-token-file", token,
                                 "--allow-unauthenticated-from", "127.0.0.0/8"},
                                {kInterop + "gloo_worker.py"}),
                      {}, 180s);
  EXPECT_EQ(admitted.exit_code(), 0) << admitted.err;
  EXPECT_EQ(count_of(admitted.out, "allreduce ok"), 2u) << admitted.out;
}

// A torchrun agent's store (PyTorch's libuv TCPStore server) as the c10d endpoint: cohortrun finds
// that it is not cohortd at its first connection, says so once and runs on plain operations.
// PyTorch's classic server, whose COMPARE_SET wakes no waiter, is refused at once, by name.
TEST_F(LauncherTest, AnElasticJobRunsOnPyTorchsLibuvStoreAndRefusesTheClassicOne) {
  COHORT_REQUIRE_TORCH();
  if (torch_is_1x()) {
    GTEST_SKIP() << "1.13's server speaks the 1.13 dialect only; c10d agents speak the current one";
  }
  auto job = [&](const std::string& port) {
    return run(cohortrun({"--nnodes", "1", "--nproc-per-node", "2", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", "127.0.0.1:" + port, "--rdzv-id", "on-torch"},
                         {kInterop + "gloo_worker.py"}),
               {}, 180s);
  };
  {
    Subprocess server({torch_python(), kInterop + "torch_store_server.py", "libuv"});
    auto port = server.read_line(60s);
    ASSERT_TRUE(port) << "no port";
    auto r = job(*port);
    EXPECT_EQ(r.exit_code(), 0) << r.err;
    EXPECT_EQ(count_of(r.out, "allreduce ok"), 2u) << r.out;
    EXPECT_EQ(count_of(r.err, "is not cohortd but PyTorch's libuv TCPStore server"), 1u) << r.err;
  }
  Subprocess server({torch_python(), kInterop + "torch_store_server.py", "classic"});
  auto port = server.read_line(60s);
  ASSERT_TRUE(port) << "no port";
  const auto start = std::chrono::steady_clock::now();
  auto r = job(*port);
  EXPECT_EQ(r.exit_code(), 1) << r.err;
  EXPECT_NE(r.err.find("is PyTorch's classic TCPStore server"), std::string::npos) << r.err;
  EXPECT_EQ(count_of(r.out, "allreduce ok"), 0u) << r.out;
  EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);
}

TEST_F(LauncherTest, TwoStaticNodesRunAGlooJob) {
  std::string port = std::to_string(free_port());
  auto node = [&](int rank) {
    return cohortrun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
                      "--master-addr", "127.0.0.1", "--master-port", port},
                     {kInterop + "gloo_worker.py"});
  };
  std::vector<std::string> env{"PYTHON_EXEC=" + torch_python()};
  Subprocess n0(node(0), env), n1(node(1), env);
  auto s0 = n0.wait(180s), s1 = n1.wait(180s);
  ASSERT_TRUE(s0 && s1);
  std::string out0 = n0.read_all_stdout(1s), out1 = n1.read_all_stdout(1s);
  EXPECT_EQ(WEXITSTATUS(*s0), 0) << n0.read_all_stderr(1s);
  EXPECT_EQ(WEXITSTATUS(*s1), 0) << n1.read_all_stderr(1s);
  EXPECT_NE(out0.find("rank 0/2: allreduce ok"), std::string::npos) << out0;
  EXPECT_NE(out1.find("rank 1/2: allreduce ok"), std::string::npos) << out1;
}

}  // namespace
}  // namespace cohort::testing

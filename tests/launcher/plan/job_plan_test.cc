// JobPlan: a launch configuration resolved into what this node will do: the run id, the log
// directory, the worker command and the settings derived from the flags and the machine.
#include "plan/job_plan.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cohort/base/net.h"
#include "cohort/error.h"
#include "cohort/launch/cli.h"
#include "plan/node_resources.h"

namespace cohort::launch {
namespace {

namespace fs = std::filesystem;

// Each test's own log directory, removed afterwards.
class JobPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_job_plan_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The configuration `args` give (cohortrun's own parser), with --log-dir in this test's folder
  // unless `with_log_dir` is false.
  LaunchConfig config(std::vector<std::string> args, bool with_log_dir = true) {
    if (with_log_dir) args.insert(args.begin(), {"--log-dir", dir_.string()});
    std::vector<char*> argv;
    std::string name = "cohortrun";
    argv.push_back(name.data());
    for (auto& a : args) argv.push_back(a.data());
    LaunchConfig c;
    EXPECT_EQ(parse_cli(static_cast<int>(argv.size()), argv.data(), {}, &c).action,
              CliAction::kLaunch);
    return c;
  }

  bool has_note(const JobPlan& p, const std::string& words) {
    for (const auto& n : p.notes)
      if (n.find(words) != std::string::npos) return true;
    return false;
  }

  fs::path dir_;
  const EnvMap env_{{"PATH", "/usr/bin:/bin"}, {"PYTHON_EXEC", "/usr/bin/python3"}};
};

TEST_F(JobPlanTest, TheLogRootIsTheRunIdAndATagUnderTheLogDir) {
  const JobPlan p = make_plan(config({"--rdzv-id", "myjob", "train.py"}), env_);
  EXPECT_EQ(p.run_id, "myjob");
  const fs::path root(p.log_root);
  EXPECT_EQ(root.parent_path(), dir_);
  const std::string name = root.filename().string();
  ASSERT_EQ(name.size(), std::string("myjob_").size() + 8) << name;
  EXPECT_EQ(name.rfind("myjob_", 0), 0u) << name;
  EXPECT_TRUE(fs::is_directory(root));
  EXPECT_EQ(p.temp_log_base, "");
  // A second plan of the same job gets a directory of its own.
  EXPECT_NE(make_plan(config({"--rdzv-id", "myjob", "train.py"}), env_).log_root, p.log_root);
}

TEST_F(JobPlanTest, WithoutALogDirAFreshFolderUnderTmpdirIsMadeAndRemembered) {
  const char* old = std::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", dir_.c_str(), 1);
  const JobPlan p = make_plan(config({"train.py"}, /*with_log_dir=*/false), env_);
  if (old)
    ::setenv("TMPDIR", saved.c_str(), 1);
  else
    ::unsetenv("TMPDIR");
  const fs::path base(p.temp_log_base);
  EXPECT_EQ(base.parent_path(), dir_);
  EXPECT_EQ(base.filename().string().rfind("cohortrun_", 0), 0u) << base;
  EXPECT_EQ(fs::path(p.log_root).parent_path(), base);
  EXPECT_TRUE(fs::is_directory(p.log_root));
}

TEST_F(JobPlanTest, ALogDirThatCannotBeMadeIsAnIoErrorNamingIt) {
  std::ofstream(dir_ / "file") << "not a folder";
  try {
    make_plan(config({"--log-dir", (dir_ / "file" / "logs").string(), "train.py"}, false), env_);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "file" / "logs").string()), std::string::npos)
        << e.what();
  }
}

TEST_F(JobPlanTest, AStandaloneJobGetsARandomRunIdOnLoopback) {
  const JobPlan a = make_plan(config({"--standalone", "--master-addr", "10.0.0.9", "t.py"}), env_);
  const JobPlan b = make_plan(config({"--standalone", "t.py"}), env_);
  EXPECT_EQ(a.run_id.size(), 8u);
  EXPECT_NE(a.run_id, b.run_id);
  EXPECT_EQ(a.config.master_addr, "127.0.0.1");
}

TEST_F(JobPlanTest, AnElasticJobWithoutAnIdDerivesOneFromItsEntryPointAndEndpoint) {
  auto plan = [&](std::vector<std::string> args) {
    std::vector<std::string> all{"--nnodes", "1:2", "--rdzv-backend", "c10d"};
    all.insert(all.end(), args.begin(), args.end());
    return make_plan(config(all), env_);
  };
  const JobPlan a = plan({"--rdzv-endpoint", "h:29400", "train.py", "--lr", "1"});
  EXPECT_EQ(a.run_id.rfind("job-", 0), 0u) << a.run_id;
  EXPECT_EQ(a.run_id.size(), 16u) << a.run_id;
  EXPECT_TRUE(has_note(a, "no --rdzv-id: this job's run id is " + a.run_id));
  // Every node of the job derives the same id, whatever its own arguments and however it names
  // the script; a job of another script on the endpoint another one.
  EXPECT_EQ(plan({"--rdzv-endpoint", "h:29400", "train.py", "--lr", "1"}).run_id, a.run_id);
  EXPECT_EQ(plan({"--rdzv-endpoint", "h:29400", "train.py", "--output_dir", "/n1"}).run_id,
            a.run_id);
  EXPECT_EQ(plan({"--rdzv-endpoint", "h:29400", "./train.py"}).run_id, a.run_id);
  EXPECT_EQ(plan({"--rdzv-endpoint", "h:29400", "/home/me/job/train.py"}).run_id, a.run_id);
  EXPECT_EQ(plan({"--nnodes", "2", "--rdzv-endpoint", "h:29400", "train.py"}).run_id, a.run_id);
  EXPECT_NE(plan({"--rdzv-endpoint", "h:29400", "other.py", "--lr", "1"}).run_id, a.run_id);
  EXPECT_NE(plan({"--rdzv-endpoint", "g:29400", "train.py", "--lr", "1"}).run_id, a.run_id);
  // An id given, even "none" itself, is kept.
  EXPECT_EQ(plan({"--rdzv-endpoint", "h:29400", "--rdzv-id", "none", "train.py"}).run_id, "none");
  // A static job keeps torchrun's default.
  EXPECT_EQ(make_plan(config({"train.py"}), env_).run_id, "none");
}

TEST_F(JobPlanTest, TheWorkerCommandAndTheHost) {
  const JobPlan p = make_plan(config({"--rdzv-id", "x", "train.py", "--epochs", "3"}), env_);
  EXPECT_EQ(p.command.argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--epochs", "3"}));
  EXPECT_EQ(p.command.title, "train.py");
  EXPECT_EQ(p.command.interpreter, "/usr/bin/python3");
  EXPECT_EQ(p.host, hostname());
  const JobPlan direct = make_plan(config({"--no-python", "/bin/true"}), env_);
  EXPECT_EQ(direct.command.argv, (std::vector<std::string>{"/bin/true"}));
  EXPECT_EQ(direct.python_dir, "");  // not a Python worker: not looked for
}

TEST_F(JobPlanTest, SignalsToHandleSkipWhatCannotBeHandledWithANote) {
  const JobPlan p = make_plan(
      config({"--signals-to-handle", "SIGTERM,SIGKILL,,BOGUS,USR1,SIGSTOP", "t.py"}), env_);
  EXPECT_EQ(p.stop_signals, (std::vector<int>{SIGTERM, SIGUSR1}));
  EXPECT_TRUE(has_note(p, "ignoring 'SIGKILL'"));
  EXPECT_TRUE(has_note(p, "ignoring 'BOGUS'"));
  EXPECT_TRUE(has_note(p, "ignoring 'SIGSTOP'"));
  EXPECT_EQ(make_plan(config({"t.py"}), env_).stop_signals,
            (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
}

TEST_F(JobPlanTest, OmpThreadsShareTheCoresUnlessTheUserChose) {
  const JobPlan two = make_plan(config({"--nproc-per-node", "2", "t.py"}), env_);
  ASSERT_TRUE(two.omp_threads);
  EXPECT_EQ(*two.omp_threads, std::max(1, cpu_count() / 2));
  EXPECT_TRUE(has_note(two, "Setting OMP_NUM_THREADS=" + std::to_string(*two.omp_threads)));
  // One worker, or OMP_NUM_THREADS already set: left alone.
  EXPECT_FALSE(make_plan(config({"t.py"}), env_).omp_threads);
  EnvMap chosen = env_;
  chosen["OMP_NUM_THREADS"] = "4";
  EXPECT_FALSE(make_plan(config({"--nproc-per-node", "2", "t.py"}), chosen).omp_threads);
  // Under Slurm, the task's CPUs bound the cores.
  EnvMap slurm = env_;
  slurm["SLURM_JOB_ID"] = "7";
  slurm["SLURM_CPUS_PER_TASK"] = "1";
  EXPECT_EQ(*make_plan(config({"--nproc-per-node", "2", "t.py"}), slurm).omp_threads, 1);
}

TEST_F(JobPlanTest, RdzvConfIsParsedIntoThePlan) {
  const JobPlan p = make_plan(config({"--rdzv-conf", "join_timeout=5,is_host=1", "t.py"}), env_);
  EXPECT_EQ(p.rdzv_conf.join_timeout, std::chrono::seconds(5));
  EXPECT_TRUE(p.rdzv_conf.is_host.value_or(false));
  EXPECT_THROW(make_plan(config({"--rdzv-conf", "nonsense", "t.py"}), env_), UsageError);
}

TEST_F(JobPlanTest, DevicesSetTheVisibleGpusAndTheWorkerCount) {
  LaunchConfig c = config({"--devices", "3,5", "t.py"});
  EnvMap env = env_;
  apply_devices(&c, &env);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "3,5");
  EXPECT_EQ(c.nproc_per_node, "2");
  EXPECT_EQ(make_plan(c, env).nproc, 2);
  // More workers than devices is refused, saying both numbers.
  LaunchConfig more = config({"--devices", "3,5", "--nproc-per-node", "4", "t.py"});
  apply_devices(&more, &env);
  EXPECT_EQ(more.nproc_per_node, "4");  // given: kept
  try {
    make_plan(more, env);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("starts 4 workers, but --devices names only 2"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(JobPlanTest, TheTokenGoesToAFileInTheLogRootOnlyItsUserCanRead) {
  const std::string token_file = (dir_ / "token").string();
  std::ofstream(token_file) << "0123456789abcdef0123456789abcdef\n";
  ::chmod(token_file.c_str(), 0600);
  const JobPlan p = make_plan(config({"--auth-token-file", token_file, "t.py"}), env_);
  EXPECT_EQ(p.store_token_file, p.log_root + "/store_token");
  struct stat st {};
  ASSERT_EQ(::stat(p.store_token_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(p.store_token_file);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "0123456789abcdef0123456789abcdef\n");
  // Never one that is already there (someone else's could be).
  EXPECT_THROW(write_store_token(p.log_root, "other"), IoError);
  // Without a token, no file.
  EXPECT_EQ(make_plan(config({"t.py"}), env_).store_token_file, "");
}

// Restarted workers are forked only for Python entry points of jobs that can restart.
TEST_F(JobPlanTest, TheForkServerServesPythonJobsThatCanRestart) {
  EnvMap env = env_;
  env["COHORT_PYTHON_DIR"] = COHORT_SOURCE_DIR "/python";
  auto server = [&](std::vector<std::string> args) {
    return make_plan(config(std::move(args)), env).fork_server_file;
  };
  const std::string file = COHORT_SOURCE_DIR "/python/cohort/_forkserver.py";
  EXPECT_EQ(server({"--max-restarts", "1", "train.py"}), file);
  EXPECT_EQ(server({"--max-restarts", "1", "-m", "pkg.train"}), file);
  EXPECT_EQ(server({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                    "127.0.0.1:29400", "train.py"}),
            file);
  EXPECT_EQ(server({"train.py"}), "");  // no restart to serve
  EXPECT_EQ(server({"--max-restarts", "1", "--no-python", "/bin/true"}), "");
  EXPECT_EQ(server({"--max-restarts", "1", "--no-fork-server", "train.py"}), "");
}

}  // namespace
}  // namespace cohort::launch

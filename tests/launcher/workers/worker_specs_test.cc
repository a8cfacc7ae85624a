// What each worker of a round is started with: directories, environment (with the restart's
// reason), command, and where its output goes under -r/--redirects, -t/--tee and
// --local-ranks-filter (torchrun's rules).
#include "workers/worker_specs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cstdio>
#include <filesystem>

#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "loop/console.h"

namespace cohort::launch {
namespace {

namespace fs = std::filesystem;

std::string env_of(const WorkerSpec& w, const std::string& key) {
  for (const auto& e : w.request.env)
    if (e.rfind(key + "=", 0) == 0) return e.substr(key.size() + 1);
  return "<unset>";
}

class WorkerSpecsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("cohort_worker_specs_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    plan_.config.role = "trainer";
    plan_.host = "n1";
    plan_.run_id = "job-1";
    plan_.log_root = root_.string();
    plan_.command.argv = {"/usr/bin/python3", "-u", "train.py", "--lr", "1"};
    plan_.command.interpreter = "/usr/bin/python3";
    plan_.command.args_at = 3;
    a_.restart_count = 1;
    a_.nnodes = 1;
    a_.local_world_size = 2;
    a_.world_size = 2;
  }
  void TearDown() override {
    fs::remove_all(root_);
    std::fclose(out_file_);
    std::fclose(err_file_);
  }
  GroupSpec spec(const EnvMap& env = {}, const std::optional<Outcome>& previous = std::nullopt) {
    return make_group_spec(plan_, env, a_, HostPort{"10.0.0.1", 29500}, "agent-1", previous, out_,
                           err_);
  }

  fs::path root_;
  JobPlan plan_;
  RankAssignment a_;
  asio::io_context io_;
  std::FILE* out_file_ = std::tmpfile();
  std::FILE* err_file_ = std::tmpfile();
  ConsoleStream out_{io_, ::fileno(out_file_)};  // files: not terminals, so pipes, never ptys
  ConsoleStream err_{io_, ::fileno(err_file_)};
};

TEST_F(WorkerSpecsTest, EachWorkerHasItsFolderErrorFileEnvironmentAndCommand) {
  const GroupSpec g = spec({{"PATH", "/bin"}});
  EXPECT_TRUE(fs::is_directory(root_ / "attempt_1"));  // the attempt's folder is made now
  ASSERT_EQ(g.workers.size(), 2u);
  EXPECT_EQ(g.host, "n1");
  for (int lr = 0; lr < 2; ++lr) {
    const WorkerSpec& w = g.workers[static_cast<size_t>(lr)];
    EXPECT_EQ(w.local_rank, lr);
    EXPECT_EQ(w.dir, (root_ / "attempt_1" / std::to_string(lr)).string());
    EXPECT_EQ(w.error_file, w.dir + "/error.json");
    EXPECT_EQ(env_of(w, worker_env::kErrorFile), w.error_file);
    EXPECT_EQ(env_of(w, worker_env::kLocalRank), std::to_string(lr));
    EXPECT_EQ(env_of(w, worker_env::kMasterAddr), "10.0.0.1");
    EXPECT_EQ(env_of(w, worker_env::kMasterPort), "29500");
    EXPECT_EQ(env_of(w, worker_env::kAgentId), "agent-1");
    EXPECT_EQ(env_of(w, "PATH"), "/bin");
    EXPECT_EQ(env_of(w, "PYTHONFAULTHANDLER"), "1");           // a hung Python worker's stack
    EXPECT_EQ(env_of(w, "COHORT_RESTART_REASON"), "<unset>");  // the first round
    EXPECT_EQ(w.request.argv, plan_.command.argv);
  }
}

TEST_F(WorkerSpecsTest, PythonWorkersFindTheCohortModuleBeforeTheUsersPath) {
  plan_.python_dir = "/opt/cohort/python";
  EXPECT_EQ(env_of(spec().workers[0], "PYTHONPATH"), "/opt/cohort/python");
  const GroupSpec g = spec({{"PYTHONPATH", "/mine"}, {"PYTHONFAULTHANDLER", "0"}});
  EXPECT_EQ(env_of(g.workers[0], "PYTHONPATH"), "/opt/cohort/python:/mine");
  EXPECT_EQ(env_of(g.workers[0], "PYTHONFAULTHANDLER"), "0");  // the user's choice
  // A program that is not Python gets neither.
  plan_.command.interpreter.clear();
  EXPECT_EQ(env_of(spec().workers[0], "PYTHONPATH"), "<unset>");
  EXPECT_EQ(env_of(spec().workers[0], "PYTHONFAULTHANDLER"), "<unset>");
}

TEST_F(WorkerSpecsTest, WorkersOfARestartLearnWhyAndWhoFailed) {
  Outcome failed;
  failed.kind = Outcome::kFailed;
  WorkerFailure f;
  f.global_rank = 5;
  f.local_rank = 1;
  f.host = "n3";
  f.reason = "killed by SIGSEGV (signal 11)";
  failed.first_failure = f;
  const WorkerSpec w = spec({}, failed).workers[0];
  EXPECT_EQ(env_of(w, "COHORT_RESTART_REASON"),
            "killed by SIGSEGV (signal 11) (rank 5, local rank 1, host n3)");
  EXPECT_EQ(env_of(w, "COHORT_RESTART_FAILED_RANK"), "5");
  EXPECT_EQ(env_of(w, "COHORT_RESTART_FAILED_HOST"), "n3");
}

TEST(RestartReasonEnv, NoneFirstThenTheDetailOrTheNodeSetChanged) {
  EXPECT_TRUE(restart_reason_env(std::nullopt).empty());
  Outcome rescale;
  rescale.kind = Outcome::kRescale;
  EXPECT_EQ(restart_reason_env(rescale), (std::vector<std::pair<std::string, std::string>>{
                                             {"COHORT_RESTART_REASON", "the node set changed"}}));
  Outcome lost;
  lost.kind = Outcome::kFailed;
  lost.detail = "node b lost";
  EXPECT_EQ(
      restart_reason_env(lost),
      (std::vector<std::pair<std::string, std::string>>{{"COHORT_RESTART_REASON", "node b lost"}}));
}

TEST_F(WorkerSpecsTest, DevicesAndVirtualLocalRanks) {
  plan_.config.devices = {"4", "6"};
  GroupSpec g = spec();
  EXPECT_EQ(env_of(g.workers[0], "COHORT_DEVICE"), "4");
  EXPECT_EQ(env_of(g.workers[1], "COHORT_DEVICE"), "6");
  plan_.config.devices.clear();
  plan_.config.virtual_local_rank = true;
  g = spec({{"CUDA_VISIBLE_DEVICES", "2,7"}});
  EXPECT_EQ(env_of(g.workers[1], "LOCAL_RANK"), "0");
  EXPECT_EQ(env_of(g.workers[1], "CUDA_VISIBLE_DEVICES"), "7");
  EXPECT_EQ(env_of(g.workers[1], worker_env::kRank), "1");  // the global rank stays
  g = spec();  // nothing visible set: the local rank's own index
  EXPECT_EQ(env_of(g.workers[1], "CUDA_VISIBLE_DEVICES"), "1");
  try {
    spec({{"CUDA_VISIBLE_DEVICES", "2"}});
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("local rank 1 has no GPU in CUDA_VISIBLE_DEVICES=2"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(WorkerSpecsTest, TorchDistributedLaunchsLocalRankFlagGoesBeforeTheScriptsArguments) {
  plan_.config.append_local_rank = true;
  plan_.config.local_rank_flag = "--local_rank";
  EXPECT_EQ(spec().workers[1].request.argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--local_rank=1",
                                      "--lr", "1"}));
}

TEST_F(WorkerSpecsTest, ByDefaultStdoutIsTheWorkersOwnAndStderrIsReadForItsTail) {
  const WorkerSpec w = spec().workers[0];
  EXPECT_EQ(w.request.out, StreamMode::kInherit);
  EXPECT_EQ(w.request.err, StreamMode::kPipe);
  EXPECT_EQ(w.stderr_route.console, &err_);
  EXPECT_EQ(w.stderr_route.prefix, "");  // raw, as the worker wrote it
  EXPECT_TRUE(w.stderr_route.keep_tail);
  EXPECT_EQ(w.stdout_file, "");
  EXPECT_EQ(w.stderr_file, "");
}

TEST_F(WorkerSpecsTest, RedirectsGoToFilesOnlyAndTeeAlsoToTheConsoleWithThePrefix) {
  plan_.config.redirects.all = kBoth;
  plan_.config.tee.per_rank = {{1, kStdout}};
  const GroupSpec g = spec();
  const WorkerSpec& w0 = g.workers[0];
  EXPECT_EQ(w0.request.out, StreamMode::kPipe);
  EXPECT_EQ(w0.stdout_file, w0.dir + "/stdout.log");
  EXPECT_EQ(w0.stderr_file, w0.dir + "/stderr.log");
  EXPECT_EQ(w0.stdout_route.console, nullptr);
  EXPECT_EQ(w0.stderr_route.console, nullptr);
  const WorkerSpec& w1 = g.workers[1];
  EXPECT_EQ(w1.stdout_route.console, &out_);
  EXPECT_EQ(w1.stdout_route.prefix, "[trainer1]:");
  EXPECT_EQ(w1.stdout_file, w1.dir + "/stdout.log");
  EXPECT_EQ(w1.stderr_route.console, nullptr);  // stderr is redirected, not teed
}

TEST_F(WorkerSpecsTest, RanksOutsideTheFilterStayOffTheConsole) {
  plan_.config.local_ranks_filter = std::set<int>{1};
  const GroupSpec g = spec();
  EXPECT_EQ(g.workers[0].request.out, StreamMode::kPipe);  // read, to keep it off the console
  EXPECT_EQ(g.workers[0].stdout_route.console, nullptr);
  EXPECT_EQ(g.workers[0].stderr_route.console, nullptr);
  EXPECT_TRUE(g.workers[0].stderr_route.keep_tail);
  EXPECT_EQ(g.workers[1].request.out, StreamMode::kInherit);
  EXPECT_EQ(g.workers[1].stderr_route.console, &err_);
}

TEST_F(WorkerSpecsTest, SeveralNodesPrefixTheirLinesWithHostAndRank) {
  a_.nnodes = 2;
  a_.base_rank = 4;
  plan_.config.tee.all = kBoth;
  EXPECT_EQ(spec().workers[1].stdout_route.prefix, "[trainer1@n1:5]:");
  plan_.config.log_line_prefix_template = "${rank}> ";
  EXPECT_EQ(spec().workers[1].stdout_route.prefix, "5> ");
}

TEST_F(WorkerSpecsTest, DuplicateFiltersCollectTeedLinesInTheAttemptsFolder) {
  plan_.config.tee.all = kStdout;
  plan_.config.duplicate_stdout_filters = {"loss"};
  const GroupSpec g = spec();
  ASSERT_TRUE(g.workers[0].stdout_route.filtered);
  EXPECT_EQ(g.workers[0].stdout_route.filtered, g.workers[1].stdout_route.filtered);  // shared
  EXPECT_EQ(g.workers[0].stdout_route.filtered_prefix, "[trainer0]:");
  EXPECT_FALSE(g.workers[0].stderr_route.filtered);
  EXPECT_TRUE(fs::exists(root_ / "attempt_1" / "filtered_stdout.log"));
}

TEST_F(WorkerSpecsTest, AnAttemptFolderThatCannotBeMadeIsAnIoError) {
  fs::create_directories(root_);
  std::FILE* f = std::fopen((root_ / "attempt_1").c_str(), "w");  // a file where the folder goes
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_THROW(spec(), IoError);
}

TEST(RenderPrefix, TorchrunsTemplateVariables) {
  EXPECT_EQ(render_prefix("", "default", 3, 11, "h"), "[default3]:");
  EXPECT_EQ(
      render_prefix("${hostname}/${role_name}/${rank}/${local_rank} ${rank}", "r", 1, 9, "node7"),
      "node7/r/9/1 9");
  EXPECT_EQ(render_prefix("${unknown}", "r", 1, 9, "h"), "${unknown}");
}

}  // namespace
}  // namespace cohort::launch

// cohortrun's command line: torchrun's flags in both spellings, PET_* defaults, validation.
#include "cohort/launch/cli.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

struct Parsed {
  CliResult result;
  LaunchConfig config;
};

Parsed parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  std::vector<char*> argv;
  std::string name = "cohortrun";
  argv.push_back(name.data());
  for (auto& a : args) argv.push_back(a.data());
  Parsed p;
  p.result = parse_cli(static_cast<int>(argv.size()), argv.data(), env, &p.config);
  return p;
}

// The usage error parsing `args` raises ("" when none).
std::string usage_error(std::vector<std::string> args,
                        std::map<std::string, std::string> env = {}) {
  try {
    Parsed p = parse(std::move(args), std::move(env));
    validate(&p.config);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Cli, BothSpellingsOfEveryDashedFlag) {
  for (const char* flag : {"--nproc-per-node", "--nproc_per_node"}) {
    auto p = parse({flag, "4", "train.py"});
    ASSERT_EQ(p.result.action, CliAction::kLaunch);
    EXPECT_EQ(p.config.nproc_per_node, "4");
  }
  auto p = parse({"--max_restarts=2", "--rdzv_id", "j", "--master_addr", "10.0.0.1",
                  "--master_port", "1234", "--node_rank", "1", "--nnodes", "2", "--log_dir", "/x",
                  "--local_addr", "a", "--no_python", "prog", "--lr", "3"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_EQ(p.config.max_restarts, 2);
  EXPECT_EQ(p.config.rdzv_id, "j");
  EXPECT_EQ(p.config.master_addr, "10.0.0.1");
  EXPECT_EQ(p.config.master_port, 1234);
  EXPECT_TRUE(p.config.master_port_given);
  EXPECT_EQ(p.config.node_rank, 1);
  EXPECT_EQ(p.config.min_nodes, 2);
  EXPECT_EQ(p.config.log_dir, "/x");
  EXPECT_TRUE(p.config.no_python);
  EXPECT_EQ(p.config.training_script, "prog");
  EXPECT_EQ(p.config.training_script_args, (std::vector<std::string>{"--lr", "3"}));
}

TEST(Cli, TorchrunDefaults) {
  auto p = parse({"train.py"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_EQ(p.config.min_nodes, 1);
  EXPECT_EQ(p.config.max_nodes, 1);
  EXPECT_EQ(p.config.nproc_per_node, "1");
  EXPECT_EQ(p.config.master_addr, "127.0.0.1");
  EXPECT_EQ(p.config.master_port, 29500);
  EXPECT_FALSE(p.config.master_port_given);
  EXPECT_EQ(p.config.rdzv_backend, RdzvBackend::kStatic);
  EXPECT_EQ(p.config.rdzv_id, "none");
  EXPECT_EQ(p.config.max_restarts, 0);
  EXPECT_EQ(p.config.role, "default");
  EXPECT_EQ(p.config.redirects.all, kNone);
}

TEST(Cli, ArgumentsAfterTheEntryPointBelongToTheWorker) {
  auto p = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "9", "-m"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_EQ(p.config.nproc_per_node, "2");
  EXPECT_EQ(p.config.training_script_args,
            (std::vector<std::string>{"--nproc-per-node", "9", "-m"}));
}

TEST(Cli, PetVariablesAreDefaults) {
  auto p = parse({"train.py"}, {{"PET_NPROC_PER_NODE", "3"},
                                {"PET_NNODES", "1:1"},
                                {"PET_MAX_RESTARTS", "4"},
                                {"PET_NO_PYTHON", "1"},
                                {"PET_TEE", "3"}});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_EQ(p.config.nproc_per_node, "3");
  EXPECT_EQ(p.config.max_restarts, 4);
  EXPECT_TRUE(p.config.no_python);
  EXPECT_EQ(p.config.tee.all, kBoth);
  auto flag_wins = parse({"--max-restarts", "1", "train.py"}, {{"PET_MAX_RESTARTS", "4"}});
  EXPECT_EQ(flag_wins.config.max_restarts, 1);
}

TEST(Cli, StreamSpecs) {
  EXPECT_EQ(parse_stream_spec("3", "-r").all, kBoth);
  auto s = parse_stream_spec("0:1,2:3", "-t");
  EXPECT_EQ(s.for_rank(0), kStdout);
  EXPECT_EQ(s.for_rank(1), kNone);
  EXPECT_EQ(s.for_rank(2), kBoth);
  EXPECT_THROW(parse_stream_spec("4", "-r"), UsageError);
  EXPECT_THROW(parse_stream_spec("a:1", "-r"), UsageError);
  EXPECT_THROW(parse_stream_spec("1:", "-r"), UsageError);
}

TEST(Cli, ValidationNamesWhatToUseInstead) {
  EXPECT_EQ(
      usage_error({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--nnodes", "1:3", "x"}),
      "");
  EXPECT_NE(usage_error({"--rdzv-backend", "etcd-v2", "x"}).find("etcd"), std::string::npos);
  EXPECT_NE(usage_error({"--nnodes", "1:3", "x"}).find("--rdzv-backend c10d"), std::string::npos);
  EXPECT_NE(usage_error({"--nnodes", "2", "--node-rank", "5", "x"}).find("--node-rank 5"),
            std::string::npos);
  EXPECT_NE(usage_error({"-m", "--no-python", "x"}), "");
  EXPECT_EQ(usage_error({"x"}), "");
}

TEST(Cli, UsageErrorsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string expect;
  } cases[] = {
      {{"--nproc-per-node"}, "--nproc-per-node needs a value: N"},
      {{"--max-restarts", "-1", "x"}, "--max-restarts takes a whole number"},
      {{"--master-port", "99999", "x"}, "--master-port takes a whole number from 0 to 65535"},
      {{"--term-timeout", "soon", "x"}, "--term-timeout takes seconds"},
      {{"--no-such-flag", "x"}, "unknown flag '--no-such-flag'"},
      {{"--n", "2", "x"}, "ambiguous flag '--n'"},
      {{"--numa-binding", "rack", "x"}, "--numa-binding takes node, socket"},
      {{"--event-log-handler", "scuba", "x"}, "--event-log-handler 'scuba'"},
      {{"--logs-specs", "mine", "x"}, "--logs-specs 'mine'"},
      {{"--standalone=maybe", "x"}, "--standalone is a switch"},
      {{"--nproc-per-node", "2"}, "no entry point"},
      {{"x"}, ""},
  };
  for (const auto& c : cases) {
    std::string err = usage_error(c.args);
    if (c.expect.empty()) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err.find(c.expect), std::string::npos) << "got: " << err;
    }
  }
  // A PET_* default that is malformed names its variable.
  EXPECT_NE(usage_error({"x"}, {{"PET_MAX_RESTARTS", "many"}}).find("PET_MAX_RESTARTS"),
            std::string::npos);
}

TEST(Cli, ArgparseAbbreviationsAndForms) {
  auto p = parse({"--nproc", "2", "--max_rest=3", "-r3", "-t", "1", "--rdzv-e=h:1", "train.py"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_EQ(p.config.nproc_per_node, "2");
  EXPECT_EQ(p.config.max_restarts, 3);
  EXPECT_EQ(p.config.redirects.all, kBoth);
  EXPECT_EQ(p.config.tee.all, kStdout);
  EXPECT_EQ(p.config.rdzv_endpoint, "h:1");
  EXPECT_TRUE(p.config.given.contains("--nproc-per-node"));
  auto dashdash = parse({"--nproc-per-node", "2", "--", "train.py", "--x"});
  EXPECT_EQ(dashdash.config.training_script, "train.py");
  EXPECT_EQ(dashdash.config.training_script_args, std::vector<std::string>{"--x"});
}

TEST(Cli, TorchrunTwoFlags) {
  auto p = parse({"--virtual-local-rank", "--shutdown-timeout", "7", "--numa-binding", "node",
                  "--event-log-handler", "console", "--logs-specs", "default",
                  "--duplicate-stdout-filters", "loss,,acc,step", "--duplicate_stderr_filters",
                  "Error", "--log-line-prefix-template", "${hostname}:${rank}: ", "train.py"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  EXPECT_TRUE(p.config.virtual_local_rank);
  EXPECT_EQ(p.config.term_timeout, std::chrono::seconds(7));
  EXPECT_EQ(p.config.numa_binding, NumaBinding::kNode);
  EXPECT_EQ(p.config.event_log_handler, "console");
  EXPECT_EQ(p.config.duplicate_stdout_filters, (std::vector<std::string>{"loss,acc", "step"}));
  EXPECT_EQ(p.config.duplicate_stderr_filters, (std::vector<std::string>{"Error"}));
  EXPECT_EQ(p.config.log_line_prefix_template, "${hostname}:${rank}: ");
  // torchrun's environment variable for the grace, and PET_ for the flag, which wins.
  EXPECT_EQ(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "3"}}).config.term_timeout,
            std::chrono::seconds(3));
  EXPECT_EQ(parse({"x"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "3"}, {"PET_SHUTDOWN_TIMEOUT", "4"}})
                .config.term_timeout,
            std::chrono::seconds(4));
}

TEST(Cli, StandaloneIgnoresTheRendezvousFlagsWithOneNote) {
  auto p = parse({"--standalone", "--rdzv-backend", "c10d", "x"},
                 {{"PET_RDZV_ENDPOINT", "cluster:29400"}, {"PET_RDZV_ID", "job"}});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  validate(&p.config);
  EXPECT_EQ(p.config.rdzv_backend, RdzvBackend::kStatic);
  EXPECT_TRUE(p.config.rdzv_endpoint.empty());
  ASSERT_EQ(p.config.notes.size(), 1u);
  EXPECT_NE(p.config.notes[0].find("--rdzv-backend, --rdzv-endpoint, --rdzv-id"),
            std::string::npos);
}

TEST(Cli, LaunchCompatibilityAppendsTheLocalRank) {
  auto p = parse({"--append-local-rank", "main.py"});
  EXPECT_TRUE(p.config.append_local_rank);
  EXPECT_EQ(p.config.local_rank_flag, "--local-rank");
  auto old = parse({"--local-rank-flag", "--local_rank", "main.py"});
  EXPECT_TRUE(old.config.append_local_rank);
  EXPECT_EQ(old.config.local_rank_flag, "--local_rank");
  EXPECT_FALSE(parse({"--append-local-rank", "--use-env", "main.py"}).config.append_local_rank);
}

TEST(Cli, HelpVersionAndCompletionComeFromTheTable) {
  auto help = parse({"--help"});
  ASSERT_EQ(help.result.action, CliAction::kPrint);
  for (const char* flag : {"--nproc-per-node N", "--rdzv-endpoint HOST:PORT", "--log-dir PATH",
                           "--shutdown-timeout SECONDS", "--virtual-local-rank", "--use-env"})
    EXPECT_NE(help.result.text.find(flag), std::string::npos) << flag;
  auto version = parse({"--version"});
  ASSERT_EQ(version.result.action, CliAction::kPrint);
  EXPECT_EQ(version.result.text.rfind("cohortrun ", 0), 0u);
  auto completion = parse({"--print-completion", "bash"});
  EXPECT_NE(completion.result.text.find("complete -F _cohortrun cohortrun"), std::string::npos);
  EXPECT_NE(completion.result.text.find("--nproc_per_node"), std::string::npos);
  EXPECT_NE(usage_error({"--print-completion", "fish"}).find("bash"), std::string::npos);
}

TEST(Cli, TheForkServerIsOnUnlessTurnedOff) {
  EXPECT_TRUE(parse({"train.py"}).config.fork_server);
  EXPECT_FALSE(parse({"--no-fork-server", "train.py"}).config.fork_server);
  EXPECT_FALSE(parse({"train.py"}, {{"COHORT_FORK_SERVER", "0"}}).config.fork_server);
  EXPECT_TRUE(parse({"train.py"}, {{"COHORT_FORK_SERVER", "1"}}).config.fork_server);
  EXPECT_FALSE(
      parse({"--no-fork-server", "train.py"}, {{"COHORT_FORK_SERVER", "1"}}).config.fork_server);
  const std::string e = usage_error({"train.py"}, {{"COHORT_FORK_SERVER", "off"}});
  EXPECT_NE(e.find("COHORT_FORK_SERVER='off': set it to 0"), std::string::npos) << e;
}

}  // namespace
}  // namespace cohort::launch

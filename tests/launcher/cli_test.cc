// cohortrun's command line: torchrun's flags in both spellings, PET_* defaults, validation.
#include "cohort/launch/cli.h"

#include <gtest/gtest.h>

#include "entrypoint.h"
#include "node_resources.h"
#include "slurm_mode.h"

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

TEST(Cli, BothSpellingsOfEveryDashedFlag) {
  for (const char* flag : {"--nproc-per-node", "--nproc_per_node"}) {
    auto p = parse({flag, "4", "train.py"});
    ASSERT_EQ(p.result.exit_code, -1) << p.result.message;
    EXPECT_EQ(p.config.nproc_per_node, "4");
  }
  auto p = parse({"--max_restarts=2", "--rdzv_id", "j", "--master_addr", "10.0.0.1",
                  "--master_port", "1234", "--node_rank", "1", "--nnodes", "2", "--log_dir", "/x",
                  "--local_addr", "a", "--no_python", "prog", "--lr", "3"});
  ASSERT_EQ(p.result.exit_code, -1) << p.result.message;
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
  ASSERT_EQ(p.result.exit_code, -1);
  EXPECT_EQ(p.config.min_nodes, 1);
  EXPECT_EQ(p.config.max_nodes, 1);
  EXPECT_EQ(p.config.nproc_per_node, "1");
  EXPECT_EQ(p.config.master_addr, "127.0.0.1");
  EXPECT_EQ(p.config.master_port, 29500);
  EXPECT_FALSE(p.config.master_port_given);
  EXPECT_EQ(p.config.rdzv_backend, "static");
  EXPECT_EQ(p.config.rdzv_id, "none");
  EXPECT_EQ(p.config.max_restarts, 0);
  EXPECT_EQ(p.config.role, "default");
  EXPECT_EQ(p.config.redirects.all, kNone);
}

TEST(Cli, ArgumentsAfterTheEntryPointBelongToTheWorker) {
  auto p = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "9", "-m"});
  ASSERT_EQ(p.result.exit_code, -1);
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
  ASSERT_EQ(p.result.exit_code, -1) << p.result.message;
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
  EXPECT_THROW(parse_stream_spec("4", "-r"), std::invalid_argument);
  EXPECT_THROW(parse_stream_spec("a:1", "-r"), std::invalid_argument);
  EXPECT_THROW(parse_stream_spec("1:", "-r"), std::invalid_argument);
}

TEST(Cli, ValidationNamesWhatToUseInstead) {
  auto dyn = parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--nnodes", "1:3", "x"});
  EXPECT_TRUE(validate(dyn.config).empty()) << validate(dyn.config);
  auto v2 = parse({"--rdzv-backend", "etcd-v2", "x"});
  EXPECT_NE(validate(v2.config).find("etcd"), std::string::npos);
  auto elastic = parse({"--nnodes", "1:3", "x"});
  EXPECT_NE(validate(elastic.config).find("--rdzv-backend c10d"), std::string::npos);
  auto rank = parse({"--nnodes", "2", "--node-rank", "5", "x"});
  EXPECT_NE(validate(rank.config).find("--node-rank 5"), std::string::npos);
  auto both = parse({"-m", "--no-python", "x"});
  EXPECT_FALSE(validate(both.config).empty());
  EXPECT_TRUE(validate(parse({"x"}).config).empty());
}

TEST(EntryPoint, PythonModuleAndDirect) {
  std::map<std::string, std::string> env{{"PATH", "/usr/bin:/bin"}};
  LaunchConfig c;
  c.training_script = "train.py";
  c.training_script_args = {"--lr", "1"};
  auto cmd = build_worker_command(c, env);
  EXPECT_EQ(cmd.argv, (std::vector<std::string>{"python3", "-u", "train.py", "--lr", "1"}));
  EXPECT_EQ(cmd.title, "train.py");
  env["PYTHON_EXEC"] = "/usr/bin/python3";
  c.module = true;
  c.training_script = "pkg.train";
  EXPECT_EQ(build_worker_command(c, env).argv,
            (std::vector<std::string>{"/usr/bin/python3", "-u", "-m", "pkg.train", "--lr", "1"}));
  c.module = false;
  c.training_script = "true";  // an executable on PATH runs directly
  EXPECT_EQ(build_worker_command(c, env).argv[0], "true");
  c.training_script = "/bin/true";
  EXPECT_EQ(build_worker_command(c, env).argv[0], "/bin/true");
  c.training_script = "not_a_program_anywhere";
  EXPECT_EQ(build_worker_command(c, env).argv[0], "/usr/bin/python3");
}

TEST(NodeResources, NprocPerNode) {
  std::map<std::string, std::string> no_gpu{{"CUDA_VISIBLE_DEVICES", ""}};
  EXPECT_EQ(resolve_nproc_per_node("4", no_gpu), 4);
  EXPECT_EQ(resolve_nproc_per_node("cpu", no_gpu), cpu_count());
  EXPECT_EQ(resolve_nproc_per_node("auto", no_gpu), cpu_count());
  EXPECT_THROW(resolve_nproc_per_node("gpu", no_gpu), std::invalid_argument);
  EXPECT_THROW(resolve_nproc_per_node("0", no_gpu), std::invalid_argument);
  EXPECT_THROW(resolve_nproc_per_node("two", no_gpu), std::invalid_argument);
  std::map<std::string, std::string> two{{"CUDA_VISIBLE_DEVICES", "0,3"}};
  EXPECT_EQ(resolve_nproc_per_node("gpu", two), 2);
  EXPECT_EQ(resolve_nproc_per_node("auto", two), 2);
}

TEST(SlurmMode, DerivesTheJobShapeFromAStep) {
  auto p = parse({"--slurm", "train.py"});
  ASSERT_EQ(p.result.exit_code, -1) << p.result.message;
  ASSERT_TRUE(p.config.slurm);
  std::map<std::string, std::string> env{
      {"SLURM_JOB_ID", "1234"},      {"SLURM_STEP_ID", "0"},
      {"SLURM_NODEID", "1"},         {"SLURM_STEP_NODELIST", "localhost,n2"},
      {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_GPUS_ON_NODE", "4"},
      {"SLURM_NTASKS_PER_NODE", "1"}};
  std::vector<std::string> notes;
  ASSERT_EQ(apply_slurm(&p.config, env, &notes), "");
  EXPECT_EQ(p.config.max_nodes, 2);
  EXPECT_EQ(p.config.node_rank, 1);
  EXPECT_EQ(p.config.master_addr, "127.0.0.1");  // "localhost", resolved
  EXPECT_EQ(p.config.master_port, 21234);
  EXPECT_EQ(p.config.rdzv_id, "slurm-1234-0");
  EXPECT_EQ(p.config.nproc_per_node, "4");  // GPUs first
  EXPECT_NE(p.config.signals_to_handle.find("SIGUSR1"), std::string::npos);
  EXPECT_TRUE(validate(p.config).empty()) << validate(p.config);
}

TEST(SlurmMode, ExplicitFlagsWinAndTheBatchStepIsOneNode) {
  auto p = parse({"--nnodes", "slurm", "--nproc-per-node", "2", "--master-port", "5000",
                  "--rdzv-id", "mine", "train.py"});
  ASSERT_EQ(p.result.exit_code, -1) << p.result.message;
  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "9"},
                                         {"SLURM_JOB_NODELIST", "n[1-3]"},
                                         {"SLURM_JOB_NUM_NODES", "3"},
                                         {"SLURM_NTASKS_PER_NODE", "8"}};
  std::vector<std::string> notes;
  ASSERT_EQ(apply_slurm(&p.config, env, &notes), "");
  EXPECT_EQ(p.config.max_nodes, 1);
  EXPECT_EQ(p.config.nproc_per_node, "2");
  EXPECT_EQ(p.config.master_port, 5000);
  EXPECT_EQ(p.config.rdzv_id, "mine");
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes.front().find("srun --ntasks-per-node=1"), std::string::npos);
}

TEST(SlurmMode, OutsideAnAllocationSaysSo) {
  auto p = parse({"--slurm", "train.py"});
  std::vector<std::string> notes;
  EXPECT_NE(apply_slurm(&p.config, {}, &notes).find("SLURM_JOB_ID is not set"), std::string::npos);
}

}  // namespace
}  // namespace cohort::launch

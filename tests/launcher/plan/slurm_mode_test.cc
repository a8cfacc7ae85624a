// cohortrun --slurm: the job's shape derived from the SLURM_* variables; explicit flags win.
#include "plan/slurm_mode.h"

#include <gtest/gtest.h>

#include "cohort/error.h"
#include "cohort/launch/cli.h"

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

TEST(SlurmMode, DerivesTheJobShapeFromAStep) {
  auto p = parse({"--slurm", "train.py"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  ASSERT_TRUE(p.config.slurm);
  std::map<std::string, std::string> env{
      {"SLURM_JOB_ID", "1234"},      {"SLURM_STEP_ID", "0"},
      {"SLURM_NODEID", "1"},         {"SLURM_STEP_NODELIST", "localhost,n2"},
      {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_GPUS_ON_NODE", "4"},
      {"SLURM_NTASKS_PER_NODE", "1"}};
  std::vector<std::string> notes;
  apply_slurm(&p.config, env, &notes);
  EXPECT_EQ(p.config.max_nodes, 2);
  EXPECT_EQ(p.config.node_rank, 1);
  EXPECT_EQ(p.config.master_addr, "127.0.0.1");  // "localhost", resolved
  EXPECT_EQ(p.config.master_port, 21234);
  EXPECT_EQ(p.config.rdzv_id, "slurm-1234-0");
  EXPECT_EQ(p.config.nproc_per_node, "4");  // GPUs first
  EXPECT_NE(p.config.signals_to_handle.find("SIGUSR1"), std::string::npos);
  EXPECT_NO_THROW(validate(&p.config));
}

TEST(SlurmMode, ExplicitFlagsWinAndTheBatchStepIsOneNode) {
  auto p = parse({"--nnodes", "slurm", "--nproc-per-node", "2", "--master-port", "5000",
                  "--rdzv-id", "mine", "train.py"});
  ASSERT_EQ(p.result.action, CliAction::kLaunch);
  std::map<std::string, std::string> env{{"SLURM_JOB_ID", "9"},
                                         {"SLURM_JOB_NODELIST", "n[1-3]"},
                                         {"SLURM_JOB_NUM_NODES", "3"},
                                         {"SLURM_NTASKS_PER_NODE", "8"}};
  std::vector<std::string> notes;
  apply_slurm(&p.config, env, &notes);
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
  try {
    apply_slurm(&p.config, {}, &notes);
    ADD_FAILURE() << "no error outside an allocation";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("SLURM_JOB_ID is not set"), std::string::npos);
  }
}

}  // namespace
}  // namespace cohort::launch

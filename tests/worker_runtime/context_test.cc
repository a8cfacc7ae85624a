#include "cohort/context.h"

#include <gtest/gtest.h>

#include "cohort/rdzv/memory_store.h"

namespace cohort {
namespace {

EnvMap torchrun_env() {
  // What torchrun 1.13 sets for rank 1 of 2 (docs/TORCHRUN.md §3.2).
  return {{"RANK", "1"},
          {"LOCAL_RANK", "1"},
          {"GROUP_RANK", "0"},
          {"LOCAL_WORLD_SIZE", "2"},
          {"WORLD_SIZE", "2"},
          {"GROUP_WORLD_SIZE", "1"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", "29500"},
          {"TORCHELASTIC_RESTART_COUNT", "3"},
          {"TORCHELASTIC_RUN_ID", "job7"},
          {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
}

std::string parse_error(const EnvMap& env) {
  try {
    WorkerIdentity::parse(env);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WorkerIdentity, ParsesTorchrunEnvironment) {
  const WorkerIdentity id = WorkerIdentity::parse(torchrun_env());
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 2);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.restart_count, 3);
  EXPECT_EQ(id.run_id, "job7");
  EXPECT_EQ(id.master_addr, "127.0.0.1");
  EXPECT_EQ(id.master_port, 29500);
  EXPECT_EQ(id.source, "torchrun");
  EXPECT_FALSE(id.rank0_hosts_store);
  EXPECT_EQ(id.timeout, std::chrono::minutes(30));
  EXPECT_FALSE(id.timeout_from_env);
}

TEST(WorkerIdentity, CohortrunAndManualLaunches) {
  EnvMap env = torchrun_env();
  env["COHORT_AGENT_ID"] = "vm:123";
  EXPECT_EQ(WorkerIdentity::parse(env).source, "cohortrun");
  EnvMap manual = {{"RANK", "0"},
                   {"LOCAL_RANK", "0"},
                   {"WORLD_SIZE", "4"},
                   {"MASTER_ADDR", "h"},
                   {"MASTER_PORT", "1"}};
  const WorkerIdentity id = WorkerIdentity::parse(manual);
  EXPECT_EQ(id.source, "env");
  EXPECT_TRUE(id.rank0_hosts_store);  // PyTorch's env:// makes rank 0 host the store
  EXPECT_EQ(id.local_world_size, 4);
  EXPECT_EQ(id.run_id, "none");
}

TEST(WorkerIdentity, NamesMissingAndMalformedVariables) {
  for (const char* var : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}) {
    EnvMap env = torchrun_env();
    if (std::string(var) == "RANK") env.erase("WORLD_SIZE"), env["WORLD_SIZE"] = "2";
    env.erase(var);
    const std::string msg = parse_error(env);
    EXPECT_NE(msg.find(std::string(var) + " is not set"), std::string::npos) << var << ": " << msg;
  }
  EnvMap env = torchrun_env();
  env["RANK"] = "1x";
  EXPECT_NE(parse_error(env).find("RANK='1x' is not an integer"), std::string::npos);
  env = torchrun_env();
  env["RANK"] = "2";
  EXPECT_NE(parse_error(env).find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  env = torchrun_env();
  env["MASTER_PORT"] = "70000";
  EXPECT_NE(parse_error(env).find("MASTER_PORT='70000'"), std::string::npos);
  env = torchrun_env();
  env["COHORT_TIMEOUT_S"] = "soon";
  EXPECT_NE(parse_error(env).find("COHORT_TIMEOUT_S='soon'"), std::string::npos);
  env = torchrun_env();
  env["LOCAL_RANK"] = "-1";
  EXPECT_NE(parse_error(env).find("LOCAL_RANK='-1'"), std::string::npos);
}

TEST(WorkerIdentity, TimeoutAndDialectFromEnvironment) {
  EnvMap env = torchrun_env();
  env["COHORT_TIMEOUT_S"] = "2.5";
  env["COHORT_STORE_DIALECT"] = "1.13";
  env["COHORT_SOCKET_ADDR"] = "10.0.0.7";
  const WorkerIdentity id = WorkerIdentity::parse(env);
  EXPECT_EQ(id.timeout, std::chrono::milliseconds(2500));
  EXPECT_TRUE(id.timeout_from_env);
  EXPECT_EQ(id.store_dialect, "torch113");
  EXPECT_EQ(id.socket_addr, "10.0.0.7");
  env["COHORT_STORE_DIALECT"] = "3.0";
  EXPECT_NE(parse_error(env).find("COHORT_STORE_DIALECT"), std::string::npos);
}

TEST(WorkerIdentity, ParsesSlurm) {
  const EnvMap env = {{"SLURM_PROCID", "3"},
                      {"SLURM_LOCALID", "1"},
                      {"SLURM_NTASKS", "4"},
                      {"SLURM_NODEID", "1"},
                      {"SLURM_JOB_ID", "12"},
                      {"SLURM_STEP_ID", "0"},
                      {"SLURM_STEP_TASKS_PER_NODE", "2(x2)"},
                      {"MASTER_ADDR", "n1"},
                      {"MASTER_PORT", "29400"}};
  const WorkerIdentity id = WorkerIdentity::parse(env);
  EXPECT_EQ(id.source, "slurm");
  EXPECT_EQ(id.rank, 3);
  EXPECT_EQ(id.local_rank, 1);
  EXPECT_EQ(id.world_size, 4);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.group_rank, 1);
  EXPECT_EQ(id.run_id, "slurm-12.0");
  EXPECT_TRUE(id.rank0_hosts_store);
  EnvMap uneven = env;
  uneven["SLURM_STEP_TASKS_PER_NODE"] = "3,1";
  uneven["SLURM_LOCALID"] = "0";
  EXPECT_EQ(WorkerIdentity::parse(uneven).local_world_size, 1);
  uneven["SLURM_STEP_TASKS_PER_NODE"] = "x";
  EXPECT_NE(parse_error(uneven).find("SLURM_STEP_TASKS_PER_NODE='x'"), std::string::npos);
  // A direct srun launch finds the store on the job's first host at a job-derived port.
  EnvMap direct = env;
  direct.erase("MASTER_ADDR");
  direct.erase("MASTER_PORT");
  direct["SLURM_JOB_NODELIST"] = "localhost,n2";
  const WorkerIdentity d = WorkerIdentity::parse(direct);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 20012);
  direct.erase("SLURM_JOB_NODELIST");  // nothing to find it from
  EXPECT_NE(parse_error(direct).find("set MASTER_ADDR and MASTER_PORT"), std::string::npos)
      << parse_error(direct);
}

TEST(WorkerIdentity, ParsesOpenMpi) {
  const EnvMap env = {{"OMPI_COMM_WORLD_RANK", "1"},
                      {"OMPI_COMM_WORLD_SIZE", "2"},
                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                      {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                      {"OMPI_MCA_ess_base_jobid", "847"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", "29401"}};
  const WorkerIdentity id = WorkerIdentity::parse(env);
  EXPECT_EQ(id.source, "openmpi");
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.local_world_size, 2);
  EXPECT_EQ(id.run_id, "openmpi-847");
}

TEST(WorkerIdentity, NoLauncherIsAWorldOfOne) {
  const WorkerIdentity id = WorkerIdentity::parse({{"HOME", "/root"}});
  EXPECT_EQ(id.source, "single");
  EXPECT_EQ(id.world_size, 1);
  Context ctx = Context::from_env({{"HOME", "/root"}});
  EXPECT_EQ(ctx.world_size(), 1);
  ctx.store().set("k", "v");
  EXPECT_EQ(ctx.root_store().get("cohort/none/0/k"), "v");
}

TEST(Context, StoreIsNamespacedByRunAndRestart) {
  auto store = std::make_shared<MemoryStore>();
  WorkerIdentity a = WorkerIdentity::parse(torchrun_env());
  WorkerIdentity b = a;
  b.restart_count = 4;
  Context ca = Context::from_store(a, store);
  Context cb = Context::from_store(b, store);
  ca.store().set("x", "attempt3");
  cb.store().set("x", "attempt4");
  EXPECT_EQ(store->get("cohort/job7/3/x"), "attempt3");
  EXPECT_EQ(store->get("cohort/job7/4/x"), "attempt4");
  EXPECT_EQ(ca.next_group_id(), 0u);
  EXPECT_EQ(ca.next_group_id(), 1u);
}

}  // namespace
}  // namespace cohort

#include "plan/slurm_mode.h"

#include "cohort/base/slurm.h"
#include "cohort/error.h"

namespace cohort::launch {

void apply_slurm(LaunchConfig* c, const std::map<std::string, std::string>& env,
                 std::vector<std::string>* notes) {
  std::optional<slurm::SlurmEnv> s;
  try {
    s = slurm::SlurmEnv::from_env(env);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--slurm: ") + e.what());
  }
  if (!s) {
    throw UsageError(
        "--slurm needs a Slurm allocation (SLURM_JOB_ID is not set); run it under sbatch, "
        "salloc or srun, or give --nnodes/--node-rank/--master-addr yourself");
  }
  auto given = [&](const char* flag) { return c->given.contains(flag); };
  if (!s->step_id) {
    // The batch script itself: only this node runs cohortrun.
    c->min_nodes = c->max_nodes = 1;
    c->node_rank = 0;
    if (s->num_nodes > 1) {
      notes->push_back(
          "cohortrun runs in the batch step, so only this node takes part; start it "
          "with `srun --ntasks-per-node=1 cohortrun ...` to use all " +
          std::to_string(s->num_nodes) + " nodes");
    }
  } else {
    c->min_nodes = c->max_nodes = s->num_nodes;
    c->node_rank = s->node_id;
  }
  if (!given("--master-addr")) {
    try {
      c->master_addr = c->max_nodes == 1 ? "127.0.0.1" : s->master_address();
    } catch (const std::exception& e) {
      throw UsageError(std::string("--slurm: ") + e.what());
    }
  }
  if (!given("--master-port")) {
    c->master_port = s->derived_port();
    c->master_port_given = true;
  }
  if (!given("--rdzv-id")) c->rdzv_id = s->run_id();
  if (!given("--nproc-per-node")) {
    if (s->gpus_on_node && *s->gpus_on_node > 0) {
      c->nproc_per_node = std::to_string(*s->gpus_on_node);
    } else if (s->ntasks_per_node && *s->ntasks_per_node > 0) {
      c->nproc_per_node = std::to_string(*s->ntasks_per_node);
    }
  }
  // Preemption notices (sbatch --signal=USR1@60) reach the workers so they can checkpoint.
  if (!given("--signals-to-handle")) c->signals_to_handle += ",SIGUSR1,SIGUSR2";
  notes->push_back("Slurm job " + std::to_string(s->job_id) + ": node " +
                   std::to_string(c->node_rank) + " of " + std::to_string(c->max_nodes) +
                   ", master " + c->master_addr + ":" + std::to_string(c->master_port) +
                   ", run id " + c->rdzv_id + ", " + c->nproc_per_node + " worker(s) per node");
}

}  // namespace cohort::launch

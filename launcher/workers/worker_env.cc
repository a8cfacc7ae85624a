#include "workers/worker_env.h"

namespace cohort::launch {

std::vector<std::string> build_worker_env(const std::map<std::string, std::string>& base,
                                          const WorkerEnvInputs& in) {
  std::map<std::string, std::string> env = base;
  const RankAssignment& a = *in.assignment;
  const LaunchConfig& c = *in.config;
  const int rank = a.base_rank + in.local_rank;
  auto set = [&](const char* k, const std::string& v) { env[k] = v; };
  auto num = [](int v) { return std::to_string(v); };
  set("LOCAL_RANK", num(in.local_rank));
  set("RANK", num(rank));
  set("GROUP_RANK", num(a.node_rank));
  set("ROLE_RANK", num(rank));
  set("ROLE_NAME", c.role);
  set("LOCAL_WORLD_SIZE", num(a.local_world_size));
  set("WORLD_SIZE", num(a.world_size));
  set("GROUP_WORLD_SIZE", num(a.nnodes));
  set("ROLE_WORLD_SIZE", num(a.world_size));
  set("MASTER_ADDR", in.master_addr);
  set("MASTER_PORT", num(in.master_port));
  set("TORCHELASTIC_RESTART_COUNT", num(a.restart_count));
  set("TORCHELASTIC_MAX_RESTARTS", num(c.max_restarts));
  set("TORCHELASTIC_RUN_ID", in.run_id);
  // True: MASTER_ADDR:MASTER_PORT is always a store the agents serve (node 0's, or cohortd),
  // never one that rank 0 must host itself, which is what False tells PyTorch.
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set("TORCHELASTIC_ERROR_FILE", in.error_file);
  // torchrun 2.x puts --signals-to-handle in its own environment, so its workers inherit it.
  set("TORCHELASTIC_SIGNALS_TO_HANDLE", c.signals_to_handle);
  // torchrun 2.x: os.getenv(..., "1"). Not 1.13's NCCL_ASYNC_ERROR_HANDLING, which 2.x warns is
  // deprecated; a 1.13 NCCL job that wants it sets it, and it passes through.
  env.try_emplace("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  if (in.omp_num_threads) set("OMP_NUM_THREADS", num(*in.omp_num_threads));
  if (!c.collective_timeout.empty()) set("COHORT_TIMEOUT_S", c.collective_timeout);
  if (!c.auth_token.empty()) {
    // The file's name, not the token: libcohort reads the file and takes the variable out of the
    // worker's environment, so the worker's own children never see the token. A token the user
    // put in cohortrun's environment is not passed on beside it.
    if (!in.store_token_file.empty()) {
      set("COHORT_STORE_TOKEN_FILE", in.store_token_file);
      env.erase("COHORT_STORE_TOKEN");
    } else {
      set("COHORT_STORE_TOKEN", c.auth_token);  // a plan made without the file (tests)
    }
  }
  set("COHORT_AGENT_ID", in.agent_id);
  set("COHORT_NODE_RANK", num(a.node_rank));
  set("COHORT_NNODES", num(a.nnodes));
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace cohort::launch

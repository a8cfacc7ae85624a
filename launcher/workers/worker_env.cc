#include "workers/worker_env.h"
#include "cohort/base/worker_env_names.h"

namespace cohort::launch {

std::vector<std::string> build_worker_env(const std::map<std::string, std::string>& base,
                                          const WorkerEnvInputs& in) {
  std::map<std::string, std::string> env = base;
  const RankAssignment& a = *in.assignment;
  const LaunchConfig& c = *in.config;
  const int rank = a.base_rank + in.local_rank;
  auto set = [&](const char* k, const std::string& v) { env[k] = v; };
  auto num = [](int v) { return std::to_string(v); };
  set(worker_env::kLocalRank, num(in.local_rank));
  set(worker_env::kRank, num(rank));
  set(worker_env::kGroupRank, num(a.node_rank));
  set(worker_env::kRoleRank, num(rank));
  set(worker_env::kRoleName, c.role);
  set(worker_env::kLocalWorldSize, num(a.local_world_size));
  set(worker_env::kWorldSize, num(a.world_size));
  set(worker_env::kGroupWorldSize, num(a.nnodes));
  set(worker_env::kRoleWorldSize, num(a.world_size));
  set(worker_env::kMasterAddr, in.master_addr);
  set(worker_env::kMasterPort, num(in.master_port));
  set(worker_env::kRestartCount, num(a.restart_count));
  set(worker_env::kMaxRestarts, num(c.max_restarts));
  set(worker_env::kRunId, in.run_id);
  // True: MASTER_ADDR:MASTER_PORT is always a store the agents serve (node 0's, or cohortd),
  // never one that rank 0 must host itself, which is what False tells PyTorch.
  set(worker_env::kUseAgentStore, "True");
  set(worker_env::kErrorFile, in.error_file);
  // torchrun 2.x puts --signals-to-handle in its own environment, so its workers inherit it.
  set(worker_env::kSignalsToHandle, c.signals_to_handle);
  // torchrun 2.x: os.getenv(..., "1"). Not 1.13's NCCL_ASYNC_ERROR_HANDLING, which 2.x warns is
  // deprecated; a 1.13 NCCL job that wants it sets it, and it passes through.
  env.try_emplace(worker_env::kTorchNcclAsyncErrorHandling, "1");
  if (in.omp_num_threads) set(worker_env::kOmpNumThreads, num(*in.omp_num_threads));
  if (!c.collective_timeout.empty()) set(worker_env::kTimeoutSeconds, c.collective_timeout);
  if (!c.auth_token.empty()) {
    // The file's name, not the token: libcohort reads the file and takes the variable out of the
    // worker's environment, so the worker's own children never see the token. A token the user
    // put in cohortrun's environment is not passed on beside it.
    if (!in.store_token_file.empty()) {
      set(worker_env::kStoreTokenFile, in.store_token_file);
      env.erase(worker_env::kStoreToken);
    } else {
      set(worker_env::kStoreToken, c.auth_token);  // a plan made without the file (tests)
    }
  }
  set(worker_env::kAgentId, in.agent_id);
  set(worker_env::kNodeRank, num(a.node_rank));
  set(worker_env::kNnodes, num(a.nnodes));
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace cohort::launch

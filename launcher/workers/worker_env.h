// The environment each worker gets: torchrun's variables, exactly (names and value formats,
// docs/TORCHRUN.md §3.2), on top of cohortrun's own environment; extras are COHORT_*.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/launch/launch_config.h"
#include "rdzv/round_types.h"

namespace cohort::launch {

struct WorkerEnvInputs {
  const LaunchConfig* config = nullptr;
  const RankAssignment* assignment = nullptr;
  int local_rank = 0;
  std::string master_addr;
  int master_port = 0;
  std::string run_id;
  std::string error_file;
  std::optional<int> omp_num_threads;  // set when cohortrun decides the value
  std::string agent_id;                // COHORT_AGENT_ID
  std::string store_token_file;        // COHORT_STORE_TOKEN_FILE (JobPlan::store_token_file)
};

// "KEY=VALUE" entries: `base` with the worker's variables set over it.
std::vector<std::string> build_worker_env(const std::map<std::string, std::string>& base,
                                          const WorkerEnvInputs& in);

}  // namespace cohort::launch

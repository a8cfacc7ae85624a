// The environment each worker gets: torchrun's variables with torchrun's names and value formats
// (torch/distributed/elastic/agent/server/local_elastic_agent.py, _start_workers), cohortrun's
// extras under COHORT_*, over cohortrun's own environment.
#include "workers/worker_env.h"

#include <gtest/gtest.h>

#include <string_view>

#include "cohort/base/worker_env_names.h"

namespace cohort::launch {
namespace {

namespace we = worker_env;

std::map<std::string, std::string> as_map(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> m;
  for (const auto& e : entries) {
    const auto eq = e.find('=');
    EXPECT_NE(eq, std::string::npos) << e;
    EXPECT_TRUE(m.emplace(e.substr(0, eq), e.substr(eq + 1)).second) << "twice: " << e;
  }
  return m;
}

// Node 1 of 2, 3 workers after node 0's 2, in the 2nd restart.
class WorkerEnvTest : public ::testing::Test {
 protected:
  WorkerEnvTest() {
    config_.role = "trainer";
    config_.max_restarts = 4;
    config_.signals_to_handle = "SIGTERM,SIGUSR1";
    assignment_.restart_count = 2;
    assignment_.node_rank = 1;
    assignment_.nnodes = 2;
    assignment_.local_world_size = 3;
    assignment_.world_size = 5;
    assignment_.base_rank = 2;
    in_.config = &config_;
    in_.assignment = &assignment_;
    in_.local_rank = 1;
    in_.master_addr = "10.1.2.3";
    in_.master_port = 29500;
    in_.run_id = "job-7";
    in_.error_file = "/logs/attempt_2/1/error.json";
    in_.agent_id = "n2:4242:abcd";
  }
  std::map<std::string, std::string> env(const std::map<std::string, std::string>& base = {}) {
    return as_map(build_worker_env(base, in_));
  }

  LaunchConfig config_;
  RankAssignment assignment_;
  WorkerEnvInputs in_;
};

TEST_F(WorkerEnvTest, TorchrunsVariablesWithTorchrunsValues) {
  const auto e = env();
  EXPECT_EQ(e.at(we::kLocalRank), "1");
  EXPECT_EQ(e.at(we::kRank), "3");  // base rank 2 + local rank 1
  EXPECT_EQ(e.at(we::kGroupRank), "1");
  EXPECT_EQ(e.at(we::kRoleRank), "3");
  EXPECT_EQ(e.at(we::kRoleName), "trainer");
  EXPECT_EQ(e.at(we::kLocalWorldSize), "3");
  EXPECT_EQ(e.at(we::kWorldSize), "5");
  EXPECT_EQ(e.at(we::kGroupWorldSize), "2");
  EXPECT_EQ(e.at(we::kRoleWorldSize), "5");
  EXPECT_EQ(e.at(we::kMasterAddr), "10.1.2.3");
  EXPECT_EQ(e.at(we::kMasterPort), "29500");
  EXPECT_EQ(e.at(we::kRestartCount), "2");
  EXPECT_EQ(e.at(we::kMaxRestarts), "4");
  EXPECT_EQ(e.at(we::kRunId), "job-7");
  EXPECT_EQ(e.at(we::kUseAgentStore), "True");  // Python's str(True)
  EXPECT_EQ(e.at(we::kErrorFile), "/logs/attempt_2/1/error.json");
  EXPECT_EQ(e.at(we::kSignalsToHandle), "SIGTERM,SIGUSR1");
  EXPECT_EQ(e.at(we::kTorchNcclAsyncErrorHandling), "1");
}

TEST_F(WorkerEnvTest, CohortrunsExtras) {
  const auto e = env();
  EXPECT_EQ(e.at(we::kAgentId), "n2:4242:abcd");
  EXPECT_EQ(e.at(we::kNodeRank), "1");
  EXPECT_EQ(e.at(we::kNnodes), "2");
  // Set only when there is something to say.
  EXPECT_FALSE(e.contains(we::kOmpNumThreads));
  EXPECT_FALSE(e.contains(we::kTimeoutSeconds));
  EXPECT_FALSE(e.contains(we::kStoreToken));
  EXPECT_FALSE(e.contains(we::kStoreTokenFile));
  in_.omp_num_threads = 6;
  config_.collective_timeout = "120";
  const auto more = env();
  EXPECT_EQ(more.at(we::kOmpNumThreads), "6");
  EXPECT_EQ(more.at(we::kTimeoutSeconds), "120");
}

TEST_F(WorkerEnvTest, TheEnvironmentBelowIsKeptAndTheWorkersVariablesWin) {
  const auto e = env({{"PATH", "/usr/bin"},
                      {"RANK", "99"},
                      {"OMP_NUM_THREADS", "2"},
                      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}});
  EXPECT_EQ(e.at("PATH"), "/usr/bin");
  EXPECT_EQ(e.at(we::kRank), "3");
  EXPECT_EQ(e.at(we::kOmpNumThreads), "2");  // cohortrun chose nothing: the user's stays
  EXPECT_EQ(e.at(we::kTorchNcclAsyncErrorHandling), "0");  // a default only, as in torchrun
}

TEST_F(WorkerEnvTest, TheTokenTravelsAsAFileNotInTheEnvironment) {
  config_.auth_token = "0123456789abcdef0123456789abcdef";
  in_.store_token_file = "/logs/store_token";
  const auto e = env({{we::kStoreToken, "from the user's shell"}});
  EXPECT_EQ(e.at(we::kStoreTokenFile), "/logs/store_token");
  EXPECT_FALSE(e.contains(we::kStoreToken));
  for (const auto& [k, v] : e) EXPECT_EQ(v.find(config_.auth_token), std::string::npos) << k;
  // A plan made without the file (tests): the token itself.
  in_.store_token_file.clear();
  EXPECT_EQ(env().at(we::kStoreToken), config_.auth_token);
}

// The contract's names are torchrun's: a renamed constant would silently break PyTorch scripts.
TEST(WorkerEnvNames, TorchrunsNamesSpelledAsTorchrunSpellsThem) {
  const std::vector<std::pair<std::string_view, std::string_view>> names{
      {we::kRank, "RANK"},
      {we::kLocalRank, "LOCAL_RANK"},
      {we::kWorldSize, "WORLD_SIZE"},
      {we::kLocalWorldSize, "LOCAL_WORLD_SIZE"},
      {we::kGroupRank, "GROUP_RANK"},
      {we::kGroupWorldSize, "GROUP_WORLD_SIZE"},
      {we::kRoleRank, "ROLE_RANK"},
      {we::kRoleName, "ROLE_NAME"},
      {we::kRoleWorldSize, "ROLE_WORLD_SIZE"},
      {we::kMasterAddr, "MASTER_ADDR"},
      {we::kMasterPort, "MASTER_PORT"},
      {we::kRestartCount, "TORCHELASTIC_RESTART_COUNT"},
      {we::kMaxRestarts, "TORCHELASTIC_MAX_RESTARTS"},
      {we::kRunId, "TORCHELASTIC_RUN_ID"},
      {we::kUseAgentStore, "TORCHELASTIC_USE_AGENT_STORE"},
      {we::kErrorFile, "TORCHELASTIC_ERROR_FILE"},
      {we::kSignalsToHandle, "TORCHELASTIC_SIGNALS_TO_HANDLE"},
      {we::kEnableFileTimer, "TORCHELASTIC_ENABLE_FILE_TIMER"},
      {we::kTorchNcclAsyncErrorHandling, "TORCH_NCCL_ASYNC_ERROR_HANDLING"},
      {we::kOmpNumThreads, "OMP_NUM_THREADS"},
  };
  for (const auto& [name, torchruns] : names) EXPECT_EQ(name, torchruns);
}

}  // namespace
}  // namespace cohort::launch

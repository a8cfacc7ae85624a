// The environment contract between cohortrun (launcher/workers/worker_env.cc and
// process_spawner.cc write it) and the workers it starts (libcohort's Context::from_env in
// worker_runtime/context.cc, its heartbeats and error files, and the Python modules in
// python/cohort/ and python/_cohort_worker/ read it): every variable's name, in one place.
//
// torchrun's variables keep torchrun's names and value formats (docs/TORCHRUN.md §3.2), so a
// PyTorch script reads them unchanged; cohortrun's own extras are COHORT_*.
#pragma once

#include <string_view>

namespace cohort::worker_env {

// ---- torchrun's ---------------------------------------------------------------------------------
inline constexpr const char* kRank = "RANK";                        // global rank
inline constexpr const char* kLocalRank = "LOCAL_RANK";             // rank on this node
inline constexpr const char* kWorldSize = "WORLD_SIZE";             // ranks in the job
inline constexpr const char* kLocalWorldSize = "LOCAL_WORLD_SIZE";  // ranks on this node
inline constexpr const char* kGroupRank = "GROUP_RANK";             // the node's rank
inline constexpr const char* kGroupWorldSize = "GROUP_WORLD_SIZE";  // nodes in the job
inline constexpr const char* kRoleRank = "ROLE_RANK";
inline constexpr const char* kRoleName = "ROLE_NAME";
inline constexpr const char* kRoleWorldSize = "ROLE_WORLD_SIZE";
inline constexpr const char* kMasterAddr = "MASTER_ADDR";  // the workers' store
inline constexpr const char* kMasterPort = "MASTER_PORT";
inline constexpr const char* kRestartCount = "TORCHELASTIC_RESTART_COUNT";  // the round's restarts
inline constexpr const char* kMaxRestarts = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr const char* kRunId = "TORCHELASTIC_RUN_ID";
// "True": MASTER_ADDR:MASTER_PORT is a store the agents serve; rank 0 must not host one.
inline constexpr const char* kUseAgentStore = "TORCHELASTIC_USE_AGENT_STORE";
// Where a dying worker writes its error file (cohort/base/error_file_format.h).
inline constexpr const char* kErrorFile = "TORCHELASTIC_ERROR_FILE";
inline constexpr const char* kSignalsToHandle = "TORCHELASTIC_SIGNALS_TO_HANDLE";
inline constexpr const char* kEnableFileTimer = "TORCHELASTIC_ENABLE_FILE_TIMER";
inline constexpr const char* kTorchNcclAsyncErrorHandling = "TORCH_NCCL_ASYNC_ERROR_HANDLING";
inline constexpr const char* kOmpNumThreads = "OMP_NUM_THREADS";
// PyTorch's NCCL dump pipe and dump file: a write to <pipe stem><rank>.pipe makes the rank dump
// its Flight Recorder to <dump prefix><rank>. cohortrun points both into the worker's log folder
// unless the worker's environment names them (docs/HANGS.md).
inline constexpr const char* kTorchNcclDebugInfoPipeFile = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE";
inline constexpr const char* kTorchNcclDebugInfoTempFile = "TORCH_NCCL_DEBUG_INFO_TEMP_FILE";

// ---- cohortrun's own ----------------------------------------------------------------------------
// The write end of the worker's heartbeat pipe (cohort/base/heartbeat_line.h).
inline constexpr const char* kHeartbeatFd = "COHORT_HEARTBEAT_FD";
// One end of a socket pair: cohortrun asks the worker about a hang there, and the worker answers
// (cohort/base/hang_probe.h).
inline constexpr const char* kControlFd = "COHORT_CONTROL_FD";
// Set by the process that took the worker's descriptors (cohortrun's Python worker module,
// python/_cohort_worker): its pid. A process that finds another pid there (a DataLoader worker
// forked from the worker, a subprocess it started) leaves the descriptors alone.
inline constexpr const char* kWorkerPid = "COHORT_WORKER_PID";
// The job's store token, as a file's path (0600, removed when the agent ends) or, for plans made
// without the file, the token itself. libcohort reads it and takes both out of its environment.
inline constexpr const char* kStoreTokenFile = "COHORT_STORE_TOKEN_FILE";
inline constexpr const char* kStoreToken = "COHORT_STORE_TOKEN";
// Seconds a libcohort collective may take (--collective-timeout).
inline constexpr const char* kTimeoutSeconds = "COHORT_TIMEOUT_S";
// The agent's identity: the reaper finds the agent's descendants by it.
inline constexpr const char* kAgentId = "COHORT_AGENT_ID";
inline constexpr const char* kNodeRank = "COHORT_NODE_RANK";
inline constexpr const char* kNnodes = "COHORT_NNODES";
// Read by libcohort only (set by hand or by tests): the store's dialect ("1.13" or current), and
// the address libcohort's CPU group listens on.
inline constexpr const char* kStoreDialect = "COHORT_STORE_DIALECT";
inline constexpr const char* kSocketAddr = "COHORT_SOCKET_ADDR";

// ---- the fork server (python/cohort/_forkserver.py, launcher/workers/fork_server.h) ------------
// cohortrun's switch, read from its own environment: "0" turns the fork servers off, as
// --no-fork-server does ("1", the default, leaves them on).
inline constexpr const char* kForkServer = "COHORT_FORK_SERVER";
// Set to "1" in a fork server's own environment, never in a worker's: this process is a server.
inline constexpr const char* kInForkServer = "COHORT_IN_FORK_SERVER";
// Modules (comma-separated) a fork server pre-imports besides torch's; read by the server.
inline constexpr const char* kForkPreload = "COHORT_FORK_PRELOAD";

// True for the variables cohortrun may give a rank's worker differently from one attempt to the
// next (its rank and the world's size after a rescale, the store's port, the attempt's files and
// descriptors, cohortrun's COHORT_* extras). A fork server started for one attempt serves a later
// one only when nothing else differs: any other variable could have been read at import time.
inline bool varies_by_attempt(std::string_view name) {
  for (const char* v :
       {kRank, kWorldSize, kLocalWorldSize, kGroupRank, kGroupWorldSize, kRoleRank, kRoleWorldSize,
        kMasterAddr, kMasterPort, kRestartCount, kRunId, kErrorFile,
        // In the attempt's log folder; read when an NCCL process group is made, after the fork.
        kTorchNcclDebugInfoPipeFile, kTorchNcclDebugInfoTempFile})
    if (name == v) return true;
  return name.starts_with("COHORT_");
}

}  // namespace cohort::worker_env

// cohort::Context: what a worker learns from its launcher, and its connection to the store.
//
// from_env() reads, in order of preference:
//   cohortrun / torchrun: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//                         TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID (+ COHORT_* extras);
//   Slurm direct launch:  SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, ... ;
//   Open MPI:             OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE.
// A missing or malformed variable throws cohort::UsageError naming it and what to set.
// The token of a token-protected store: read from the file COHORT_STORE_TOKEN_FILE names (what
// cohortrun --auth-token-file sets: a file only the job's user can read, removed when cohortrun
// exits), else taken from COHORT_STORE_TOKEN (for launches of one's own). from_env() takes both
// variables out of the process's environment (the value of COHORT_STORE_TOKEN also out of
// /proc/self/environ), so that processes the worker starts do not inherit the token; later
// Contexts of the same process still use it.
//
// store() is namespaced by run id and restart count ("cohort/<run_id>/<restart>/"), so stale
// attempts and co-located jobs never mix; root_store() is the raw store.
//
// The store: a TcpStore client of MASTER_ADDR:MASTER_PORT. Under cohortrun/torchrun the agent
// hosts the server; for direct launches (Slurm, Open MPI, or torchrun with
// TORCHELASTIC_USE_AGENT_STORE=False) rank 0 hosts one inside the Context, as PyTorch's env://
// does. COHORT_STORE_DIALECT=torch113 selects PyTorch 1.13's wire dialect (a 1.13 torchrun's
// store needs it); the default is the current one, which cohortd also speaks. Without any launcher
// variables the Context is a world of one with an in-process store.
//
// Other variables: COHORT_TIMEOUT_S (collective and store deadline, seconds, default 1800),
// COHORT_SOCKET_ADDR (the address this worker's TCP collectives listen on; default: the local
// address that routes to MASTER_ADDR).
//
// Thread safety: the accessors are safe from any thread; the stores are safe for concurrent use.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "cohort/base/environment.h"
#include "cohort/process_group.h"
#include "cohort/rdzv/store.h"

namespace cohort {

// The identity of this worker, parsed from the environment without connecting anywhere.
struct WorkerIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;  // node index
  int restart_count = 0;
  std::string run_id = "none";
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};  // COHORT_TIMEOUT_S
  bool timeout_from_env = false;                                // COHORT_TIMEOUT_S was set
  std::string source;  // "cohortrun", "torchrun", "env", "slurm", "openmpi" or "single"
  // A direct launch: nobody else hosts the store, rank 0 does.
  bool rank0_hosts_store = false;
  std::string store_dialect = "current";  // "current" or "torch113" (COHORT_STORE_DIALECT)
  std::string socket_addr;                // COHORT_SOCKET_ADDR, "" when unset

  // Parses `env`; throws cohort::UsageError naming the missing or malformed variable.
  static WorkerIdentity parse(const EnvMap& env);
};

// The store token `env` gives (see above): the contents of COHORT_STORE_TOKEN_FILE, else
// COHORT_STORE_TOKEN, else "". Throws UsageError naming the variable when the file cannot be read.
std::string store_token_from(const EnvMap& env);

class Context {
 public:
  // Parses the environment and connects to the store at MASTER_ADDR:MASTER_PORT. Takes the
  // store token's variables out of the environment (see above).
  static Context from_env();
  static Context from_env(const EnvMap& env);
  // A Context over an existing store (tests, embedders); `root` is shared, not copied.
  static Context from_store(WorkerIdentity identity, std::shared_ptr<Store> root);

  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  const WorkerIdentity& identity() const { return id_; }
  int rank() const { return id_.rank; }
  int local_rank() const { return id_.local_rank; }
  int world_size() const { return id_.world_size; }
  int local_world_size() const { return id_.local_world_size; }
  int restart_count() const { return id_.restart_count; }
  const std::string& run_id() const { return id_.run_id; }

  // The store, namespaced by run id and restart count. Owned by the Context.
  Store& store();
  // The store without a namespace.
  Store& root_store();

  // 0, 1, 2, ... on successive calls: ranks that create process groups in the same order get the
  // same numbers, which name the groups' keys and shared-memory segments.
  uint64_t next_group_id() { return next_group_id_++; }

 private:
  Context();
  WorkerIdentity id_;
  std::shared_ptr<void> server_;  // the store server rank 0 hosts for a direct launch, or null
  std::shared_ptr<Store> root_;
  std::unique_ptr<Store> scoped_;
  uint64_t next_group_id_ = 0;
};

}  // namespace cohort

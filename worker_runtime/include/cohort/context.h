// cohort::Context: what a worker learns from its launcher, and its connection to the store.
//
// from_env() reads, in order of preference:
//   cohortrun / torchrun: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//                         TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID (+ COHORT_* extras);
//   Slurm direct launch:  SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, ... ;
//   Open MPI:             OMPI_COMM_WORLD_RANK, _LOCAL_RANK, _SIZE, _LOCAL_SIZE.
// A missing or malformed variable throws cohort::Error naming it and what to set.
//
// store() is namespaced by run id and restart count ("cohort/<run_id>/<restart>/"), so stale
// attempts and co-located jobs never mix; root_store() is the raw store.
//
// Thread safety: the accessors are safe from any thread; the stores are safe for concurrent use.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "cohort/process_group.h"
#include "cohort/rdzv/store.h"

namespace cohort {

using EnvMap = std::map<std::string, std::string>;

// The process's environment as a map (for Context::from_env).
EnvMap current_env();

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
  std::string source;  // "cohortrun", "torchrun", "slurm", "openmpi" or "single" (no launcher)

  // Parses `env`; throws cohort::Error naming the missing or malformed variable.
  static WorkerIdentity parse(const EnvMap& env);
};

class Context {
 public:
  // Parses the environment and connects to the store at MASTER_ADDR:MASTER_PORT.
  static Context from_env();
  static Context from_env(const EnvMap& env);

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

 private:
  Context();
  WorkerIdentity id_;
  std::unique_ptr<Store> root_;
  std::unique_ptr<Store> scoped_;
};

}  // namespace cohort

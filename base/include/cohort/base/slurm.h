// Slurm's view of a job, from the SLURM_* variables alone (no scontrol, which containers often
// lack): the hostlist grammar, compressed per-node counts, and what a launcher derives from them.
// Used by cohortrun --slurm and by libcohort for workers started directly with srun.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cohort/error.h"

namespace cohort::slurm {

// Expands a Slurm hostlist: comma- or space-separated entries; each entry text with any number of
// bracket groups of numbers and lo-hi ranges, expanded as a cartesian product, zero padding kept
// ("gpu[01-04,07],cpu3", "rack[0-1]_blade[0-2]", "host-[001-002]", "a[1-2]-b[3-4]").
// Throws UsageError naming the problem (unbalanced bracket, bad range, more than
// `max_hosts` names).
std::vector<std::string> expand_hostlist(const std::string& hostlist, size_t max_hosts = 65536);

// Expands per-node counts such as SLURM_TASKS_PER_NODE "2(x3),1" -> {2, 2, 2, 1}. Throws
// UsageError naming the problem (not a count, more than `max_entries` nodes).
std::vector<int> expand_counts(const std::string& counts, size_t max_entries = 65536);

// What the environment of a process inside a Slurm allocation says.
struct SlurmEnv {
  uint64_t job_id = 0;
  std::optional<uint64_t> step_id;  // absent in the batch step itself
  int node_id = 0;                  // SLURM_NODEID
  int num_nodes = 1;                // of the step when in one, else of the job
  std::vector<std::string> nodes;   // the step's (or job's) hosts, expanded
  std::optional<int> procid;        // SLURM_PROCID: task rank
  std::optional<int> localid;       // SLURM_LOCALID
  std::optional<int> ntasks;        // SLURM_NTASKS
  std::optional<int> ntasks_per_node;
  std::optional<int> gpus_on_node;
  std::string launch_node_ip;  // SLURM_LAUNCH_NODE_IPADDR

  // nullopt when SLURM_JOB_ID is not set. Throws UsageError naming a malformed variable.
  static std::optional<SlurmEnv> from_env(const std::map<std::string, std::string>& env);

  // "slurm-<job>-<step>" ("...-batch" in the batch step): identical on every node of a step.
  std::string run_id() const;
  // A port derived from the job id, so jobs sharing a node do not collide: 20000 + id % 40000.
  int derived_port() const;
  // The address of the job's first host: resolved by name, else the launch node's address (in a
  // batch script, srun runs on the first node). Throws UsageError saying what to pass.
  std::string master_address() const;
};

}  // namespace cohort::slurm

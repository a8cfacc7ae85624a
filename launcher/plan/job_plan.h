// JobPlan: the launch configuration resolved into what this node will do, before anything runs:
// Slurm's shape applied, workers per node counted, the run id chosen, the log directory made,
// the worker command built, the signals to handle parsed. Pure apart from the log directory (and
// the workers' token file in it) and reading the machine's resources.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cohort/base/environment.h"
#include "cohort/launch/launch_config.h"
#include "plan/entrypoint.h"
#include "plan/numa_binding.h"
#include "plan/rdzv_conf.h"

namespace cohort::launch {

struct JobPlan {
  LaunchConfig config;  // after Slurm and validation
  int nproc = 1;        // workers on this node
  std::string host;     // this machine's name, for reports
  std::string run_id;
  std::string log_root;  // <log_dir>/<run_id>_<random>, created
  // The directory made under $TMPDIR for log_root when no --log-dir was given ("" otherwise).
  std::string temp_log_base;
  WorkerCommand command;
  std::optional<int> omp_threads;  // set when cohortrun chooses OMP_NUM_THREADS
  RdzvConf rdzv_conf;
  std::vector<int> stop_signals;  // --signals-to-handle
  // --numa-binding: the machine, and the visible GPUs' bus-order indices (empty: all); nullopt
  // when binding is off or pointless here (a note says why).
  std::optional<CpuTopology> numa;
  std::vector<int> numa_visible;
  // Where the `cohort` Python package lives (python/ of this build, or of an installed
  // cohortrun), put on Python workers' PYTHONPATH; "" when not found, or when cohortrun came in a
  // wheel (the wheel's interpreter finds the package in its site-packages).
  std::string python_dir;
  // The folder whose sitecustomize.py loads cohortrun's worker module into Python workers
  // (python/_cohort_worker/boot, in python_dir or in a wheel's site-packages), put first on
  // their PYTHONPATH; "" when not found.
  std::string cohort_boot_dir;
  // The fork server (cohort/_forkserver.py, beside the package) when restarted Python workers are
  // forked from per-rank servers that imported torch while the job ran (launcher/workers/
  // fork_servers.h): a Python entry point, restarts possible (--max-restarts above 0, or an
  // elastic --nnodes range), and not turned off (--no-fork-server, COHORT_FORK_SERVER=0); ""
  // otherwise.
  std::string fork_server_file;
  std::vector<std::string> notes;  // for the log, once it exists
  // With --auth-token-file: <log_root>/store_token, mode 0600, which workers are told of
  // (COHORT_STORE_TOKEN_FILE) instead of the token itself; NodeAgent removes it when it ends.
  std::string store_token_file;
};

// Throws UsageError (a flag or combination that cannot work) or IoError (the log directory).
JobPlan make_plan(LaunchConfig config, const EnvMap& env);

// Writes `token` to <dir>/store_token, readable and writable by this user alone, and returns
// its path; throws IoError (naming the file) when it cannot, or when the file already exists.
std::string write_store_token(const std::string& dir, const std::string& token);

// --devices: sets CUDA_VISIBLE_DEVICES in *env to the list (so that LOCAL_RANK i selects its i-th
// device), and --nproc-per-node to its length unless given. make_plan() refuses more workers than
// devices.
void apply_devices(LaunchConfig* config, EnvMap* env);

}  // namespace cohort::launch

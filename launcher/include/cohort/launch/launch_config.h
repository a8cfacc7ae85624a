// cohort::launch::LaunchConfig: everything cohortrun was told, after defaults and PET_* variables.
// Field names follow torchrun's flags; see cli.h for the command line that fills it.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace cohort::launch {

// Which standard streams of a worker go to files, for -r/--redirects and -t/--tee.
enum Streams : int { kNone = 0, kStdout = 1, kStderr = 2, kBoth = 3 };

// "N" (every local rank) or "lr:N,lr:N" (per local rank), as torchrun's Std.
struct StreamSpec {
  int all = kNone;              // used for local ranks not listed below
  std::map<int, int> per_rank;  // local rank -> Streams
  int for_rank(int local_rank) const {
    auto it = per_rank.find(local_rank);
    return it == per_rank.end() ? all : it->second;
  }
};

// --rdzv-backend: static (torchrun's default), c10d (alias: cohort; a cohortd or an agent's
// store), etcd (etcd's v3 API).
enum class RdzvBackend { kStatic, kC10d, kEtcd };

// --numa-binding (torchrun 2.x): how a worker's CPUs and memory follow its GPU.
enum class NumaBinding { kNone, kNode, kSocket, kExclusive, kCoreComplex };
// --store-relay: whether the workers reach their round's store through this node's relay
// (docs/RELAY.md). kAuto: for jobs that may have 1,024 ranks or more (nodes x workers per node).
enum class StoreRelay { kAuto, kOn, kOff };

struct LaunchConfig {
  // ---- the job --------------------------------------------------------------------------------
  int min_nodes = 1;  // --nnodes N or MIN:MAX
  int max_nodes = 1;
  std::string nproc_per_node = "1";  // N, cpu, gpu, xpu or auto; resolved by the launcher
  // --devices: the GPUs of the local ranks, in order; every worker sees them as
  // CUDA_VISIBLE_DEVICES and gets its own as COHORT_DEVICE.
  std::vector<std::string> devices;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool master_port_given = false;  // single-node jobs pick a free port unless told one
  bool standalone = false;
  RdzvBackend rdzv_backend = RdzvBackend::kStatic;
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";
  std::string rdzv_conf;  // k=v,k=v
  int max_restarts = 0;
  double monitor_interval = 0.1;  // accepted for compatibility; cohortrun is event-driven
  std::string start_method = "spawn";
  std::string role = "default";
  std::string local_addr;
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  // torchrun 2.x
  bool virtual_local_rank = false;  // LOCAL_RANK 0 and one visible device per worker
  NumaBinding numa_binding = NumaBinding::kNone;
  std::string event_log_handler = "null";  // torchrun's events: "null" or "console"
  std::string logs_specs;                  // torchrun's LogsSpecs plugin: only the default
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string log_line_prefix_template;  // "" = torchrun's "[${role_name}${local_rank}]:"
  // torch.distributed.launch (--use-env not given): each worker also gets --local-rank=N.
  bool append_local_rank = false;
  std::string local_rank_flag = "--local-rank";

  // ---- the entry point ------------------------------------------------------------------------
  bool module = false;     // -m: run the entry point as `python -m`
  bool no_python = false;  // run the entry point directly
  bool run_path = false;
  std::string training_script;
  std::vector<std::string> training_script_args;

  // ---- output ---------------------------------------------------------------------------------
  std::string log_dir;  // empty: a fresh directory under $TMPDIR
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::set<int>> local_ranks_filter;  // console output only from these

  // ---- cohort's own -----------------------------------------------------------------------------
  // --term-timeout / --shutdown-timeout (TORCH_ELASTIC_SHUTDOWN_TIMEOUT): stop signal -> SIGKILL.
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds worker_hang_timeout{0};  // 0: off
  // A hang of workers that answer hang probes (cohortrun's Python worker module, libcohort) is
  // named this long after it began (log, cohortctl status), without stopping the job; 0: off.
  // With --worker-hang-timeout, the job is also stopped once the hang has lasted that long.
  std::chrono::milliseconds hang_report_after{std::chrono::seconds(300)};
  // TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT (torchrun 2.x): a worker in uninterruptible sleep
  // (D state) this long ends the job without a restart (0: off).
  std::chrono::milliseconds uninterruptible_state_timeout{0};
  std::string collective_timeout;  // --timeout seconds for libcohort's collectives ("": default)
  std::chrono::milliseconds rdzv_timeout{std::chrono::seconds(900)};
  std::chrono::milliseconds exit_barrier_timeout{std::chrono::seconds(30)};
  // Once one node's workers have all succeeded, how long the others may still run (srun -W);
  // nullopt: the exit barrier timeout; 0: no bound.
  std::optional<std::chrono::milliseconds> wait_after_first_exit;
  // Elastic jobs: how long the workers keep running while this agent cannot reach the rendezvous
  // store (a cohortd being restarted); past it, they are stopped as for a lost node.
  std::chrono::milliseconds store_loss_grace{std::chrono::seconds(60)};
  bool sweep_orphans = true;
  // Restarted Python workers forked from a per-rank fork server that imported torch while the
  // job ran (README "Fast restarts"); --no-fork-server or COHORT_FORK_SERVER=0 turn it off.
  bool fork_server = true;
  // Python workers get cohortrun's worker module without importing it (python/_cohort_worker/boot
  // first on their PYTHONPATH): beats on every optimizer step, answers to hang probes.
  bool cohort_module = true;
  // --gpu-preflight: before joining, every GPU this node will use must be visible to NVML, free
  // of other processes and free of pending errors, or the node exits without joining.
  bool gpu_preflight = false;
  // --metrics-addr HOST:PORT, or --metrics-port N on every interface: where this node agent
  // serves its Prometheus metrics (port -1: nowhere; 0: a free port, logged).
  std::string metrics_addr;
  int metrics_port = -1;
  // Stragglers: a rank whose compute time per step (its step time less its communication) stays
  // above the median of all ranks' by this factor for the whole window is named by node rank 0's
  // agent, in its log, its metrics and its status record (cohortctl status). 0: off.
  double straggler_factor = 1.5;
  std::chrono::milliseconds straggler_window{std::chrono::seconds(30)};
  // The store's token (cohortd's HMAC handshake): hosted stores require it, agents and
  // libcohort workers present it; PyTorch workers cannot, so they connect from
  // `allow_unauthenticated_from` networks (comma-separated CIDRs) or not at all.
  std::string auth_token;
  std::string allow_unauthenticated_from;
  bool slurm = false;  // --slurm or --nnodes slurm: derive the job's shape from SLURM_*
  StoreRelay store_relay = StoreRelay::kAuto;
  // The interpreter of Python entry points: PYTHON_EXEC, else the python3 beside cohortrun when
  // it is installed in a virtual environment (the wheel), else python3 on PATH (the launcher
  // resolves it; cohort.run from the Python wheel sets PYTHON_EXEC to its sys.executable).
  std::string python;

  // Flags given on the command line or through PET_* (their dashed names, "--nproc-per-node"),
  // so that derived values (Slurm) never override what the user said.
  std::set<std::string> given;
  // Lines to log once the logger exists (flags accepted and ignored, overrides).
  std::vector<std::string> notes;
};

}  // namespace cohort::launch

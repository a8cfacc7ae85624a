#include "cohort/launch/cli.h"

#include <algorithm>
#include <functional>
#include <sstream>
#include <vector>

#include "cohort/base/metrics_endpoint.h"
#include "cohort/base/parse.h"
#include "cohort/base/version.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "cohort/rdzv/auth.h"

namespace cohort::launch {
namespace {

using Apply = std::function<void(LaunchConfig&, const std::string& value)>;

enum class Origin { kTorchrun, kLaunch, kCohort };

// One row per flag. `placeholder` is empty for switches. `pet`: torchrun reads PET_<NAME> as the
// default (its `env` and `check_env` actions).
struct Flag {
  std::string name;        // "--nproc-per-node"; the underscore spelling is derived
  std::string short_name;  // "-m", or ""
  std::string placeholder;
  std::string help;
  Origin origin;
  bool pet;
  Apply apply;
  std::string choices = {};  // for completion: "spawn fork forkserver"
};

std::string underscored(const std::string& dashed) {
  std::string u = dashed;
  for (size_t i = 2; i < u.size(); ++i)
    if (u[i] == '-') u[i] = '_';
  return u;
}

std::string pet_name(const std::string& dashed) {
  std::string s = "PET_";
  for (size_t i = 2; i < dashed.size(); ++i)
    s.push_back(dashed[i] == '-' ? '_' : static_cast<char>(std::toupper(dashed[i])));
  return s;
}

[[noreturn]] void bad(const std::string& flag, const std::string& what) {
  throw UsageError(flag + " " + what);
}

int int_value(const std::string& flag, const std::string& v, int min, int max) {
  auto n = parse_int(v, min, max);
  if (!n) {
    bad(flag, "takes a whole number from " + std::to_string(min) + " to " + std::to_string(max) +
                  " (got '" + v + "')");
  }
  return *n;
}

std::chrono::milliseconds seconds_value(const std::string& flag, const std::string& v) {
  auto s = parse_seconds(v);
  if (!s) bad(flag, "takes seconds, a number >= 0 (got '" + v + "')");
  return *s;
}

bool switch_value(const std::string& flag, const std::string& v) {
  if (v.empty() || v == "1" || v == "true" || v == "True" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "False" || v == "no") return false;
  bad(flag, "is a switch: 1/true or 0/false (got '" + v + "')");
}

void parse_nnodes(const std::string& text, LaunchConfig* c) {
  if (text == "slurm") {
    c->slurm = true;
    return;
  }
  const auto colon = text.find(':');
  std::optional<int> lo, hi;
  if (colon == std::string::npos) {
    lo = hi = parse_int(text, 1, 1 << 20);
  } else {
    lo = parse_int(text.substr(0, colon), 1, 1 << 20);
    hi = parse_int(text.substr(colon + 1), 1, 1 << 20);
  }
  if (!lo || !hi) bad("--nnodes", "takes N or MIN:MAX with 1 <= MIN <= MAX (got '" + text + "')");
  if (*hi < *lo) bad("--nnodes", "needs 1 <= MIN <= MAX (got '" + text + "')");
  c->min_nodes = *lo;
  c->max_nodes = *hi;
}

// argparse's comma_separated_list with torchrun's escape: ",," is a literal comma.
std::vector<std::string> comma_list(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ',' && i + 1 < text.size() && text[i + 1] == ',') {
      cur.push_back(',');
      ++i;
    } else if (text[i] == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(text[i]);
    }
  }
  if (!cur.empty() || !out.empty()) out.push_back(cur);
  out.erase(std::remove(out.begin(), out.end(), std::string()), out.end());
  return out;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = [] {
    std::vector<Flag> t;
    auto torch = [&](std::string name, std::string short_name, std::string placeholder,
                     std::string help, Apply apply, std::string choices = {}) {
      t.push_back(Flag{std::move(name), std::move(short_name), std::move(placeholder),
                       std::move(help), Origin::kTorchrun, true, std::move(apply),
                       std::move(choices)});
    };
    auto own = [&](std::string name, std::string placeholder, std::string help, Apply apply,
                   std::string choices = {}) {
      t.push_back(Flag{std::move(name), "", std::move(placeholder), std::move(help),
                       Origin::kCohort, false, std::move(apply), std::move(choices)});
    };
    // ---- torchrun ------------------------------------------------------------------------------
    torch("--nnodes", "", "MIN:MAX",
          "Number of nodes, N or MIN:MAX (default 1:1); 'slurm' is --slurm",
          [](LaunchConfig& c, const std::string& v) { parse_nnodes(v, &c); });
    torch("--nproc-per-node", "", "N",
          "Workers per node: a number, cpu, gpu, xpu or auto (GPUs if any, else CPUs) "
          "(default 1)",
          [](LaunchConfig& c, const std::string& v) { c.nproc_per_node = v; });
    torch(
        "--rdzv-backend", "", "NAME", "Rendezvous backend: static, c10d (or cohort), etcd",
        [](LaunchConfig& c, const std::string& v) {
          if (v == "static") {
            c.rdzv_backend = RdzvBackend::kStatic;
          } else if (v == "c10d" || v == "cohort") {
            c.rdzv_backend = RdzvBackend::kC10d;
          } else if (v == "etcd") {
            c.rdzv_backend = RdzvBackend::kEtcd;
          } else if (v == "etcd-v2") {
            bad("--rdzv-backend",
                "etcd-v2 (etcd's v2 API) is not supported; use etcd (the v3 "
                "API) or c10d");
          } else {
            bad("--rdzv-backend", "'" + v + "' is unknown (static, c10d, cohort, etcd)");
          }
        },
        "static c10d cohort etcd");
    torch("--rdzv-endpoint", "", "HOST:PORT",
          "Rendezvous endpoint (a cohortd, etcd, or one of the nodes; port 0: a free port for a "
          "one-node job)",
          [](LaunchConfig& c, const std::string& v) { c.rdzv_endpoint = v; });
    torch("--rdzv-id", "", "ID", "Job id shared by all nodes (default none)",
          [](LaunchConfig& c, const std::string& v) { c.rdzv_id = v; });
    torch("--rdzv-conf", "", "K=V,...",
          "Rendezvous settings: join_timeout, last_call_timeout, close_timeout, "
          "keep_alive_interval, keep_alive_max_attempt, timeout (seconds), is_host",
          [](LaunchConfig& c, const std::string& v) { c.rdzv_conf = v; });
    torch("--standalone", "", "",
          "One-node job with a private store on a free port and a fresh run id (--rdzv-* are "
          "ignored)",
          [](LaunchConfig& c, const std::string& v) {
            c.standalone = switch_value("--standalone", v);
          });
    torch("--max-restarts", "", "N", "Restarts of the worker group before failing (default 0)",
          [](LaunchConfig& c, const std::string& v) {
            c.max_restarts = int_value("--max-restarts", v, 0, 1 << 30);
          });
    torch("--monitor-interval", "", "SECONDS",
          "Accepted and ignored: cohortrun sees exits as they happen",
          [](LaunchConfig& c, const std::string& v) {
            c.monitor_interval =
                static_cast<double>(seconds_value("--monitor-interval", v).count()) / 1000.0;
          });
    torch(
        "--start-method", "", "METHOD",
        "Accepted for compatibility (spawn, fork, forkserver); workers are always fresh "
        "processes",
        [](LaunchConfig& c, const std::string& v) {
          if (v != "spawn" && v != "fork" && v != "forkserver")
            bad("--start-method", "takes spawn, fork or forkserver (got '" + v + "')");
          c.start_method = v;
        },
        "spawn fork forkserver");
    torch(
        "--event-log-handler", "", "NAME",
        "torchrun's event handler: null (default) or console (events as JSON lines on stderr)",
        [](LaunchConfig& c, const std::string& v) {
          if (v != "null" && v != "console")
            bad("--event-log-handler",
                "'" + v + "' is not a handler cohortrun has (null, console)");
          c.event_log_handler = v;
        },
        "null console");
    torch("--role", "", "NAME", "Role name of the workers (default 'default')",
          [](LaunchConfig& c, const std::string& v) { c.role = v; });
    torch("--module", "-m", "", "Run the entry point as a Python module (python -m)",
          [](LaunchConfig& c, const std::string& v) { c.module = switch_value("--module", v); });
    torch("--no-python", "", "", "Run the entry point directly instead of with Python",
          [](LaunchConfig& c, const std::string& v) {
            c.no_python = switch_value("--no-python", v);
          });
    torch(
        "--run-path", "", "", "Run the script by path with Python (as torchrun's runpy)",
        [](LaunchConfig& c, const std::string& v) { c.run_path = switch_value("--run-path", v); });
    torch("--log-dir", "", "PATH",
          "Directory for workers' logs and error files (default: a temp dir)",
          [](LaunchConfig& c, const std::string& v) { c.log_dir = v; });
    torch("--redirects", "-r", "N|LR:N,...",
          "Redirect workers' streams to files: 0 none, 1 stdout, 2 stderr, 3 both (per local "
          "rank: 0:1,1:2)",
          [](LaunchConfig& c, const std::string& v) {
            c.redirects = parse_stream_spec(v, "--redirects");
          });
    torch("--tee", "-t", "N|LR:N,...",
          "Like --redirects, and also copy to the console with a prefix (see "
          "--log-line-prefix-template)",
          [](LaunchConfig& c, const std::string& v) { c.tee = parse_stream_spec(v, "--tee"); });
    torch("--log-line-prefix-template", "", "TEMPLATE",
          "Prefix of tee'd console lines; macros ${role_name} ${local_rank} ${rank} ${hostname} "
          "(default '[${role_name}${local_rank}]:')",
          [](LaunchConfig& c, const std::string& v) { c.log_line_prefix_template = v; });
    torch("--local-ranks-filter", "", "LR,...",
          "Console output only from these local ranks (files keep everything)",
          [](LaunchConfig& c, const std::string& v) {
            std::set<int> ranks;
            std::stringstream ss(v);
            std::string item;
            while (std::getline(ss, item, ',')) {
              if (item.empty()) continue;
              ranks.insert(int_value("--local-ranks-filter", item, 0, 1 << 20));
            }
            if (!v.empty() && ranks.empty())
              bad("--local-ranks-filter", "takes local ranks such as 0,1,2 (got '" + v + "')");
            if (!ranks.empty()) c.local_ranks_filter = ranks;
          });
    torch(
        "--duplicate-stdout-filters", "", "STR,...",
        "Tee'd stdout lines containing any of these also go to <attempt>/filtered_stdout.log "
        "(',,' is a comma)",
        [](LaunchConfig& c, const std::string& v) { c.duplicate_stdout_filters = comma_list(v); });
    torch(
        "--duplicate-stderr-filters", "", "STR,...",
        "The same for stderr (<attempt>/filtered_stderr.log)",
        [](LaunchConfig& c, const std::string& v) { c.duplicate_stderr_filters = comma_list(v); });
    torch("--node-rank", "", "N", "Rank of this node for the static rendezvous (default 0)",
          [](LaunchConfig& c, const std::string& v) {
            c.node_rank = int_value("--node-rank", v, 0, 1 << 20);
          });
    torch("--master-addr", "", "HOST",
          "Address of node 0, where the store runs (static rendezvous; default 127.0.0.1)",
          [](LaunchConfig& c, const std::string& v) { c.master_addr = v; });
    torch("--master-port", "", "PORT",
          "Port of the store on node 0 (default 29500; a free port for one-node jobs)",
          [](LaunchConfig& c, const std::string& v) {
            c.master_port = int_value("--master-port", v, 0, 65535);
            c.master_port_given = true;
          });
    torch("--local-addr", "", "HOST", "Address this node advertises to the others",
          [](LaunchConfig& c, const std::string& v) { c.local_addr = v; });
    t.push_back(Flag{"--logs-specs", "", "NAME",
                     "torchrun's LogsSpecs plugin: only the default layout is built in",
                     Origin::kTorchrun, false, [](LaunchConfig& c, const std::string& v) {
                       if (!v.empty() && v != "default")
                         bad("--logs-specs", "'" + v +
                                                 "': cohortrun writes torchrun's default layout "
                                                 "only (plugins are Python entry points)");
                       c.logs_specs = v;
                     }});
    t.push_back(Flag{"--numa-binding", "", "MODE",
                     "Bind each worker's CPUs and memory near its GPU: node, socket, exclusive, "
                     "core-complex",
                     Origin::kTorchrun, false,
                     [](LaunchConfig& c, const std::string& v) {
                       if (v == "node") {
                         c.numa_binding = NumaBinding::kNode;
                       } else if (v == "socket") {
                         c.numa_binding = NumaBinding::kSocket;
                       } else if (v == "exclusive") {
                         c.numa_binding = NumaBinding::kExclusive;
                       } else if (v == "core-complex") {
                         c.numa_binding = NumaBinding::kCoreComplex;
                       } else {
                         bad("--numa-binding",
                             "takes node, socket, exclusive or core-complex (got '" + v + "')");
                       }
                     },
                     "node socket exclusive core-complex"});
    torch("--signals-to-handle", "", "SIG,...",
          "Signals that stop the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)",
          [](LaunchConfig& c, const std::string& v) { c.signals_to_handle = v; });
    torch("--shutdown-timeout", "", "SECONDS",
          "Seconds between the stop signal and SIGKILL (default TORCH_ELASTIC_SHUTDOWN_TIMEOUT, "
          "else 30); --term-timeout is the same",
          [](LaunchConfig& c, const std::string& v) {
            c.term_timeout = seconds_value("--shutdown-timeout", v);
          });
    torch("--virtual-local-rank", "", "",
          "LOCAL_RANK 0 for every worker, each seeing its own GPU as device 0",
          [](LaunchConfig& c, const std::string& v) {
            c.virtual_local_rank = switch_value("--virtual-local-rank", v);
          });
    t.push_back(Flag{"--print-completion", "", "SHELL", "Print a completion script (bash) and exit",
                     Origin::kTorchrun, false, [](LaunchConfig&, const std::string&) {}, "bash"});
    // ---- torch.distributed.launch --------------------------------------------------------------
    t.push_back(Flag{"--use-env", "", "",
                     "torch.distributed.launch's flag: LOCAL_RANK in the environment only (the "
                     "default; undoes --append-local-rank)",
                     Origin::kLaunch, false, [](LaunchConfig& c, const std::string& v) {
                       if (switch_value("--use-env", v)) c.append_local_rank = false;
                     }});
    own("--append-local-rank", "",
        "torch.distributed.launch's way: append --local-rank=N to each worker's arguments (for "
        "scripts that parse --local_rank and never read LOCAL_RANK)",
        [](LaunchConfig& c, const std::string& v) {
          c.append_local_rank = switch_value("--append-local-rank", v);
        });
    own("--legacy-local-rank", "",
        "torch.distributed.launch's way in PyTorch 1.x: append --local_rank=N to each worker's "
        "arguments (for scripts that parse --local_rank; the same as --append-local-rank "
        "--local-rank-flag --local_rank)",
        [](LaunchConfig& c, const std::string& v) {
          if (!switch_value("--legacy-local-rank", v)) return;
          c.append_local_rank = true;
          c.local_rank_flag = "--local_rank";
        });
    own("--local-rank-flag", "FLAG",
        "The flag --append-local-rank appends (default --local-rank; --local_rank for old "
        "scripts)",
        [](LaunchConfig& c, const std::string& v) {
          if (v.rfind("-", 0) != 0) bad("--local-rank-flag", "takes a flag such as --local_rank");
          c.local_rank_flag = v;
          c.append_local_rank = true;
        });
    // ---- cohortrun's own ----------------------------------------------------------------------
    own("--term-timeout", "SECONDS", "Same as --shutdown-timeout",
        [](LaunchConfig& c, const std::string& v) {
          c.term_timeout = seconds_value("--term-timeout", v);
        });
    own("--worker-hang-timeout", "SECONDS",
        "Stop the job once it has been hung this long: some ranks waited in a collective another "
        "rank never entered, or a worker that beat fell silent (0: off; default 0)",
        [](LaunchConfig& c, const std::string& v) {
          c.worker_hang_timeout = seconds_value("--worker-hang-timeout", v);
        });
    own("--hang-report-after", "SECONDS",
        "Name a hang (its culprit, in the log and in cohortctl status) once it has lasted this "
        "long, without stopping the job (0: off; default 300)",
        [](LaunchConfig& c, const std::string& v) {
          c.hang_report_after = seconds_value("--hang-report-after", v);
        });
    own("--timeout", "SECONDS",
        "Deadline of a libcohort collective, exported as COHORT_TIMEOUT_S (default 1800)",
        [](LaunchConfig& c, const std::string& v) {
          if (seconds_value("--timeout", v).count() <= 0)
            bad("--timeout", "must be more than 0 seconds");
          c.collective_timeout = v;
        });
    own("--exit-barrier-timeout", "SECONDS",
        "Seconds the agent that hosts the store keeps it up for the others to read the outcome "
        "(default 30)",
        [](LaunchConfig& c, const std::string& v) {
          c.exit_barrier_timeout = seconds_value("--exit-barrier-timeout", v);
        });
    own("--wait-after-first-exit", "SECONDS",
        "Once one node's workers have all succeeded, the others may run this long before the job "
        "is stopped, as srun -W (default: --exit-barrier-timeout; 0: no bound)",
        [](LaunchConfig& c, const std::string& v) {
          c.wait_after_first_exit = seconds_value("--wait-after-first-exit", v);
        });
    own("--devices", "LIST",
        "GPUs for the local ranks, in order (2,5): workers see them as CUDA_VISIBLE_DEVICES, so "
        "LOCAL_RANK i selects the i-th; COHORT_DEVICE names each worker's own (with "
        "--virtual-local-rank, the only one it sees); --nproc-per-node defaults to their number",
        [](LaunchConfig& c, const std::string& v) {
          c.devices.clear();
          std::stringstream ss(v);
          for (std::string item; std::getline(ss, item, ',');) {
            if (item.empty() || item.find_first_of(" \t") != std::string::npos)
              bad("--devices",
                  "takes a comma-separated list of device indices or UUIDs (got '" + v + "')");
            c.devices.push_back(item);
          }
          if (c.devices.empty()) bad("--devices", "needs at least one device");
        });
    own("--store-loss-grace", "SECONDS",
        "Elastic jobs: how long workers keep running while the rendezvous store cannot be "
        "reached (a cohortd restarting), before they are stopped as for a lost node (default "
        "60; never less than the keep-alive timeout)",
        [](LaunchConfig& c, const std::string& v) {
          c.store_loss_grace = seconds_value("--store-loss-grace", v);
        });
    own("--auth-token-file", "PATH",
        "Protect the store with the token in this file: agents and libcohort workers prove they "
        "know it; every node needs the same file",
        [](LaunchConfig& c, const std::string& v) {
          try {
            c.auth_token = auth::read_token_file(v);
            // As cohortd judges it: too short is refused, readable by others is said.
            if (std::string warning = auth::check_token_file(v, c.auth_token); !warning.empty())
              c.notes.push_back(warning);
          } catch (const std::exception& e) {
            bad("--auth-token-file", std::string(": ") + e.what());
          }
        });
    own("--allow-unauthenticated-from", "CIDR,...",
        "Networks whose clients may use the store without the token (PyTorch's own clients "
        "cannot present one)",
        [](LaunchConfig& c, const std::string& v) {
          try {
            auth::parse_cidrs(v);
          } catch (const std::exception& e) {
            bad("--allow-unauthenticated-from", std::string(": ") + e.what());
          }
          c.allow_unauthenticated_from = v;
        });
    own(
        "--store-relay", "auto|on|off",
        "Workers reach their round's store through this node's relay, one connection for the "
        "node instead of one per worker (auto: for jobs that may have 1,024 ranks or more; "
        "docs/RELAY.md)",
        [](LaunchConfig& c, const std::string& v) {
          if (v == "auto") {
            c.store_relay = StoreRelay::kAuto;
          } else if (v == "on") {
            c.store_relay = StoreRelay::kOn;
          } else if (v == "off") {
            c.store_relay = StoreRelay::kOff;
          } else {
            bad("--store-relay", "'" + v + "' is none of auto, on, off");
          }
        },
        "auto on off");
    own("--slurm", "",
        "Inside a Slurm allocation: nodes, node rank, master address and port, run id and workers "
        "per node from SLURM_* (flags given explicitly still win)",
        [](LaunchConfig& c, const std::string& v) { c.slurm = switch_value("--slurm", v); });
    own("--no-cohort-module", "",
        "Do not load cohortrun's worker module into Python workers (then they beat only when the "
        "script imports cohort, and a hang is judged by beats alone)",
        [](LaunchConfig& c, const std::string& v) {
          c.cohort_module = !switch_value("--no-cohort-module", v);
        });
    own("--no-orphan-sweep", "", "Do not kill what cohortrun agents killed by SIGKILL left behind",
        [](LaunchConfig& c, const std::string& v) {
          c.sweep_orphans = !switch_value("--no-orphan-sweep", v);
        });
    own("--no-fork-server", "",
        "Start restarted Python workers with a new interpreter instead of forking them from the "
        "per-rank fork server that imported torch while the job ran (also COHORT_FORK_SERVER=0)",
        [](LaunchConfig& c, const std::string& v) {
          c.fork_server = !switch_value("--no-fork-server", v);
        });
    own("--gpu-preflight", "",
        "Before joining, check every GPU this node will use through NVML: visible, no other "
        "process holding memory, no uncorrected ECC error, Xid or failed row remap; a GPU that "
        "fails is named and the node exits 1 without joining",
        [](LaunchConfig& c, const std::string& v) {
          c.gpu_preflight = switch_value("--gpu-preflight", v);
        });
    own("--metrics-port", "PORT",
        "Serve this node agent's Prometheus metrics at http://127.0.0.1:PORT/metrics (0: a free "
        "port, logged); off by default",
        [](LaunchConfig& c, const std::string& v) {
          c.metrics_port = int_value("--metrics-port", v, 0, 65535);
        });
    own("--metrics-addr", "HOST:PORT",
        "Serve the metrics at this address instead (0.0.0.0:PORT for scrapers on other hosts)",
        [](LaunchConfig& c, const std::string& v) {
          try {
            (void)metrics_address(v, -1, "");
          } catch (const std::exception& e) {
            bad("--metrics-addr", std::string(": ") + e.what());
          }
          c.metrics_addr = v;
        });
    own("--straggler-factor", "X",
        "Name a rank whose compute time per step stays above the median of all ranks' by this "
        "factor for --straggler-window (libcohort workers; 0: off)",
        [](LaunchConfig& c, const std::string& v) {
          auto x = parse_double(v);
          if (!x || !(*x == 0 || *x > 1))
            bad("--straggler-factor", "takes 0 (off) or a number > 1 (got '" + v + "')");
          c.straggler_factor = *x;
        });
    own("--straggler-window", "SECONDS",
        "How long a rank must stay slow before it is named a straggler",
        [](LaunchConfig& c, const std::string& v) {
          c.straggler_window = seconds_value("--straggler-window", v);
        });
    own("--version", "", "Print the version and exit", [](LaunchConfig&, const std::string&) {});
    return t;
  }();
  return table;
}

// A long option written on the command line (exact spelling, or an argparse abbreviation) ->
// its row. Throws UsageError for an unknown or ambiguous name.
const Flag& lookup(const std::string& written) {
  const Flag* exact = nullptr;
  std::vector<const Flag*> prefixed;
  for (const auto& f : flags()) {
    const std::string u = underscored(f.name);
    if (written == f.name || written == u || (!f.short_name.empty() && written == f.short_name))
      exact = &f;
    else if (written.size() > 2 && written.rfind("--", 0) == 0 &&
             (f.name.rfind(written, 0) == 0 || u.rfind(written, 0) == 0))
      prefixed.push_back(&f);
  }
  if (exact) return *exact;
  if (prefixed.size() == 1) return *prefixed.front();
  if (prefixed.empty()) {
    throw UsageError("unknown flag '" + written +
                     "' before the entry point; cohortrun --help lists the flags");
  }
  std::string options;
  for (const Flag* f : prefixed) options += (options.empty() ? "" : ", ") + f->name;
  throw UsageError("ambiguous flag '" + written + "': it could be " + options);
}

}  // namespace

StreamSpec parse_stream_spec(const std::string& text, const std::string& flag) {
  StreamSpec spec;
  auto value = [&](const std::string& v) {
    if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return v[0] - '0';
    bad(flag, "values are 0 (none), 1 (stdout), 2 (stderr) or 3 (both); got '" + v + "' in '" +
                  text + "'");
  };
  if (text.find(':') == std::string::npos) {
    spec.all = value(text);
    return spec;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0)
      bad(flag, "expects N or local_rank:N,... (got '" + text + "')");
    auto rank = parse_int(item.substr(0, colon), 0, 1 << 20);
    if (!rank) bad(flag, ": '" + item.substr(0, colon) + "' is not a local rank");
    spec.per_rank[*rank] = value(item.substr(colon + 1));
  }
  return spec;
}

CliResult parse_cli(int argc, char** argv, const std::map<std::string, std::string>& env,
                    LaunchConfig* c) {
  // Defaults from the environment first (torchrun: PET_<FLAG>), then the command line.
  if (auto it = env.find("TORCH_ELASTIC_SHUTDOWN_TIMEOUT"); it != env.end() && !it->second.empty())
    c->term_timeout = seconds_value("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", it->second);
  // As torchrun 2.x reads it: seconds; empty, unparsable or not positive turns the check off.
  if (auto it = env.find("TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT"); it != env.end()) {
    char* end = nullptr;
    const double s = std::strtod(it->second.c_str(), &end);
    if (!it->second.empty() && end != nullptr && *end == '\0' && s > 0 && s < 1e9)
      c->uninterruptible_state_timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  if (auto it = env.find("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"); it != env.end())
    c->log_line_prefix_template = it->second;
  if (auto it = env.find(worker_env::kForkServer); it != env.end() && !it->second.empty()) {
    if (it->second != "0" && it->second != "1") {
      throw UsageError(std::string(worker_env::kForkServer) + "='" + it->second +
                       "': set it to 0 (restarted Python workers start a new interpreter) or 1 "
                       "(they are forked from a fork server, the default)");
    }
    c->fork_server = it->second == "1";
  }
  for (const auto& f : flags()) {
    if (!f.pet) continue;
    auto it = env.find(pet_name(f.name));
    if (it == env.end()) continue;
    try {
      f.apply(*c, it->second);
    } catch (const UsageError& e) {
      throw UsageError(std::string(e.what()) + " (from " + pet_name(f.name) + ")");
    }
    c->given.insert(f.name);
  }

  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the entry point
    if (arg == "-h" || arg == "--help" ||
        (arg.size() > 2 && std::string("--help").rfind(arg, 0) == 0 && arg.size() >= 4))
      return {CliAction::kPrint, help_text()};
    std::string name = arg, value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      if (auto eq = arg.find('='); eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else if (arg.size() > 2) {
      name = arg.substr(0, 2);  // -r3, -t1
      value = arg.substr(2);
      has_value = true;
    }
    const Flag& f = lookup(name);
    if (f.placeholder.empty()) {
      if (has_value && f.short_name == name) bad(f.name, "takes no value (got '" + arg + "')");
    } else if (!has_value) {
      if (i + 1 >= argc) bad(f.name, "needs a value: " + f.placeholder);
      value = argv[++i];
    }
    if (f.name == "--version") return {CliAction::kPrint, version_line("cohortrun")};
    if (f.name == "--print-completion") {
      if (value != "bash") bad("--print-completion", "supports bash (got '" + value + "')");
      return {CliAction::kPrint, bash_completion()};
    }
    f.apply(*c, value);
    c->given.insert(f.name);
  }
  if (i >= argc) {
    throw UsageError(
        "no entry point given. Usage: cohortrun [options] train.py [args...] (or -m module, or "
        "--no-python program)");
  }
  c->training_script = argv[i];
  c->training_script_args.assign(argv + i + 1, argv + argc);
  return {CliAction::kLaunch, {}};
}

void validate(LaunchConfig* config) {
  LaunchConfig& c = *config;
  if (c.module && c.no_python) throw UsageError("-m/--module and --no-python cannot be combined");
  if (c.standalone) {
    // torchrun: "--rdzv-backend, --rdzv-endpoint, --rdzv-id are auto-assigned and any explicitly
    // set values are ignored" (cluster defaults often set PET_RDZV_*).
    std::vector<std::string> ignored;
    for (const char* f : {"--rdzv-backend", "--rdzv-endpoint", "--rdzv-id"})
      if (c.given.contains(f)) ignored.push_back(f);
    if (!ignored.empty()) {
      std::string list;
      for (const auto& f : ignored) list += (list.empty() ? "" : ", ") + f;
      c.notes.push_back("--standalone: ignoring " + list +
                        " (a one-node job with a private store on a free port)");
    }
    c.rdzv_backend = RdzvBackend::kStatic;
    c.rdzv_endpoint.clear();
    c.rdzv_id = "none";
    if (c.max_nodes != 1) throw UsageError("--standalone runs one node; drop --nnodes");
    return;
  }
  if (c.rdzv_backend != RdzvBackend::kStatic) {
    // torchrun takes these and ignores them under c10d, so a job silently runs as something else.
    if (c.node_rank != 0) {
      throw UsageError("--node-rank " + std::to_string(c.node_rank) +
                       " is for the static rendezvous; with --rdzv-backend c10d or etcd the "
                       "rendezvous assigns node ranks (drop --node-rank, or use --rdzv-backend "
                       "static with --master-addr)");
    }
    for (const char* f : {"--master-addr", "--master-port"}) {
      if (c.given.contains(f))
        c.notes.push_back(std::string(f) +
                          " is ignored: with an elastic rendezvous the store is "
                          "--rdzv-endpoint " +
                          c.rdzv_endpoint);
    }
    return;
  }
  if (c.min_nodes != c.max_nodes) {
    throw UsageError("--nnodes " + std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes) +
                     " needs an elastic rendezvous (--rdzv-backend c10d --rdzv-endpoint "
                     "host:port); the static rendezvous needs a fixed --nnodes N");
  }
  if (c.node_rank >= c.max_nodes) {
    throw UsageError("--node-rank " + std::to_string(c.node_rank) + " is outside 0.." +
                     std::to_string(c.max_nodes - 1) + " for --nnodes " +
                     std::to_string(c.max_nodes));
  }
  if (c.max_nodes > 1 && c.master_port == 0) {
    throw UsageError(
        "--master-port 0 works only for one-node jobs: the other nodes must know the port");
  }
}

std::string help_text() {
  std::ostringstream os;
  os << "Usage: cohortrun [options] <script.py | -m module | --no-python program> [args...]\n\n"
        "Starts --nproc-per-node workers per node, watches them, restarts failed groups and "
        "explains\nfailures. Takes torchrun's flags (--flag-name or --flag_name, unambiguous "
        "abbreviations);\nPET_<FLAG> variables give defaults. Python entry points run with "
        "PYTHON_EXEC; else, when\ncohortrun is installed in a virtual environment (pip), that "
        "environment's python3; else the\npython3 on PATH. python -m cohort.run sets PYTHON_EXEC "
        "to its own interpreter.\n";
  const char* titles[] = {"torchrun's flags", "torch.distributed.launch's flags",
                          "cohortrun's own flags"};
  for (Origin o : {Origin::kTorchrun, Origin::kLaunch, Origin::kCohort}) {
    os << "\n" << titles[static_cast<int>(o)] << ":\n";
    for (const auto& f : flags()) {
      if (f.origin != o) continue;
      std::string left = "  " + (f.short_name.empty() ? "" : f.short_name + ", ") + f.name;
      if (!f.placeholder.empty()) left += " " + f.placeholder;
      os << left;
      if (left.size() < 40) {
        os << std::string(40 - left.size(), ' ');
      } else {
        os << "\n" << std::string(40, ' ');
      }
      // Wrap the help at 100 columns.
      std::istringstream words(f.help);
      std::string w;
      size_t col = 40;
      bool first = true;
      while (words >> w) {
        if (!first && col + 1 + w.size() > 100) {
          os << "\n" << std::string(40, ' ');
          col = 40;
          first = true;
        }
        if (!first) {
          os << ' ';
          ++col;
        }
        os << w;
        col += w.size();
        first = false;
      }
      os << "\n";
    }
  }
  os << "  -h, --help                            Print this help and exit\n"
        "\nExit status: 0 when every worker of every node succeeded; 1 when the job failed; "
        "128+N when\ncohortrun stopped the job because it received signal N; 2 for a usage "
        "error.\n";
  return os.str();
}

std::string bash_completion() {
  std::ostringstream words, values;
  for (const auto& f : flags()) {
    words << f.name << ' ' << underscored(f.name) << ' ';
    if (!f.short_name.empty()) words << f.short_name << ' ';
    if (!f.choices.empty())
      values << "    " << f.name << "|" << underscored(f.name) << ") COMPREPLY=($(compgen -W \""
             << f.choices << "\" -- \"$cur\")); return ;;\n";
    else if (f.placeholder == "PATH")
      values << "    " << f.name << "|" << underscored(f.name)
             << ") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n";
  }
  std::ostringstream os;
  os << "# bash completion for cohortrun (cohortrun --print-completion bash)\n"
        "_cohortrun() {\n"
        "  local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"${COMP_WORDS[COMP_CWORD-1]}\"\n"
        "  case \"$prev\" in\n"
     << values.str()
     << "  esac\n"
        "  if [[ \"$cur\" == -* ]]; then\n"
        "    COMPREPLY=($(compgen -W \""
     << words.str()
     << "--help -h\" -- \"$cur\"))\n"
        "  else\n"
        "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
        "  fi\n"
        "}\n"
        "complete -F _cohortrun cohortrun\n";
  return os.str();
}

}  // namespace cohort::launch

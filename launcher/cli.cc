#include "cohort/launch/cli.h"

#include <CLI/CLI.hpp>

#include <sstream>
#include <stdexcept>
#include "cohort/rdzv/auth.h"

namespace cohort::launch {
namespace {

// "--nproc-per-node,--nproc_per_node" for a dashed flag name.
std::string both_spellings(const std::string& dashed) {
  std::string under = dashed;
  for (size_t i = 2; i < under.size(); ++i)
    if (under[i] == '-') under[i] = '_';
  return under == dashed ? dashed : dashed + "," + under;
}

// PET_NPROC_PER_NODE for "--nproc-per-node".
std::string pet_name(const std::string& dashed) {
  std::string s = "PET_";
  for (size_t i = 2; i < dashed.size(); ++i)
    s.push_back(dashed[i] == '-' ? '_' : static_cast<char>(std::toupper(dashed[i])));
  return s;
}

void parse_nnodes(const std::string& text, LaunchConfig* c) {
  auto colon = text.find(':');
  try {
    size_t used = 0;
    if (colon == std::string::npos) {
      c->min_nodes = c->max_nodes = std::stoi(text, &used);
      if (used != text.size()) throw std::invalid_argument(text);
    } else {
      c->min_nodes = std::stoi(text.substr(0, colon), &used);
      if (used != colon) throw std::invalid_argument(text);
      std::string max = text.substr(colon + 1);
      c->max_nodes = std::stoi(max, &used);
      if (used != max.size()) throw std::invalid_argument(text);
    }
  } catch (const std::exception&) {
    throw std::invalid_argument("--nnodes must be N or MIN:MAX (got '" + text + "')");
  }
  if (c->min_nodes < 1 || c->max_nodes < c->min_nodes) {
    throw std::invalid_argument("--nnodes needs 1 <= MIN <= MAX (got '" + text + "')");
  }
}

double parse_seconds(const std::string& text, const std::string& flag) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used != text.size() || v < 0) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    throw std::invalid_argument(flag + " takes seconds, a number >= 0 (got '" + text + "')");
  }
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

}  // namespace

StreamSpec parse_stream_spec(const std::string& text, const std::string& flag) {
  StreamSpec spec;
  auto value = [&](const std::string& v) {
    if (v.size() == 1 && v[0] >= '0' && v[0] <= '3') return v[0] - '0';
    throw std::invalid_argument(flag +
                                " values are 0 (none), 1 (stdout), 2 (stderr) or 3 (both); got '" +
                                v + "' in '" + text + "'");
  };
  if (text.find(':') == std::string::npos) {
    spec.all = value(text);
    return spec;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0) {
      throw std::invalid_argument(flag + " expects N or local_rank:N,... (got '" + text + "')");
    }
    int rank;
    try {
      size_t used = 0;
      rank = std::stoi(item.substr(0, colon), &used);
      if (used != colon || rank < 0) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw std::invalid_argument(flag + ": '" + item.substr(0, colon) + "' is not a local rank");
    }
    spec.per_rank[rank] = value(item.substr(colon + 1));
  }
  return spec;
}

CliResult parse_cli(int argc, char** argv, const std::map<std::string, std::string>& env,
                    LaunchConfig* c) {
  CLI::App app{
      "cohortrun: starts --nproc-per-node workers per node and restarts failed groups.\n"
      "Accepts torchrun's flags (both --flag-name and --flag_name); PET_<FLAG> variables give "
      "defaults.\nUsage: cohortrun [options] <script.py | -m module | --no-python program> "
      "[args...]",
      "cohortrun"};
  app.prefix_command();  // everything from the entry point on belongs to the workers
  app.set_help_flag("-h,--help");
  app.get_formatter()->column_width(36);

  std::string nnodes = "1:1", redirects = "0", tee = "0", ranks_filter;
  std::string term_timeout = "30", hang_timeout = "0", exit_barrier_timeout = "30";
  std::string monitor_interval;
  std::string master_port;

  // Only PET_* values from `env` count (tests pass their own map); CLI11 reads getenv itself, so
  // defaults come from here instead of ->envname().
  auto pet = [&](const std::string& flag, std::string* target) {
    auto it = env.find(pet_name(flag));
    if (it != env.end()) *target = it->second;
  };
  auto names = [](const std::string& flag, const std::string& short_name) {
    return short_name.empty() ? both_spellings(flag) : short_name + "," + both_spellings(flag);
  };
  std::vector<std::pair<std::string, CLI::Option*>> options;
  auto opt = [&](const std::string& flag, std::string* target, const std::string& help,
                 const std::string& short_name = "") {
    if (env.contains(pet_name(flag))) c->given.insert(flag);
    pet(flag, target);
    CLI::Option* o = app.add_option(names(flag, short_name), *target, help);
    options.emplace_back(flag, o);
    return o;
  };
  auto flag = [&](const std::string& name, bool* target, const std::string& help,
                  const std::string& short_name = "") {
    auto it = env.find(pet_name(name));
    if (it != env.end())
      *target = it->second == "1" || it->second == "true" || it->second == "True";
    return app.add_flag(names(name, short_name), *target, help);
  };
  std::string node_rank = std::to_string(c->node_rank), max_restarts = "0";

  opt("--nnodes", &nnodes, "Number of nodes, N or MIN:MAX (default 1:1)");
  opt("--nproc-per-node", &c->nproc_per_node, "Workers per node: N, cpu, gpu or auto (default 1)");
  opt("--node-rank", &node_rank, "Rank of this node for static rendezvous (default 0)");
  opt("--master-addr", &c->master_addr,
      "Address of node 0, where the store runs (default 127.0.0.1)");
  opt("--master-port", &master_port,
      "Port of the store on node 0 (default 29500; a free port for single-node jobs)");
  flag("--standalone", &c->standalone,
       "Single-node job with a private store on a free port and a fresh run id");
  opt("--rdzv-backend", &c->rdzv_backend, "Rendezvous backend (default static)");
  opt("--rdzv-endpoint", &c->rdzv_endpoint, "Rendezvous endpoint host:port");
  opt("--rdzv-id", &c->rdzv_id, "Job id shared by all nodes (default none)");
  opt("--rdzv-conf", &c->rdzv_conf, "Rendezvous settings k=v,k=v (timeout=S, ...)");
  opt("--max-restarts", &max_restarts, "Restarts of the worker group before failing (default 0)");
  opt("--monitor-interval", &monitor_interval,
      "Accepted for torchrun compatibility and ignored: cohortrun sees exits as they happen");
  opt("--start-method", &c->start_method,
      "Accepted for compatibility (spawn, fork, forkserver); workers are always fresh processes");
  opt("--role", &c->role, "Role name of the workers (default 'default')");
  flag("--module", &c->module, "Run the entry point as a Python module (python -m)", "-m");
  flag("--no-python", &c->no_python, "Run the entry point directly instead of with Python");
  flag("--run-path", &c->run_path, "Run the script by path with Python (as torchrun's runpy)");
  opt("--log-dir", &c->log_dir,
      "Directory for workers' logs and error files (default: a temp dir)");
  opt("--redirects", &redirects,
      "Redirect workers' streams to files: N or lr:N,... (1 out, 2 err, 3 both)", "-r");
  opt("--tee", &tee, "Like --redirects, and also copy to the console with a [role<rank>]: prefix",
      "-t");
  opt("--local-ranks-filter", &ranks_filter,
      "Console output only from these local ranks (e.g. 0,1)");
  opt("--local-addr", &c->local_addr, "Address this node advertises to the others");
  opt("--signals-to-handle", &c->signals_to_handle,
      "Signals forwarded to the workers (default SIGTERM,SIGINT,SIGHUP,SIGQUIT)");
  opt("--term-timeout", &term_timeout,
      "Seconds between the stop signal and SIGKILL when stopping workers (default 30)");
  opt("--worker-hang-timeout", &hang_timeout,
      "Seconds without a heartbeat after which a worker that has beaten counts as hung (0: off)");
  opt("--timeout", &c->collective_timeout,
      "Seconds a libcohort collective may take before it fails naming the missing rank (exported "
      "as COHORT_TIMEOUT_S; default 1800)");
  opt("--exit-barrier-timeout", &exit_barrier_timeout,
      "Seconds node 0 keeps the store up for the other nodes to read the outcome (default 30)");
  std::string token_file;
  opt("--auth-token-file", &token_file,
      "Protect the store with the token in this file: agents and libcohort workers prove they "
      "know it; every node needs the same file");
  opt("--allow-unauthenticated-from", &c->allow_unauthenticated_from,
      "Networks (a.b.c.d/n,...) whose clients may use the store without the token (PyTorch's "
      "own clients cannot present one)");
  flag("--slurm", &c->slurm,
       "Inside a Slurm allocation: nodes, node rank, master address and port, run id and workers "
       "per node from SLURM_* (flags given explicitly still win); same as --nnodes slurm");
  bool no_sweep = false;
  app.add_flag("--no-orphan-sweep", no_sweep,
               "Do not kill leftovers of earlier cohortrun processes that died by SIGKILL");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return {0, app.help()};
  } catch (const CLI::ParseError& e) {
    return {2, std::string("cohortrun: ") + e.what() + "\nRun with --help for the flags."};
  }

  for (const auto& [name, o] : options)
    if (o->count() > 0) c->given.insert(name);
  try {
    if (nnodes == "slurm") {
      c->slurm = true;
      nnodes = "1";
    }
    parse_nnodes(nnodes, c);
    c->node_rank = std::stoi(node_rank);
    c->max_restarts = std::stoi(max_restarts);
    if (c->max_restarts < 0) throw std::invalid_argument("--max-restarts must be >= 0");
    if (!master_port.empty()) {
      c->master_port = std::stoi(master_port);
      c->master_port_given = true;
      if (c->master_port < 0 || c->master_port > 65535)
        throw std::invalid_argument("--master-port must be 0..65535");
    }
    if (!monitor_interval.empty())
      c->monitor_interval = parse_seconds(monitor_interval, "--monitor-interval");
    c->redirects = parse_stream_spec(redirects, "--redirects");
    c->tee = parse_stream_spec(tee, "--tee");
    c->term_timeout = to_ms(parse_seconds(term_timeout, "--term-timeout"));
    c->worker_hang_timeout = to_ms(parse_seconds(hang_timeout, "--worker-hang-timeout"));
    c->exit_barrier_timeout = to_ms(parse_seconds(exit_barrier_timeout, "--exit-barrier-timeout"));
    c->sweep_orphans = !no_sweep;
    if (!token_file.empty()) {
      try {
        c->auth_token = auth::read_token_file(token_file);
      } catch (const std::runtime_error& e) {
        throw std::invalid_argument(std::string("--auth-token-file: ") + e.what());
      }
    }
    auth::parse_cidrs(c->allow_unauthenticated_from);  // throws std::invalid_argument
    if (!c->allow_unauthenticated_from.empty() && c->auth_token.empty())
      throw std::invalid_argument("--allow-unauthenticated-from needs --auth-token-file");
    if (!c->collective_timeout.empty() && parse_seconds(c->collective_timeout, "--timeout") <= 0)
      throw std::invalid_argument("--timeout must be more than 0 seconds");
    if (!ranks_filter.empty()) {
      std::set<int> ranks;
      std::stringstream ss(ranks_filter);
      std::string item;
      while (std::getline(ss, item, ',')) ranks.insert(std::stoi(item));
      c->local_ranks_filter = ranks;
    }
  } catch (const std::invalid_argument& e) {
    std::string what = e.what();
    if (what.rfind("--", 0) != 0 && what.find("network") == std::string::npos &&
        what.find("prefix") == std::string::npos)
      what = "invalid number: " + what;
    return {2, "cohortrun: " + what};
  } catch (const std::out_of_range& e) {
    return {2, std::string("cohortrun: number out of range: ") + e.what()};
  }

  std::vector<std::string> rest = app.remaining();
  if (rest.empty()) {
    return {2,
            "cohortrun: no entry point given. Usage: cohortrun [options] train.py [args...] "
            "(or -m module, or --no-python program)"};
  }
  if (rest.front().size() > 1 && rest.front()[0] == '-') {
    return {2, "cohortrun: unknown flag '" + rest.front() +
                   "' before the entry point. Run with --help for the flags."};
  }
  c->training_script = rest.front();
  c->training_script_args.assign(rest.begin() + 1, rest.end());
  return {-1, {}};
}

std::string validate(const LaunchConfig& c) {
  const std::string& b = c.rdzv_backend;
  if (b == "etcd-v2") {
    return "--rdzv-backend etcd-v2 (etcd's v2 API) is not supported; use --rdzv-backend etcd "
           "(the v3 API) or c10d";
  }
  if (b == "c10d" || b == "cohort" || b == "etcd") {
    if (c.standalone) return "--standalone chooses its own rendezvous; drop --rdzv-backend";
    if (c.module && c.no_python) return "-m/--module and --no-python cannot be combined";
    return {};
  }
  if (b != "static") {
    return "--rdzv-backend '" + b + "' is unknown (static, c10d, cohort, etcd)";
  }
  if (c.min_nodes != c.max_nodes) {
    return "--nnodes " + std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes) +
           " needs an elastic rendezvous (--rdzv-backend c10d --rdzv-endpoint host:port); the "
           "static rendezvous needs a fixed --nnodes N";
  }
  if (c.node_rank < 0 || c.node_rank >= c.max_nodes) {
    return "--node-rank " + std::to_string(c.node_rank) + " is outside 0.." +
           std::to_string(c.max_nodes - 1) + " for --nnodes " + std::to_string(c.max_nodes);
  }
  if (c.standalone && c.max_nodes != 1) return "--standalone runs one node; drop --nnodes";
  if (c.module && c.no_python) return "-m/--module and --no-python cannot be combined";
  if (c.max_nodes > 1 && c.master_port == 0) {
    return "--master-port 0 works only for single-node jobs: the other nodes must know the port";
  }
  return {};
}

}  // namespace cohort::launch

#include "plan/job_plan.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cohort/base/net.h"
#include "cohort/base/parse.h"
#include "cohort/base/random.h"
#include "cohort/error.h"
#include "cohort/launch/cli.h"
#include "failure/failure.h"
#include "plan/node_resources.h"
#include "plan/slurm_mode.h"

namespace cohort::launch {
namespace {

std::string make_log_root(const std::string& log_dir, const std::string& run_id,
                          std::string* temp_base) {
  std::string base = log_dir;
  if (base.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cohortrun_XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      int e = errno;
      throw IoError("cannot create a log directory " + templ + ": " + std::strerror(e), e);
    }
    base = buf.data();
    *temp_base = base;
  }
  // torchrun's layout: <log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/
  std::string root = base + "/" + run_id + "_" + random_tag(8);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) throw IoError("cannot create the log directory " + root + ": " + ec.message());
  return root;
}

std::vector<int> parse_signals(const std::string& list, std::vector<std::string>* notes) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string name;
  while (std::getline(ss, name, ',')) {
    if (name.empty()) continue;
    int sig = signal_number(name);
    if (sig <= 0 || sig == SIGKILL || sig == SIGSTOP) {
      notes->push_back("--signals-to-handle: ignoring '" + name +
                       "' (not a signal cohortrun can handle)");
      continue;
    }
    out.push_back(sig);
  }
  return out;
}

// The `cohort` Python package's folder: $COHORT_PYTHON_DIR, else beside an installed cohortrun
// (<prefix>/lib/cohort/python), else this build's source tree.
std::string find_python_dir(const EnvMap& env) {
  namespace fs = std::filesystem;
  auto has_module = [](const fs::path& dir) { return fs::exists(dir / "cohort" / "__init__.py"); };
  if (auto it = env.find("COHORT_PYTHON_DIR"); it != env.end() && !it->second.empty())
    return it->second;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path installed = exe.parent_path().parent_path() / "lib" / "cohort" / "python";
    if (has_module(installed)) return installed.string();
  }
#ifdef COHORT_SOURCE_PYTHON_DIR
  if (has_module(COHORT_SOURCE_PYTHON_DIR)) return COHORT_SOURCE_PYTHON_DIR;
#endif
  return {};
}

// `file` (a path under a folder of Python packages): in `python_dir`, else in the site-packages of
// the virtual environment cohortrun was installed into as a wheel (<venv>/bin/cohortrun); "" when
// in neither.
std::string find_python_file(const std::string& python_dir, const std::filesystem::path& file) {
  namespace fs = std::filesystem;
  if (!python_dir.empty())
    return fs::exists(fs::path(python_dir) / file) ? (fs::path(python_dir) / file).string()
                                                   : std::string();
  std::error_code ec;
  const fs::path lib = fs::read_symlink("/proc/self/exe", ec).parent_path().parent_path() / "lib";
  if (ec || !fs::is_directory(lib, ec)) return {};
  for (const auto& entry : fs::directory_iterator(lib, ec)) {
    const fs::path site = entry.path() / "site-packages";
    if (entry.path().filename().string().rfind("python3", 0) == 0 && fs::exists(site / file))
      return (site / file).string();
  }
  return {};
}

// The worker module's boot folder (see find_python_file).
std::string find_cohort_boot_dir(const std::string& python_dir) {
  const std::string boot = find_python_file(
      python_dir, std::filesystem::path("_cohort_worker") / "boot" / "sitecustomize.py");
  return boot.empty() ? boot : std::filesystem::path(boot).parent_path().string();
}

// A run id for an elastic job given none: torchrun's default "none" puts every such job on one
// endpoint into one rendezvous. The nodes of one job run the same script (or program, or -m
// module) against the same endpoint, each perhaps with arguments of its own (an --output_dir)
// and from another folder (train.py, ./train.py): the endpoint and the entry point's name make
// the id, so that they meet and jobs of other scripts there do not. Nodes that still wait apart
// find each other in the store's lobby (rdzv/lobby.h).
std::string derived_run_id(const std::string& endpoint, const std::string& entry_point) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xff) * 1099511628211ull;
  };
  mix(endpoint);
  mix(entry_point);
  char buf[32];
  std::snprintf(buf, sizeof buf, "job-%012llx", static_cast<unsigned long long>(h >> 16));
  return buf;
}

// Cores for the workers: this process's CPUs, bounded by what Slurm gave the task or the node.
int usable_cores(const EnvMap& env) {
  int cores = cpu_count();
  if (!env.contains("SLURM_JOB_ID")) return cores;
  for (const char* var : {"SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"}) {
    auto it = env.find(var);
    if (it == env.end()) continue;
    if (auto n = parse_int(it->second, 1, 1 << 20)) return std::min(cores, *n);
  }
  return cores;
}

}  // namespace

void apply_devices(LaunchConfig* config, EnvMap* env) {
  if (config->devices.empty()) return;
  std::string list;
  for (const auto& d : config->devices) list += (list.empty() ? "" : ",") + d;
  (*env)["CUDA_VISIBLE_DEVICES"] = list;
  if (!config->given.contains("--nproc-per-node"))
    config->nproc_per_node = std::to_string(config->devices.size());
}

JobPlan make_plan(LaunchConfig config, const EnvMap& env) {
  JobPlan p;
  if (config.slurm) apply_slurm(&config, env, &p.notes);
  validate(&config);
  for (auto& n : config.notes) p.notes.push_back(n);
  config.notes.clear();
  p.nproc = resolve_nproc_per_node(config.nproc_per_node, env);
  if (!config.devices.empty() && p.nproc > static_cast<int>(config.devices.size())) {
    throw UsageError("--nproc-per-node " + config.nproc_per_node + " starts " +
                     std::to_string(p.nproc) + " workers, but --devices names only " +
                     std::to_string(config.devices.size()) +
                     "; name a device for each worker, or start fewer");
  }
  p.rdzv_conf = parse_rdzv_conf(config.rdzv_conf);
  p.host = hostname();
  p.command = build_worker_command(config, env);
  if (!p.command.interpreter.empty()) {
    p.python_dir = find_python_dir(env);
    if (config.cohort_module) p.cohort_boot_dir = find_cohort_boot_dir(p.python_dir);
    const bool restarts = config.max_restarts > 0 || config.min_nodes != config.max_nodes;
    if (config.fork_server && restarts)
      p.fork_server_file = find_python_file(p.python_dir, "cohort/_forkserver.py");
  }
  p.run_id = config.standalone ? random_tag(8) : config.rdzv_id;
  if (config.rdzv_backend != RdzvBackend::kStatic && !config.given.contains("--rdzv-id") &&
      config.rdzv_id == "none") {
    p.run_id = derived_run_id(config.rdzv_endpoint, p.command.title);
    p.notes.push_back("no --rdzv-id: this job's run id is " + p.run_id +
                      " (from the endpoint and " + p.command.title +
                      ": every node started with it meets there, whatever its other arguments; "
                      "give --rdzv-id to choose one)");
  }
  if (config.standalone) config.master_addr = "127.0.0.1";
  p.stop_signals = parse_signals(config.signals_to_handle, &p.notes);
  // torchrun sets a blanket OMP_NUM_THREADS=1; sharing the cores out wastes none of them.
  if (!env.contains("OMP_NUM_THREADS") && p.nproc > 1) {
    const int cores = usable_cores(env);
    p.omp_threads = std::max(1, cores / p.nproc);
    p.notes.push_back("Setting OMP_NUM_THREADS=" + std::to_string(*p.omp_threads) +
                      " for each of the " + std::to_string(p.nproc) + " workers (" +
                      std::to_string(cores) + " cores / " + std::to_string(p.nproc) +
                      " workers); set OMP_NUM_THREADS to choose otherwise.");
  }
  if (config.numa_binding != NumaBinding::kNone) {
    std::set<int> allowed;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int i = 0; i < CPU_SETSIZE; ++i)
        if (CPU_ISSET(i, &set)) allowed.insert(i);
    CpuTopology t = read_cpu_topology("/sys", allowed);
    auto visible = visible_gpu_indices(
        env.contains("CUDA_VISIBLE_DEVICES") ? env.at("CUDA_VISIBLE_DEVICES") : std::string());
    if (auto why = binding_not_useful(t, config.numa_binding)) {
      p.notes.push_back(*why);
    } else if (!visible) {
      p.notes.push_back(
          "--numa-binding: CUDA_VISIBLE_DEVICES names GPUs by UUID; workers are not "
          "bound (give indices)");
    } else {
      p.numa = std::move(t);
      p.numa_visible = *visible;
    }
  }
  p.log_root = make_log_root(config.log_dir, p.run_id, &p.temp_log_base);
  if (!config.auth_token.empty())
    p.store_token_file = write_store_token(p.log_root, config.auth_token);
  p.config = std::move(config);
  return p;
}

std::string write_store_token(const std::string& dir, const std::string& token) {
  const std::string path = dir + "/store_token";
  // Created for the job's user alone (O_EXCL: never one that someone else put there first).
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    throw IoError("cannot create the workers' token file " + path + ": " + std::strerror(e), e);
  }
  const std::string text = token + "\n";
  bool ok = ::fchmod(fd, 0600) == 0 &&
            ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int e = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    throw IoError("cannot write the workers' token file " + path + ": " + std::strerror(e), e);
  }
  return path;
}

}  // namespace cohort::launch

#include "workers/worker_specs.h"

#include <algorithm>

#include <filesystem>
#include <sstream>

#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "loop/console.h"
#include "workers/worker_env.h"

namespace cohort::launch {
namespace {

// Sets KEY=VALUE in an environment list, replacing KEY's entry.
void set_env(std::vector<std::string>* env, const std::string& key, const std::string& value) {
  for (auto& e : *env) {
    if (e.size() > key.size() && e.compare(0, key.size(), key) == 0 && e[key.size()] == '=') {
      e = key + "=" + value;
      return;
    }
  }
  env->push_back(key + "=" + value);
}

void replace_all(std::string* s, const std::string& what, const std::string& with) {
  for (size_t at = s->find(what); at != std::string::npos; at = s->find(what, at + with.size()))
    s->replace(at, what.size(), with);
}

// How one stream of one worker is routed.
struct StreamPlan {
  StreamMode mode = StreamMode::kInherit;
  PumpRoute route;
  std::string file;
};

StreamPlan plan_stream(bool to_file, bool teed, bool filtered, bool always_read,
                       const std::string& file, const std::string& prefix,
                       std::shared_ptr<FilteredLog> duplicate, ConsoleStream& console) {
  StreamPlan p;
  const bool on_console = !filtered && (!to_file || teed);
  const bool needs_reading = to_file || teed || filtered || always_read || duplicate;
  if (!needs_reading) return p;  // the worker writes to cohortrun's own stream
  p.mode = on_console && console.is_terminal() ? StreamMode::kPty : StreamMode::kPipe;
  if (on_console) p.route.console = &console;
  if (teed) p.route.prefix = prefix;
  if (to_file) p.file = file;
  if (duplicate) {
    p.route.filtered = std::move(duplicate);
    p.route.filtered_prefix = prefix;
  }
  return p;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> restart_reason_env(
    const std::optional<Outcome>& previous) {
  std::vector<std::pair<std::string, std::string>> out;
  if (!previous) return out;
  std::string reason = previous->detail;
  if (previous->kind == Outcome::kRescale && reason.empty()) reason = "the node set changed";
  if (previous->first_failure) {
    const WorkerFailure& f = *previous->first_failure;
    reason = f.reason + " (rank " + std::to_string(f.global_rank) + ", local rank " +
             std::to_string(f.local_rank) + ", host " + f.host + ")";
    out.emplace_back("COHORT_RESTART_FAILED_RANK", std::to_string(f.global_rank));
    out.emplace_back("COHORT_RESTART_FAILED_HOST", f.host);
  }
  out.emplace_back("COHORT_RESTART_REASON", reason);
  return out;
}

std::string render_prefix(const std::string& templ, const std::string& role, int local_rank,
                          int rank, const std::string& host) {
  std::string s = templ.empty() ? "[${role_name}${local_rank}]:" : templ;
  replace_all(&s, "${role_name}", role);
  replace_all(&s, "${local_rank}", std::to_string(local_rank));
  replace_all(&s, "${rank}", std::to_string(rank));
  replace_all(&s, "${hostname}", host);
  return s;
}

GroupSpec make_group_spec(const JobPlan& plan, const EnvMap& env, const RankAssignment& a,
                          const HostPort& store, const std::string& agent_id,
                          const std::optional<Outcome>& previous, ConsoleStream& out,
                          ConsoleStream& err) {
  const LaunchConfig& c = plan.config;
  const auto restart_env = restart_reason_env(previous);
  GroupSpec g;
  g.node_rank = a.node_rank;
  g.base_rank = a.base_rank;
  g.host = plan.host;
  g.hang_timeout = c.worker_hang_timeout;
  // Workers that answer hang probes fall silent after the watch's timeout (observe/hang_watch.h).
  g.probe_silence = c.worker_hang_timeout.count() > 0 && c.hang_report_after.count() > 0
                        ? std::min(c.worker_hang_timeout, c.hang_report_after)
                        : std::max(c.worker_hang_timeout, c.hang_report_after);
  g.uninterruptible_timeout = c.uninterruptible_state_timeout;
  const std::string attempt = plan.log_root + "/attempt_" + std::to_string(a.restart_count);
  std::error_code ec;
  std::filesystem::create_directories(attempt, ec);
  if (ec) throw IoError("cannot create " + attempt + ": " + ec.message());
  std::shared_ptr<FilteredLog> dup_out, dup_err;
  if (!c.duplicate_stdout_filters.empty())
    dup_out =
        std::make_shared<FilteredLog>(attempt + "/filtered_stdout.log", c.duplicate_stdout_filters);
  if (!c.duplicate_stderr_filters.empty())
    dup_err =
        std::make_shared<FilteredLog>(attempt + "/filtered_stderr.log", c.duplicate_stderr_filters);

  for (int lr = 0; lr < a.local_world_size; ++lr) {
    WorkerSpec w;
    w.local_rank = lr;
    w.dir = attempt + "/" + std::to_string(lr);
    w.error_file = w.dir + "/error.json";

    WorkerEnvInputs in;
    in.config = &c;
    in.assignment = &a;
    in.local_rank = lr;
    in.master_addr = store.host;
    in.master_port = store.port;
    in.run_id = plan.run_id;
    in.error_file = w.error_file;
    in.omp_num_threads = plan.omp_threads;
    in.agent_id = agent_id;
    in.store_token_file = plan.store_token_file;
    w.request.env = build_worker_env(env, in);
    for (const auto& [k, v] : restart_env) set_env(&w.request.env, k, v);
    if (!plan.command.interpreter.empty()) {
      // A hung Python worker asked for its stack (SIGABRT) prints every thread's.
      if (!env.contains("PYTHONFAULTHANDLER")) set_env(&w.request.env, "PYTHONFAULTHANDLER", "1");
      // Where an NCCL worker that cannot answer a hang probe dumps its Flight Recorder when asked
      // (WorkerGroup::report_hung_with_stack), unless the worker's environment says.
      if (c.cohort_module) {
        auto pipe = env.find(worker_env::kTorchNcclDebugInfoPipeFile);
        auto dump = env.find(worker_env::kTorchNcclDebugInfoTempFile);
        w.nccl_pipe_stem = pipe != env.end() ? pipe->second : w.dir + "/nccl_fr_pipe_";
        w.nccl_dump_prefix = dump != env.end() ? dump->second : w.dir + "/nccl_fr_dump_";
        set_env(&w.request.env, worker_env::kTorchNcclDebugInfoPipeFile, w.nccl_pipe_stem);
        set_env(&w.request.env, worker_env::kTorchNcclDebugInfoTempFile, w.nccl_dump_prefix);
      }
      // cohortrun's worker module first (its boot folder's sitecustomize.py loads it before the
      // script: beats on every optimizer step, answers to hang probes), then `import cohort`.
      std::string path = plan.cohort_boot_dir;
      if (!plan.python_dir.empty()) path += (path.empty() ? "" : ":") + plan.python_dir;
      if (!path.empty()) {
        auto it = env.find("PYTHONPATH");
        if (it != env.end() && !it->second.empty()) path += ":" + it->second;
        set_env(&w.request.env, "PYTHONPATH", path);
      }
    }
    if (!c.devices.empty()) set_env(&w.request.env, "COHORT_DEVICE", c.devices[lr]);
    if (c.virtual_local_rank) {
      // torchrun 2.x: LOCAL_RANK 0, and only the worker's own GPU visible, as device 0.
      auto it = env.find("CUDA_VISIBLE_DEVICES");
      std::string device = std::to_string(lr);
      if (it != env.end()) {
        std::vector<std::string> list;
        std::stringstream ss(it->second);
        for (std::string item; std::getline(ss, item, ',');) list.push_back(item);
        if (static_cast<size_t>(lr) >= list.size()) {
          throw UsageError("--virtual-local-rank: local rank " + std::to_string(lr) +
                           " has no GPU in CUDA_VISIBLE_DEVICES=" + it->second);
        }
        device = list[static_cast<size_t>(lr)];
      }
      set_env(&w.request.env, "LOCAL_RANK", "0");
      set_env(&w.request.env, "CUDA_VISIBLE_DEVICES", device);
    }
    if (plan.numa) {
      Placement place = place_worker(*plan.numa, c.numa_binding, lr, plan.numa_visible);
      w.request.cpus.assign(place.cpus.begin(), place.cpus.end());
      w.request.mem_nodes.assign(place.mem_nodes.begin(), place.mem_nodes.end());
    }
    w.request.argv = plan.command.argv;
    if (c.append_local_rank) {
      w.request.argv.insert(w.request.argv.begin() + static_cast<long>(plan.command.args_at),
                            c.local_rank_flag + "=" + std::to_string(lr));
    }

    const int redirect = c.redirects.for_rank(lr) | c.tee.for_rank(lr);
    const int tee = c.tee.for_rank(lr);
    const bool filtered = c.local_ranks_filter && !c.local_ranks_filter->contains(lr);
    // Several nodes: torchrun's default prefix cannot tell their lines apart; add host and rank.
    const std::string templ = !c.log_line_prefix_template.empty() || a.nnodes == 1
                                  ? c.log_line_prefix_template
                                  : std::string("[${role_name}${local_rank}@${hostname}:${rank}]:");
    const std::string prefix = render_prefix(templ, c.role, lr, a.base_rank + lr, plan.host);
    const bool teed_out = tee & kStdout, teed_err = tee & kStderr;
    StreamPlan so = plan_stream(redirect & kStdout, teed_out, filtered, false,
                                w.dir + "/stdout.log", prefix, teed_out ? dup_out : nullptr, out);
    StreamPlan se = plan_stream(redirect & kStderr, teed_err, filtered, true, w.dir + "/stderr.log",
                                prefix, teed_err ? dup_err : nullptr, err);
    w.request.out = so.mode;
    w.request.err = se.mode;
    w.stdout_route = so.route;
    w.stderr_route = se.route;
    w.stderr_route.keep_tail = true;  // its tail explains a failure without the script's help
    w.stdout_file = so.file;
    w.stderr_file = se.file;
    g.workers.push_back(std::move(w));
  }
  return g;
}

}  // namespace cohort::launch

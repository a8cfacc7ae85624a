#include "observe/node_observer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cmath>

#include "cohort/base/prometheus.h"
#include "cohort/base/version.h"
#include "gpu/gpu_monitor.h"
#include "rdzv/job_rendezvous.h"
#include "workers/proc_file.h"

namespace cohort::launch {
namespace {

struct ProcUsage {
  double cpu_s = 0;
  long long rss_bytes = 0;
};

// User + system CPU and resident memory of one process, from /proc/<pid>/stat (its main
// process only: what it started itself is not counted).
std::optional<ProcUsage> proc_usage(pid_t pid) {
  const std::vector<std::string> f = proc_stat_fields(pid);
  // Element 0 is field 3 (state): utime is field 14, stime 15, rss 24 (proc(5)).
  if (f.size() < 22) return std::nullopt;
  try {
    static const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
    static const long long page = ::sysconf(_SC_PAGESIZE);
    return ProcUsage{(std::stod(f[11]) + std::stod(f[12])) / ticks, std::stoll(f[21]) * page};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

NodeObserver::NodeObserver(asio::io_context& io, LoopClock& clock, NodeObserverOptions options,
                           GpuMonitor* gpu, std::shared_ptr<spdlog::logger> log,
                           std::function<AgentView()> view)
    : clock_(clock),
      options_(std::move(options)),
      gpu_(gpu),
      log_(std::move(log)),
      view_(std::move(view)),
      timer_(clock.make_timer()),
      stragglers_(options_.straggler_factor, options_.straggler_window) {
  if (options_.metrics.enabled()) {
    endpoint_ =
        std::make_unique<MetricsEndpoint>(io, options_.metrics, [this] { return metrics_text(); });
    // A port the kernel chose is known only from this line: it must show at the default level.
    log_->log(options_.metrics.port == 0 ? spdlog::level::warn : spdlog::level::info,
              "serving metrics at {}", endpoint_->url());
  }
  timer_->start(options_.interval, [this] { tick(); });
}

NodeObserver::~NodeObserver() {
  timer_->cancel();
}

void NodeObserver::tick() {
  const AgentView v = view_();
  NodeStatus s = read_status(v);
  const auto now = std::chrono::steady_clock::now();
  if (v.running && v.rdzv && !publishing_ &&
      (!last_publish_ || now - *last_publish_ >= options_.publish_interval)) {
    last_publish_ = now;
    publish(v, s);
  }
  last_ = std::move(s);
  if (options_.on_tick) options_.on_tick();
  timer_->start(options_.interval, [this] { tick(); });
}

NodeStatus NodeObserver::read_status(const AgentView& v) {
  NodeStatus s;
  s.node_rank = v.node_rank;
  s.host = options_.host;
  s.round = v.round;
  s.state = v.phase;
  s.restarts = v.restarts;
  s.max_restarts = v.max_restarts;
  s.nnodes = v.nnodes;
  s.updated = wall_now();
  if (v.node_rank == 0) s.stragglers = current_stragglers_;
  if (v.hang) s.hang = *v.hang;
  if (!v.group) return s;
  const auto now = std::chrono::steady_clock::now();
  for (const WorkerReading& r : v.group->readings()) {
    WorkerStatus w;
    w.rank = v.base_rank + r.local_rank;
    w.local_rank = r.local_rank;
    w.pid = r.pid;
    w.state = r.pid < 0 ? "starting" : r.running ? "running" : r.failed ? "failed" : "exited";
    if (r.last_beat) w.heartbeat_age_s = std::chrono::duration<double>(now - *r.last_beat).count();
    if (r.last_step) {
      w.step = r.last_step->step;
      w.step_s = r.last_step->step_s;
      w.items_per_s = r.last_step->items_per_s;
      if (r.last_step->step_s > 0)
        w.comm_share = std::min(1.0, r.last_step->comm_s / r.last_step->step_s);
    }
    if (r.running) {
      if (auto u = proc_usage(r.pid)) {
        w.cpu_s = u->cpu_s;
        w.rss_bytes = u->rss_bytes;
      }
      if (gpu_) w.gpu = gpu_->condition_of_rank(r.local_rank);
    }
    s.workers.push_back(std::move(w));
  }
  return s;
}

void NodeObserver::publish(const AgentView& v, const NodeStatus& status) {
  publishing_ = true;
  v.rdzv->publish_status(
      v.node_rank, v.nnodes, to_json(status),
      [this, alive = std::weak_ptr<int>(alive_)](std::exception_ptr err,
                                                 std::vector<std::string> records) {
        if (alive.expired()) return;
        publishing_ = false;
        if (err) {  // the store is the rendezvous' business; the next tick tries again
          try {
            std::rethrow_exception(err);
          } catch (const std::exception& e) {
            log_->debug("could not publish this node's status: {}", e.what());
          }
          return;
        }
        std::vector<NodeStatus> nodes;
        for (const auto& r : records) {
          try {
            nodes.push_back(node_status_from_json(r));
          } catch (const std::exception& e) {
            log_->debug("ignoring a node status record: {}", e.what());
          }
        }
        if (!nodes.empty()) judge(nodes);
      });
}

void NodeObserver::judge(const std::vector<NodeStatus>& nodes) {
  std::map<int, double> compute_s;
  std::map<int, std::pair<std::string, std::string>> where;  // rank -> host, GPU condition
  std::map<int, std::pair<double, double>> times;            // rank -> step, comm seconds
  const double stale_after = 5.0 * std::chrono::duration<double>(options_.publish_interval).count();
  const double now = wall_now();
  for (const auto& n : nodes) {
    if (n.round != nodes.front().round || now - n.updated > stale_after) continue;
    for (const auto& w : n.workers) {
      if (w.state != "running" || !w.step_s || !w.comm_share) continue;
      compute_s[w.rank] = *w.step_s * (1 - *w.comm_share);
      where[w.rank] = {n.host, w.gpu};
      times[w.rank] = {*w.step_s, *w.step_s * *w.comm_share};
    }
  }
  const auto found = stragglers_.observe(std::chrono::steady_clock::now(), compute_s);
  current_stragglers_.clear();
  for (const auto& f : found) {
    const auto& [host, gpu] = where[f.rank];
    current_stragglers_.push_back({f.rank, host, f.ratio, gpu});
    if (!f.is_new) continue;
    log_->warn(
        "straggler: rank {} on {} computes {:.1f}x as long per step as the median of the other "
        "ranks ({:.0f} ms of a {:.0f} ms step outside communication) for {:g} s{}",
        f.rank, host, f.ratio, 1e3 * compute_s[f.rank], 1e3 * times[f.rank].first,
        std::chrono::duration<double>(options_.straggler_window).count(),
        gpu.empty() ? std::string() : "; its GPU: " + gpu);
  }
}

std::string NodeObserver::metrics_text() {
  const AgentView v = view_();
  const NodeStatus s = read_status(v);
  prom::Exposition out;
  const std::string node_rank = std::to_string(s.node_rank);
  out.family("cohortrun_info", "gauge", "This node agent: its job, host, node rank and version");
  out.sample("cohortrun_info",
             {{"run_id", options_.run_id},
              {"host", options_.host},
              {"node_rank", node_rank},
              {"version", cohort::version()}},
             1);
  out.family("cohortrun_state", "gauge",
             "The agent's phase (1 for the current one): rendezvous, running, finishing, "
             "stopping, done");
  out.sample("cohortrun_state", {{"state", s.state}}, 1);
  out.family("cohortrun_round", "gauge", "The rendezvous round the workers run in");
  out.sample("cohortrun_round", {}, s.round);
  out.family("cohortrun_nodes", "gauge", "Nodes in the round");
  out.sample("cohortrun_nodes", {}, s.nnodes);
  out.family("cohortrun_restarts", "gauge", "Restarts of the worker groups used so far");
  out.sample("cohortrun_restarts", {}, s.restarts);
  out.family("cohortrun_restarts_max", "gauge", "--max-restarts");
  out.sample("cohortrun_restarts_max", {}, s.max_restarts);

  std::map<std::string, int> by_state{
      {"starting", 0}, {"running", 0}, {"exited", 0}, {"failed", 0}};
  for (const auto& w : s.workers) ++by_state[w.state];
  out.family("cohortrun_workers", "gauge", "This node's workers by state");
  for (const auto& [state, n] : by_state) out.sample("cohortrun_workers", {{"state", state}}, n);

  struct Series {
    const char* name;
    const char* type;
    const char* help;
    std::function<std::optional<double>(const WorkerStatus&)> value;
  };
  const Series series[] = {
      {"cohortrun_worker_heartbeat_age_seconds", "gauge",
       "Seconds since the worker's last heartbeat (libcohort workers and Python workers that "
       "import cohort)",
       [](const WorkerStatus& w) { return w.heartbeat_age_s; }},
      {"cohortrun_worker_cpu_seconds_total", "counter",
       "User and system CPU seconds of the worker's main process",
       [](const WorkerStatus& w) { return w.cpu_s; }},
      {"cohortrun_worker_rss_bytes", "gauge", "Resident memory of the worker's main process",
       [](const WorkerStatus& w) -> std::optional<double> {
         if (!w.rss_bytes) return std::nullopt;
         return static_cast<double>(*w.rss_bytes);
       }},
      {"cohortrun_worker_step", "gauge", "The last training step the worker reported",
       [](const WorkerStatus& w) -> std::optional<double> {
         if (!w.step) return std::nullopt;
         return static_cast<double>(*w.step);
       }},
      {"cohortrun_worker_step_seconds", "gauge", "Mean wall time of the worker's recent steps",
       [](const WorkerStatus& w) { return w.step_s; }},
      {"cohortrun_worker_items_per_second", "gauge",
       "Samples or tokens per second, as the worker counts them",
       [](const WorkerStatus& w) { return w.items_per_s; }},
      {"cohortrun_worker_comm_share", "gauge",
       "Share of the worker's step time spent in communication (waiting included)",
       [](const WorkerStatus& w) { return w.comm_share; }},
  };
  for (const auto& f : series) {
    bool any = false;
    for (const auto& w : s.workers) any = any || f.value(w).has_value();
    if (!any) continue;
    out.family(f.name, f.type, f.help);
    for (const auto& w : s.workers) {
      if (auto x = f.value(w)) {
        const std::string rank = std::to_string(w.rank), local = std::to_string(w.local_rank);
        out.sample(f.name, {{"rank", rank}, {"local_rank", local}}, *x);
      }
    }
  }
  if (s.node_rank == 0) {
    out.family("cohortrun_straggler_ratio", "gauge",
               "Each rank's compute time per step over the median of the other ranks' (node rank "
               "0's agent judges every rank)");
    for (const auto& [rank, ratio] : stragglers_.ratios())
      out.sample("cohortrun_straggler_ratio", {{"rank", std::to_string(rank)}}, ratio);
    out.family("cohortrun_stragglers", "gauge",
               "Ranks named stragglers now (--straggler-factor over --straggler-window)");
    out.sample("cohortrun_stragglers", {}, static_cast<double>(current_stragglers_.size()));
    out.family("cohortrun_straggler", "gauge", "1 for each rank named a straggler now");
    for (const auto& g : current_stragglers_)
      out.sample("cohortrun_straggler", {{"rank", std::to_string(g.rank)}, {"host", g.host}}, 1);
  }
  if (gpu_) out.append(gpu_->metrics_text());
  return out.text();
}

}  // namespace cohort::launch

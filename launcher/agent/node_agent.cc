#include "agent/node_agent.h"

#include "cohort/base/metrics_endpoint.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <asio/post.hpp>
#include <sstream>

#include "cohort/base/logging.h"
#include "cohort/base/printable.h"
#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"
#include "failure/error_file.h"
#include "failure/failure_hints.h"
#include "failure/failure_report.h"
#include "gpu/gpu_preflight.h"
#include "rdzv/elastic_job.h"
#include "rdzv/static_job.h"
#include "workers/descendants.h"
#include "workers/worker_specs.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

// How long a job stopped by a signal or a fatal error waits for its abort to reach the store
// before it exits anyway: cohortrun is gone within the workers' grace plus this.
// How long a node stopped here waits for its abort to reach the store before it leaves.
constexpr auto kAbortGrace = 800ms;

// "python3 (/usr/bin/python3, found on PATH)" or "PYTHON_EXEC=/opt/venv/bin/python".
std::string describe_interpreter(const std::string& interpreter, const EnvMap& env) {
  if (auto it = env.find("PYTHON_EXEC"); it != env.end() && it->second == interpreter)
    return "PYTHON_EXEC=" + interpreter;
  if (interpreter.find('/') != std::string::npos) return interpreter;
  auto path = env.find("PATH");
  if (path != env.end()) {
    std::stringstream ss(path->second);
    for (std::string dir; std::getline(ss, dir, ':');) {
      const std::string candidate = dir + "/" + interpreter;
      if (!dir.empty() && ::access(candidate.c_str(), X_OK) == 0)
        return interpreter + " (" + candidate + ", the first on PATH)";
    }
  }
  return interpreter + " (not found on PATH)";
}

}  // namespace

NodeAgent::NodeAgent(JobPlan plan, EnvMap env, NodeAgentDeps deps)
    : plan_(std::move(plan)),
      env_(std::move(env)),
      deps_(std::move(deps)),
      own_io_(deps_.io ? nullptr : std::make_unique<asio::io_context>()),
      io_(deps_.io ? *deps_.io : *own_io_),
      own_clock_(deps_.clock ? nullptr : make_asio_loop_clock(io_)),
      clock_(deps_.clock ? *deps_.clock : *own_clock_),
      own_spawner_(deps_.spawner ? nullptr : std::make_unique<PosixSpawner>()),
      spawner_(deps_.spawner ? *deps_.spawner : *own_spawner_),
      own_console_(deps_.out && deps_.err ? nullptr : std::make_unique<Console>(io_)),
      out_(deps_.out ? deps_.out : &own_console_->out),
      err_(deps_.err ? deps_.err : &own_console_->err),
      log_(private_logger("cohortrun", console_log_sink(*err_), "warning")),
      error_files_(io_, clock_, kErrorFileReadLimit),
      signals_(io_),
      agent_(AgentOptions{plan_.config.max_restarts, plan_.config.term_timeout,
                          plan_.config.exit_barrier_timeout, kAbortGrace}),
      events_(plan_.config.event_log_handler == "console" ? err_ : nullptr,
              EventContext{plan_.run_id, plan_.config.role, plan_.host,
                           plan_.config.rdzv_backend == RdzvBackend::kStatic ? "static"
                           : plan_.config.rdzv_backend == RdzvBackend::kEtcd ? "etcd"
                                                                             : "c10d",
                           plan_.command.title, plan_.config.max_restarts}),
      stop_timer_(clock_.make_timer()),
      finish_timer_(clock_.make_timer()),
      wait_timer_(clock_.make_timer()),
      join_notices_(clock_, plan_, log_),
      fork_wait_timer_(clock_.make_timer()) {}

NodeAgent::~NodeAgent() {
  probe_.reset();  // joins its thread: nothing is posted to the loop after this
  std::error_code ignored;
  signals_.cancel(ignored);
  hang_watch_.reset();
  group_.reset();
  rdzv_.reset();
  // The workers are gone: nobody needs the token file any more.
  if (!plan_.store_token_file.empty()) ::unlink(plan_.store_token_file.c_str());
}

std::unique_ptr<JobRendezvous> NodeAgent::make_rendezvous() {
  const LaunchConfig& c = plan_.config;
  StoreSecurity security{c.auth_token, c.allow_unauthenticated_from};
  if (c.rdzv_backend == RdzvBackend::kStatic) {
    StaticJobSettings s;
    s.nnodes = c.max_nodes;
    s.node_rank = c.node_rank;
    s.master_addr = c.master_addr;
    s.master_port = c.master_port;
    bool port_given = c.master_port_given;
    if (!c.rdzv_endpoint.empty()) {
      // torchrun: a static job's --rdzv-endpoint is node 0's store (get_rdzv_endpoint).
      HostPort ep = parse_host_port(c.rdzv_endpoint, c.master_port);
      s.master_addr = ep.host;
      s.master_port = ep.port;
      port_given = true;
    }
    // One node and no port asked for: a free one, so that jobs on one machine never collide.
    if (s.nnodes == 1 && (!port_given || c.standalone)) s.master_port = 0;
    s.timeout = c.rdzv_timeout;
    s.security = security;
    s.store_override = deps_.store;
    return std::make_unique<StaticJob>(io_, clock_, plan_.run_id, std::move(s), log_);
  }
  ElasticJobSettings e;
  e.store = c.rdzv_backend == RdzvBackend::kEtcd ? ElasticStore::kEtcd : ElasticStore::kCohort;
  e.min_nodes = c.min_nodes;
  e.max_nodes = c.max_nodes;
  e.endpoint = c.rdzv_endpoint;
  e.local_addr = c.local_addr;
  e.conf = plan_.rdzv_conf;
  e.store_loss_grace = c.store_loss_grace;
  e.security = security;
  e.store_override = deps_.store;
  e.advertised_override = deps_.advertised_address;
  return std::make_unique<ElasticJob>(io_, clock_, plan_.run_id, std::move(e), log_);
}

void NodeAgent::start() {
  for (const auto& n : plan_.notes) log_->warn("{}", n);
  if (deps_.real_process) {
    ::signal(SIGPIPE, SIG_IGN);  // a console or peer that went away is an error code, not death
    reaper_ = std::make_unique<Reaper>();  // before any thread exists
    start_worker_cgroup();
    const bool subreaper = become_child_subreaper();
    if (!subreaper)
      log_->info("cannot become the child subreaper; escaped descendants are left to the reaper");
    if (!plan_.fork_server_file.empty() && !subreaper) {
      log_->warn(
          "restarted workers are not forked from fork servers: a forked worker becomes "
          "cohortrun's child only when cohortrun is the child subreaper");
    } else if (!plan_.fork_server_file.empty()) {
      ForkServersOptions o;
      o.server_file = plan_.fork_server_file;
      o.log_dir = plan_.log_root;
      forks_ = std::make_unique<ForkServers>(
          io_, spawner_, std::move(o), log_, [this](pid_t pid) { reaper_->watch(pid); },
          [this](pid_t pid) { reaper_->forget(pid); });
    }
    if (plan_.config.sweep_orphans) {
      if (int n = sweep_orphans(); n > 0)
        log_->warn("killed {} process(es) left behind by earlier cohortrun agents", n);
    }
    for (int sig : plan_.stop_signals) signals_.add(sig);
    // Notices (Slurm's preemption warning, a checkpoint request) are forwarded, never fatal.
    for (int sig : {SIGUSR1, SIGUSR2}) {
      std::error_code ec;
      signals_.add(sig, ec);
    }
    signals_.add(SIGCHLD);  // strays handed over to the subreaper must be reaped
    wait_for_signals();
    // After the sweep: what earlier agents left on the GPUs is gone before the pre-flight.
    gpu_ = std::make_unique<GpuMonitor>(
        GpuMonitorOptions::from_env(env_, plan_.config.nproc_per_node, plan_.nproc,
                                    plan_.config.gpu_preflight),
        log_);
    gpu_->start();
    if (plan_.config.gpu_preflight) run_gpu_preflight(*gpu_, plan_.host, *log_);
  }
  if (deps_.real_process && !plan_.command.interpreter.empty()) start_interpreter_probe();
  start_file_timer();
  rdzv_ = make_rendezvous();
  start_hang_watch();
  if (deps_.real_process) start_observer();
  handle(agent_.start());
}

void NodeAgent::start_interpreter_probe() {
  std::vector<std::string> env;
  for (const auto& [k, v] : env_) env.push_back(k + "=" + v);
  probe_ = std::make_unique<InterpreterProbe>(
      plan_.command.interpreter, std::move(env),
      [this](const std::optional<InterpreterInfo>& info) {
        asio::post(io_, [this, info] {
          if (!info || done()) return;
          log_->info("the workers run {}: {}", info->executable, describe_python(*info));
        });
      });
}

void NodeAgent::start_worker_cgroup() {
  std::string why;
  if (auto off = env_.find("COHORT_WORKER_CGROUP"); off != env_.end() && off->second == "off") {
    why = "COHORT_WORKER_CGROUP=off";
  } else {
    std::string name = agent_id();
    std::replace(name.begin(), name.end(), ':', '-');
    cgroup_ = WorkerCgroup::create(name, &why);
  }
  if (cgroup_) {
    if (reaper_) reaper_->watch_cgroup(cgroup_->path());
    log_->info("the workers run in the cgroup {}: whatever they start ends with them",
               cgroup_->path());
  } else {
    log_->info(
        "no cgroup for the workers ({}): a descendant that leaves its process group and clears "
        "its environment could outlive a SIGKILL of cohortrun",
        why);
  }
}

void NodeAgent::clear_leftovers() {
  int n = cgroup_ ? cgroup_->kill_and_wait(1000ms) : 0;
  n += kill_stray_children(keep_pids(), 1000ms);
  if (n > 0) log_->warn("killed {} process(es) the last group's workers left behind", n);
}

void NodeAgent::start_observer() {
  NodeObserverOptions o;
  o.run_id = plan_.run_id;
  o.host = plan_.host;
  // Loopback unless told otherwise (--metrics-addr 0.0.0.0:PORT): the metrics name hosts, pids and
  // GPUs, and nothing on the network needs them by default.
  o.metrics = metrics_address(plan_.config.metrics_addr, plan_.config.metrics_port, "127.0.0.1");
  o.straggler_factor = plan_.config.straggler_factor;
  o.straggler_window = plan_.config.straggler_window;
  if (plan_.config.rdzv_backend == RdzvBackend::kEtcd) o.publish_interval = 5000ms;
  o.on_tick = [this] {
    if (hang_watch_) hang_watch_->poll();
  };
  observer_ = std::make_unique<NodeObserver>(io_, clock_, std::move(o), gpu_.get(), log_,
                                             [this] { return observed(); });
}

void NodeAgent::start_hang_watch() {
  HangWatchOptions o;
  o.stop_after = plan_.config.worker_hang_timeout;
  o.report_after = plan_.config.hang_report_after;
  HangWatch::Events ev;
  ev.hung = [this](WorkerFailure f) { handle(agent_.on_group_hung(std::move(f))); };
  ev.hung_without_stack = [this](int lr, std::string reason, std::vector<std::string> waiting) {
    if (group_) group_->report_hung_with_stack(lr, std::move(reason), std::move(waiting));
  };
  ev.gpu_note = [this](int lr) { return gpu_ ? gpu_->failure_note(lr) : std::string(); };
  hang_watch_ = std::make_unique<HangWatch>(clock_, o, log_, std::move(ev));
}

AgentView NodeAgent::observed() const {
  AgentView v;
  v.phase = phase_name(agent_.phase());
  v.running = agent_.phase() == Agent::Phase::kRunning && group_ != nullptr;
  v.round = assignment_.round;
  v.restarts = agent_.restart_count();
  v.max_restarts = plan_.config.max_restarts;
  v.node_rank = assignment_.node_rank;
  v.nnodes = assignment_.nnodes;
  v.base_rank = assignment_.base_rank;
  v.group = group_.get();
  v.rdzv = rdzv_.get();
  if (hang_watch_ && hang_watch_->last_status()) v.hang = &*hang_watch_->last_status();
  return v;
}

void NodeAgent::start_file_timer() {
  const std::string path = file_timer_path(env_);
  if (path.empty()) return;
  try {
    file_timer_ = std::make_unique<FileTimerServer>(
        io_, path, log_, [this](pid_t pid, const std::string& scope, int sig) {
          if (group_ && group_->signal_for_expired_timer(pid, scope, sig)) {
            log_->warn("file timer '{}' of pid {} expired: sent it {}", scope, pid,
                       signal_name(sig));
          } else {
            log_->warn(
                "file timer '{}' of pid {} expired, but that is no worker of this node: "
                "left alone",
                scope, pid);
          }
        });
  } catch (const IoError& e) {
    throw UsageError(std::string(e.what()) +
                     "; set TORCHELASTIC_TIMER_FILE to a path in a writable folder, or unset " +
                     worker_env::kEnableFileTimer);
  }
  env_["TORCHELASTIC_TIMER_FILE"] = path;  // the workers' FileTimerClient writes there
  log_->info("file timer: workers' timers are read from {}", path);
}

int NodeAgent::run() {
  start();
  while (!done() && io_.run_one() > 0) {
  }
  return exit_code_;
}

void NodeAgent::wait_for_signals() {
  signals_.async_wait([this](std::error_code ec, int sig) {
    if (ec || done()) return;
    on_signal(sig);
    wait_for_signals();
  });
}

void NodeAgent::signal(int sig) {
  asio::post(io_, [this, sig] {
    if (!done()) on_signal(sig);
  });
}

void NodeAgent::on_signal(int sig) {
  if (sig == SIGCHLD) {
    reap_stray_zombies(keep_pids());
    return;
  }
  // SIGUSR1/SIGUSR2 are notices (Slurm's preemption warning, a checkpoint request), passed on
  // even when --signals-to-handle names them.
  const bool stops = sig != SIGUSR1 && sig != SIGUSR2 &&
                     std::find(plan_.stop_signals.begin(), plan_.stop_signals.end(), sig) !=
                         plan_.stop_signals.end();
  if (!stops) {
    log_->warn("received {}: forwarding it to the workers", signal_name(sig));
    if (group_) group_->signal(sig);
    return;
  }
  if (agent_.ending()) {
    // The job is over and only the summary, the exit barrier or the abort's grace remain.
    log_->warn("received {} while finishing: exiting", signal_name(sig));
    handle(agent_.on_signal(sig));
    return;
  }
  log_->warn("received {}: stopping the workers", signal_name(sig));
  handle(agent_.on_signal(sig));
}

std::set<pid_t> NodeAgent::keep_pids() const {
  std::set<pid_t> keep;
  if (group_)
    for (pid_t p : group_->running_pids()) keep.insert(p);
  if (reaper_ && reaper_->pid() > 0) keep.insert(reaper_->pid());
  if (probe_ && probe_->pid() > 0) keep.insert(probe_->pid());
  for (pid_t p : error_files_.children()) keep.insert(p);
  if (rdzv_ && rdzv_->store_process() > 0) keep.insert(rdzv_->store_process());
  if (forks_)
    for (pid_t p : forks_->pids()) keep.insert(p);
  return keep;
}

std::function<void(std::exception_ptr)> NodeAgent::fatal_on_error(std::string what) {
  return [this, what](std::exception_ptr err) {
    if (err && !done()) handle(agent_.on_fatal(what + " failed: " + describe(err)));
  };
}

void NodeAgent::handle(std::vector<Action> actions) {
  for (auto& a : actions) {
    // An action's own events (a worker that could not be prepared) may have ended the node
    // already: the rest of this batch has nothing left to act on.
    if (torn_down()) return;
    std::visit(
        [&](auto& act) {
          using T = std::decay_t<decltype(act)>;
          if constexpr (std::is_same_v<T, action::Rendezvous>) {
            rendezvous(act.after_round);
          } else if constexpr (std::is_same_v<T, action::StartWorkers>) {
            start_workers(act.assignment, act.previous);
          } else if constexpr (std::is_same_v<T, action::StopWorkers>) {
            if (hang_watch_) hang_watch_->stop();  // nothing more to judge this round
            stop_workers(act.signal, act.grace);
          } else if constexpr (std::is_same_v<T, action::KillWorkers>) {
            kill_workers();
          } else if constexpr (std::is_same_v<T, action::PublishFailure>) {
            rdzv_->stop_keep_alive();
            rdzv_->publish_failure(act.round, assignment_.node_rank, act.restart_count,
                                   act.failures, fatal_on_error("publishing the failure"));
          } else if constexpr (std::is_same_v<T, action::PublishSuccess>) {
            rdzv_->publish_success(act.round, assignment_.node_rank, assignment_.nnodes,
                                   fatal_on_error("publishing success"));
            bound_the_others(act.round);
          } else if constexpr (std::is_same_v<T, action::PublishAbort>) {
            rdzv_->stop_keep_alive();
            rdzv_->publish_abort(act.round, assignment_.node_rank, act.detail,
                                 [this](std::exception_ptr) {
                                   if (!done()) handle(agent_.on_abort_published());
                                 });
          } else if constexpr (std::is_same_v<T, action::Finish>) {
            finish(act);
          } else if constexpr (std::is_same_v<T, action::CollectFailures>) {
            rdzv_->collect_failures(act.round, assignment_.nnodes,
                                    [this](std::exception_ptr err, std::vector<WorkerFailure> all) {
                                      if (done()) return;
                                      std::optional<std::vector<WorkerFailure>> collected;
                                      if (!err) collected = std::move(all);
                                      handle(agent_.on_failures_collected(std::move(collected)));
                                    });
          } else if constexpr (std::is_same_v<T, action::Report>) {
            report(act.finish, std::move(act.failures));
          } else if constexpr (std::is_same_v<T, action::ExitBarrier>) {
            // The agent hosting the store keeps it up until every node has read the outcome.
            finish_timer_->start(act.deadline, [this] { handle(agent_.on_finish_deadline()); });
            rdzv_->exit_barrier(act.round, assignment_.nnodes, plan_.config.exit_barrier_timeout,
                                [this](std::exception_ptr) {
                                  if (!done()) handle(agent_.on_exit_barrier_done());
                                });
          } else if constexpr (std::is_same_v<T, action::AwaitAbort>) {
            finish_timer_->start(act.grace, [this] { handle(agent_.on_finish_deadline()); });
          } else if constexpr (std::is_same_v<T, action::ShutDown>) {
            shut_down();
          }
        },
        a);
  }
}

void NodeAgent::rendezvous(int after_round) {
  rdzv_->stop_keep_alive();
  if (after_round >= 0) log_->warn("re-forming the worker group after round {}", after_round);
  NodeInfo self;
  self.node_rank = plan_.config.node_rank;
  self.nproc = plan_.nproc;
  self.host = plan_.host;
  self.pid = static_cast<int>(::getpid());
  // What every node of the job must agree on; the rendezvous refuses a mismatch.
  const LaunchConfig& c = plan_.config;
  auto secs = [](std::chrono::milliseconds d) { return std::to_string(d.count() / 1000.0); };
  self.settings = {
      {"--max-restarts", std::to_string(c.max_restarts)},
      {"--nnodes", std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes)},
      {"--worker-hang-timeout", secs(c.worker_hang_timeout)},
      {"--timeout", c.collective_timeout.empty() ? "default" : c.collective_timeout},
      {"--wait-after-first-exit", secs(wait_after_first_exit())},
      {"--role", c.role},
      {"the entry point", plan_.command.title},
  };
  join_notices_.start(*rdzv_);
  rdzv_->join(after_round, self, [this](std::exception_ptr err, RankAssignment a) {
    join_notices_.stop();
    if (done()) return;
    if (err) {
      handle(agent_.on_fatal(describe(err)));
      return;
    }
    if (forks_ && forks_->any_starting()) {
      // A fork server still importing is ready sooner than a new interpreter would import torch
      // (it started with the first round): the round's workers wait for it, within a bound.
      log_->info("round {}: waiting for the fork servers to finish importing (at most {} s)",
                 a.round, kForkServerWait.count() / 1000);
      fork_wait_timer_->start(kForkServerWait, [this] {
        if (forks_) forks_->abandon_starting(kForkServerWait);
      });
      forks_->when_settled([this, a] {
        fork_wait_timer_->cancel();
        if (!done() && !torn_down()) joined(a);
      });
      return;
    }
    joined(a);
  });
}

void NodeAgent::joined(const RankAssignment& a) {
  rdzv_->watch_outcome(
      a.round,
      [this, round = a.round](Outcome o) {
        if (o.kind != Outcome::kSucceeded && o.node_rank != assignment_.node_rank) {
          log_->warn("round {} ended on node {}: {}", round, o.node_rank,
                     o.detail.empty() ? "failed" : printable(o.detail, false));
        }
        handle(agent_.on_outcome(round, o));
      },
      [this](std::string e) {
        if (!done()) handle(agent_.on_fatal(e));
      });
  if (!relays_workers()) {
    handle(agent_.on_rendezvous_done(a));
    return;
  }
  // The round's workers will dial this node's relay (docs/RELAY.md), made before they start.
  rdzv_->open_relay(a, [this, a](std::optional<HostPort> relay, std::string why_not) {
    if (done() || torn_down()) return;
    const HostPort store = rdzv_->worker_store(a);
    if (relay) {
      log_->info(
          "store relay: the workers reach round {}'s store at {} through this node's "
          "relay at {}",
          a.round, store.to_string(), relay->to_string());
    } else if (!relay_refusal_said_) {
      relay_refusal_said_ = true;
      log_->warn("store relay off: {}; the workers dial the store at {} themselves", why_not,
                 store.to_string());
    }
    handle(agent_.on_rendezvous_done(a));
  });
}

bool NodeAgent::relays_workers() const {
  const LaunchConfig& c = plan_.config;
  // auto: where the store's connections start to matter. Smaller jobs keep MASTER_ADDR the
  // store's own address, exactly as under torchrun.
  return c.store_relay == StoreRelay::kOn ||
         (c.store_relay == StoreRelay::kAuto &&
          static_cast<int64_t>(c.max_nodes) * plan_.nproc >= kAutoRelayRanks);
}

void NodeAgent::start_workers(const RankAssignment& a, const std::optional<Outcome>& previous) {
  assignment_ = a;
  if (hang_watch_) hang_watch_->stop();
  group_.reset();
  if (observer_) observer_->new_round();
  if (deps_.real_process) clear_leftovers();
  if (a.restart_count > 0 || a.round > 0) {
    log_->warn(
        "starting the worker group: round {}, restart {} of at most {}, {} node(s), world "
        "size {}",
        a.round, a.restart_count, plan_.config.max_restarts, a.nnodes, a.world_size);
  }
  log_->info("starting {} workers (round {}, restart {}): ranks {}..{} of {}, {} node(s)",
             a.local_world_size, a.round, a.restart_count, a.base_rank,
             a.base_rank + a.local_world_size - 1, a.world_size, a.nnodes);
  GroupSpec spec;
  try {
    spec =
        make_group_spec(plan_, env_, a, rdzv_->relay_of(a.round).value_or(rdzv_->worker_store(a)),
                        agent_id(), previous, *out_, *err_);
  } catch (const std::exception& e) {
    handle(agent_.on_fatal(std::string("cannot prepare the workers: ") + e.what()));
    return;
  }
  if (cgroup_)
    for (auto& w : spec.workers) w.request.cgroup_procs_fd = cgroup_->procs_fd();
  if (gpu_) gpu_->workers_started();
  WorkerGroupEvents events;
  events.exited = [this](int lr, std::optional<WorkerFailure> f) {
    if (f && gpu_) f->gpu = gpu_->failure_note(lr);
    events_.worker(f ? "FAILED" : "SUCCEEDED", assignment_.node_rank, assignment_.nnodes, lr,
                   assignment_.base_rank + lr, assignment_.world_size,
                   static_cast<size_t>(lr) < worker_pids_.size() ? worker_pids_[lr] : 0,
                   f ? std::optional<int>(f->exit_code) : std::optional<int>(0),
                   assignment_.restart_count, f ? f->message : std::string());
    if (f) {
      if (agent_.phase() == Agent::Phase::kRunning) {
        log_->warn("local rank {} (rank {}, pid {}) {}", lr, f->global_rank, f->pid, f->reason);
      } else {
        log_->info("local rank {} (pid {}) stopped: {}", lr, f->pid, f->reason);
      }
    }
    handle(agent_.on_worker_exited(lr, std::move(f)));
  };
  events.hung = [this](int lr, WorkerFailure f) {
    if (gpu_) f.gpu = gpu_->failure_note(lr);
    log_->warn("local rank {} (pid {}) is {}", lr, f.pid, f.reason);
    handle(agent_.on_worker_hung(lr, std::move(f)));
  };
  events.wedged = [this](int lr, WorkerFailure f) {
    log_->error("local rank {} (pid {}) is {}", lr, f.pid, f.reason);
    handle(agent_.on_worker_wedged(lr, std::move(f)));
  };
  events.silent = [this](int) {
    if (hang_watch_) hang_watch_->suspect();
  };
  if (reaper_) {
    events.started = [this](pid_t pid) { reaper_->watch(pid); };
    events.reaped = [this](pid_t pid) {
      reaper_->forget(pid);
      if (file_timer_) file_timer_->forget(pid);
    };
  }
  group_ = std::make_unique<WorkerGroup>(io_, clock_, spawner_, error_files_, std::move(spec),
                                         std::move(events), forks_.get());
  rdzv_->start_keep_alive(a, [this](std::string why) {
    if (!done()) handle(agent_.on_fatal(why));
  });
  group_->start();
  // The first round's workers start as always; the fork servers import beside them, for the
  // restarts (those already running are kept).
  if (forks_) forks_->start(group_->spec());
  // When the job healed, for `cohortctl status`; a store that cannot take it says so elsewhere.
  rdzv_->publish_running(a.round, a.node_rank, wall_clock_now(), [](std::exception_ptr) {});
  if (hang_watch_) hang_watch_->start_round(a, plan_.host, group_.get(), rdzv_.get());
  worker_pids_ = group_->running_pids();
  int lr = 0;
  for (pid_t pid : worker_pids_) {
    events_.worker("START", a.node_rank, a.nnodes, lr, a.base_rank + lr, a.world_size, pid,
                   std::nullopt, a.restart_count);
    ++lr;
  }
}

std::chrono::milliseconds NodeAgent::wait_after_first_exit() const {
  return plan_.config.wait_after_first_exit.value_or(plan_.config.exit_barrier_timeout);
}

void NodeAgent::bound_the_others(int round) {
  const auto bound = wait_after_first_exit();
  if (assignment_.nnodes < 2 || bound.count() == 0) return;
  // srun -W: the others get `bound` to finish too; then the job is stopped everywhere.
  wait_timer_->start(bound, [this, round, bound] {
    if (agent_.phase() != Agent::Phase::kAwaitingOutcome || agent_.round() != round) return;
    const std::string detail = "other nodes still ran " +
                               std::to_string(bound.count() / 1000.0).substr(0, 4) +
                               " s after node " + std::to_string(assignment_.node_rank) +
                               "'s workers had all finished (--wait-after-first-exit)";
    log_->warn("{}: stopping the job", detail);
    rdzv_->publish_abort(round, assignment_.node_rank, detail, [](std::exception_ptr) {});
  });
}

void NodeAgent::stop_workers(int sig, std::chrono::milliseconds grace) {
  if (group_) group_->signal(sig);
  stop_timer_->start(grace, [this] { handle(agent_.on_stop_deadline()); });
}

void NodeAgent::kill_workers() {
  if (!group_) return;
  group_->signal(SIGKILL);
  stop_timer_->start(kUnkillableGrace, [this] {
    if (group_ && group_->any_running()) {
      std::string pids;
      for (pid_t p : group_->running_pids()) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      log_->error(
          "worker process {} still there {} s after SIGKILL (stuck in the kernel, "
          "uninterruptible): "
          "leaving it behind",
          pids, kUnkillableGrace.count() / 1000);
    }
    handle(agent_.on_kill_deadline());
  });
}

void NodeAgent::finish(const action::Finish& f) {
  exit_code_ = f.exit_code;
  stop_timer_->cancel();
  wait_timer_->cancel();
  fork_wait_timer_->cancel();
  forks_.reset();  // no more rounds
  rdzv_->stop_keep_alive();
  if (!f.failed) {
    log_->info("all {} workers of node {} succeeded", assignment_.local_world_size,
               assignment_.node_rank);
  }
  events_.agent(f.failed ? "FAILED" : "SUCCEEDED", assignment_.node_rank, assignment_.nnodes,
                agent_.restart_count(), f.reason);
}

void NodeAgent::report(const action::Finish& f, std::vector<WorkerFailure> failures) {
  if (failures.empty()) {
    std::string why = !f.reason.empty()                         ? f.reason
                      : f.outcome && !f.outcome->detail.empty() ? f.outcome->detail
                                                                : std::string();
    err_->write_blocking(
        printable("cohortrun: the job was stopped" + (why.empty() ? "" : ": " + why)) + "\n", 2s);
    return;
  }
  std::string text = format_failure_report(plan_.command.title, failures, assignment_.world_size);
  // Which Python ran the workers, and what its PyTorch is: a missing module, or a PyTorch of
  // another version than the script needs, is most often the wrong interpreter.
  HintContext hints;
  if (!plan_.command.interpreter.empty()) {
    hints.interpreter = describe_interpreter(plan_.command.interpreter, env_);
    if (auto info = probe_ ? probe_->wait(1000ms) : std::nullopt)
      hints.interpreter += ": " + describe_python(*info);
  }
  for (const std::string& line : failure_hints(failures, hints)) text += line;
  // Error files, stderr tails and records from the store are others' text: a terminal must not
  // act on an escape sequence in them.
  err_->write_blocking(printable(text), 2s);
  auto parent = env_.find(worker_env::kErrorFile);
  if (parent != env_.end() && !parent->second.empty()) {
    auto first =
        *std::min_element(failures.begin(), failures.end(),
                          [](const auto& a, const auto& b) { return a.timestamp < b.timestamp; });
    // The root cause's own file when it failed here, as read then (never again on the loop);
    // the failures from the store do not carry it.
    std::optional<ErrorFileContent> child;
    for (const WorkerFailure& mine : f.local_failures) {
      if (mine.pid == first.pid && mine.global_rank == first.global_rank &&
          !mine.error_file_text.empty())
        child = parse_error_file(mine.error_file_text);
    }
    write_parent_error_file(parent->second, child, first.message, first.exit_code);
  }
}

void NodeAgent::shut_down() {
  stop_timer_->cancel();
  finish_timer_->cancel();
  wait_timer_->cancel();
  join_notices_.stop();
  fork_wait_timer_->cancel();
  std::error_code ignored;
  signals_.cancel(ignored);
  observer_.reset();  // before what it reads
  hang_watch_.reset();
  group_.reset();
  forks_.reset();
  if (deps_.real_process) {
    if (cgroup_) cgroup_->kill_and_wait(1000ms);
    kill_stray_children(keep_pids(), 1000ms);
  }
  rdzv_.reset();  // interrupts a store call still blocked, joins the store threads
  // What the console has not taken yet, within a bound: a console nobody reads cannot hold
  // cohortrun back.
  out_->write_blocking("", 500ms);
  err_->write_blocking("", 500ms);
}

}  // namespace cohort::launch

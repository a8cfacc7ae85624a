#include "cohort/launch/launcher.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <filesystem>
#include <sstream>

#include "agent.h"
#include "cohort/base/logging.h"
#include "cohort/base/net.h"
#include "cohort/base/random.h"
#include "cohort/error.h"
#include "cohort/launch/cli.h"
#include "entrypoint.h"
#include "error_file.h"
#include "failure_report.h"
#include "job_rendezvous.h"
#include "node_resources.h"
#include "output.h"
#include "process_spawner.h"
#include "reaper.h"
#include "slurm_mode.h"
#include "worker_env.h"

namespace cohort::launch {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace {

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int open_log(const std::string& path) {
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
}

}  // namespace

class Launcher::Impl {
 public:
  Impl(LaunchConfig config, std::map<std::string, std::string> env)
      : cfg_(std::move(config)),
        env_(std::move(env)),
        log_(component_logger("cohortrun", "warning")),
        agent_(AgentOptions{cfg_.max_restarts, cfg_.term_timeout}),
        signals_(io_),
        stop_timer_(io_),
        drain_timer_(io_),
        spawner_(std::make_unique<PosixSpawner>()) {}

  int run();

 private:
  struct Worker {
    explicit Worker(asio::io_context& io)
        : pidfd(io), heartbeat(io), hang_timer(io), eof_timer(io) {}
    int local_rank = 0;
    pid_t pid = -1;
    asio::posix::stream_descriptor pidfd;
    asio::posix::stream_descriptor heartbeat;
    asio::steady_timer hang_timer;
    asio::steady_timer eof_timer;
    char beat_buf[64];
    bool running = false;
    bool reported = false;
    int wait_status = 0;
    double exit_time = 0;
    int open_streams = 0;  // pumps not yet at EOF
    TailBuffer stderr_tail;
    std::string dir;
    std::string error_file;
  };

  // Set-up; returns an exit status when the job cannot start.
  std::optional<int> prepare();
  void handle(std::vector<Action> actions);
  void do_rendezvous(int after_round);
  void start_workers(const RankAssignment& a);
  void spawn_worker(Worker& w, const RankAssignment& a);
  void on_worker_exit(Worker& w);
  void report_exit(Worker& w);
  void read_heartbeat(Worker& w);
  void signal_workers(int sig);
  void finish(const action::Finish& f);
  void print_summary(const action::Finish& f, std::vector<WorkerFailure> failures);
  void shut_down(int code);
  void fatal(const std::string& message);
  void arm_signals();
  void wait_for_signal();
  std::function<void(std::exception_ptr)> fail_on_error(const std::string& what);

  LaunchConfig cfg_;
  std::map<std::string, std::string> env_;
  std::shared_ptr<spdlog::logger> log_;
  asio::io_context io_;
  Agent agent_;
  asio::signal_set signals_;
  asio::steady_timer stop_timer_;
  asio::steady_timer drain_timer_;
  std::unique_ptr<ProcessSpawner> spawner_;
  std::unique_ptr<Reaper> reaper_;
  std::unique_ptr<JobRendezvous> rdzv_;

  WorkerCommand command_;
  int nproc_ = 1;
  std::string run_id_;
  std::string master_addr_;  // of the current round's workers' store
  int master_port_ = 0;
  std::string host_;
  std::string log_root_;
  std::optional<int> omp_threads_;
  std::vector<std::unique_ptr<Worker>> workers_;
  RankAssignment assignment_;
  int exit_code_ = 0;
  bool fatal_ = false;
  bool finished_ = false;
};

std::optional<int> Launcher::Impl::prepare() {
  if (cfg_.slurm) {
    std::vector<std::string> notes;
    if (std::string err = apply_slurm(&cfg_, env_, &notes); !err.empty()) {
      std::fprintf(stderr, "cohortrun: %s\n", err.c_str());
      return 2;
    }
    for (const auto& n : notes) log_->info("{}", n);
  }
  try {
    nproc_ = resolve_nproc_per_node(cfg_.nproc_per_node, env_);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 2;
  }
  if (std::string err = validate(cfg_); !err.empty()) {
    std::fprintf(stderr, "cohortrun: %s\n", err.c_str());
    return 2;
  }
  host_ = hostname();
  command_ = build_worker_command(cfg_, env_);
  run_id_ = cfg_.rdzv_id;
  if (cfg_.standalone) run_id_ = random_tag(8);
  if (cfg_.standalone) cfg_.master_addr = "127.0.0.1";

  // Logs: <log_dir>/<run_id>_<random>/attempt_<n>/<local_rank>/
  try {
    std::string base = cfg_.log_dir;
    if (base.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/cohortrun_XXXXXX";
      std::vector<char> buf(templ.begin(), templ.end());
      buf.push_back('\0');
      if (::mkdtemp(buf.data()) == nullptr)
        throw std::runtime_error(templ + ": " + std::strerror(errno));
      base = buf.data();
    }
    log_root_ = base + "/" + run_id_ + "_" + random_tag(8);
    fs::create_directories(log_root_);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: cannot create the log directory: %s\n", e.what());
    return 1;
  }

  // torchrun sets a blanket OMP_NUM_THREADS=1; sharing the cores out wastes none of them.
  if (!env_.contains("OMP_NUM_THREADS") && nproc_ > 1) {
    omp_threads_ = std::max(1, cpu_count() / nproc_);
    log_->warn(
        "Setting OMP_NUM_THREADS={} for each of the {} workers ({} cores / {} workers); set "
        "OMP_NUM_THREADS to choose otherwise.",
        *omp_threads_, nproc_, cpu_count(), nproc_);
  }
  return std::nullopt;
}

int Launcher::Impl::run() {
  if (auto code = prepare()) return *code;
  reaper_ = std::make_unique<Reaper>();  // before any thread exists
  if (cfg_.sweep_orphans) {
    if (int n = sweep_orphans(); n > 0)
      log_->warn("killed {} process(es) left behind by earlier cohortrun agents", n);
  }
  try {
    rdzv_ = std::make_unique<JobRendezvous>(io_, cfg_, run_id_, log_);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cohortrun: %s\n", e.what());
    return 1;
  }
  arm_signals();
  handle(agent_.start());
  io_.run();
  rdzv_.reset();
  return exit_code_;
}

void Launcher::Impl::arm_signals() {
  std::stringstream ss(cfg_.signals_to_handle);
  std::string name;
  while (std::getline(ss, name, ',')) {
    int sig = signal_number(name);
    if (sig <= 0 || sig == SIGKILL || sig == SIGSTOP) {
      log_->warn("--signals-to-handle: ignoring '{}'", name);
      continue;
    }
    std::error_code ec;
    signals_.add(sig, ec);
  }
  wait_for_signal();
}

void Launcher::Impl::wait_for_signal() {
  signals_.async_wait([this](std::error_code ec, int sig) {
    if (ec || finished_) return;
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      // A notice (Slurm's preemption warning, a checkpoint request): pass it on, keep running.
      log_->warn("received {}: forwarding it to the workers", signal_name(sig));
      signal_workers(sig);
    } else {
      log_->warn("received {}: stopping the workers", signal_name(sig));
      handle(agent_.on_signal(sig));
    }
    wait_for_signal();
  });
}

void Launcher::Impl::handle(std::vector<Action> actions) {
  for (auto& a : actions) {
    std::visit(
        [&](auto& act) {
          using T = std::decay_t<decltype(act)>;
          if constexpr (std::is_same_v<T, action::Rendezvous>) {
            do_rendezvous(act.after_round);
          } else if constexpr (std::is_same_v<T, action::StartWorkers>) {
            start_workers(act.assignment);
          } else if constexpr (std::is_same_v<T, action::StopWorkers>) {
            signal_workers(act.signal);
            stop_timer_.expires_after(act.grace);
            stop_timer_.async_wait([this](std::error_code ec) {
              if (!ec) handle(agent_.on_stop_deadline());
            });
          } else if constexpr (std::is_same_v<T, action::KillWorkers>) {
            signal_workers(SIGKILL);
          } else if constexpr (std::is_same_v<T, action::PublishFailure>) {
            rdzv_->stop_keep_alive();
            rdzv_->publish_failure(act.round, assignment_.node_rank, act.restart_count,
                                   act.failures, fail_on_error("publishing the failure"));
          } else if constexpr (std::is_same_v<T, action::PublishSuccess>) {
            rdzv_->publish_success(act.round, assignment_.node_rank, assignment_.nnodes,
                                   fail_on_error("publishing success"));
          } else if constexpr (std::is_same_v<T, action::PublishAbort>) {
            rdzv_->stop_keep_alive();
            rdzv_->publish_abort(act.round, assignment_.node_rank, act.detail,
                                 [](std::exception_ptr) {});
          } else if constexpr (std::is_same_v<T, action::Finish>) {
            finish(act);
          }
        },
        a);
  }
}

std::function<void(std::exception_ptr)> Launcher::Impl::fail_on_error(const std::string& what) {
  return [this, what](std::exception_ptr err) {
    if (!err) return;
    try {
      std::rethrow_exception(err);
    } catch (const std::exception& e) {
      fatal(what + " failed: " + e.what());
    }
  };
}

void Launcher::Impl::do_rendezvous(int after_round) {
  rdzv_->stop_keep_alive();
  if (after_round >= 0) log_->warn("re-forming the worker group after round {}", after_round);
  NodeInfo self;
  self.node_rank = cfg_.node_rank;
  self.nproc = nproc_;
  self.host = host_;
  self.pid = static_cast<int>(::getpid());
  rdzv_->join(after_round, self, [this](std::exception_ptr err, RankAssignment a) {
    if (err) {
      try {
        std::rethrow_exception(err);
      } catch (const std::exception& e) {
        fatal(e.what());
      }
      return;
    }
    rdzv_->watch_outcome(
        a.round,
        [this, round = a.round](Outcome o) {
          if (o.kind != Outcome::kSucceeded && o.node_rank != assignment_.node_rank) {
            log_->warn("round {} ended on node {}: {}", round, o.node_rank,
                       o.detail.empty() ? "failed" : o.detail);
          }
          handle(agent_.on_outcome(round, o));
        },
        [this](std::string e) {
          if (!finished_) fatal("lost the store: " + e);
        });
    handle(agent_.on_rendezvous_done(a));
  });
}

void Launcher::Impl::start_workers(const RankAssignment& a) {
  assignment_ = a;
  std::tie(master_addr_, master_port_) = rdzv_->master_for(a);
  workers_.clear();
  if (a.restart_count > 0 || a.round > 0) {
    log_->warn(
        "starting the worker group: round {}, restart {} of at most {}, {} node(s), world "
        "size {}",
        a.round, a.restart_count, cfg_.max_restarts, a.nnodes, a.world_size);
  }
  log_->info("starting {} workers (round {}, restart {}): ranks {}..{} of {}, {} node(s)",
             a.local_world_size, a.round, a.restart_count, a.base_rank,
             a.base_rank + a.local_world_size - 1, a.world_size, a.nnodes);
  rdzv_->start_keep_alive(a, [this](std::string why) { fatal(why); });
  for (int lr = 0; lr < a.local_world_size; ++lr) {
    auto w = std::make_unique<Worker>(io_);
    w->local_rank = lr;
    w->dir = log_root_ + "/attempt_" + std::to_string(a.restart_count) + "/" + std::to_string(lr);
    w->error_file = w->dir + "/error.json";
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) spawn_worker(*w, a);
}

void Launcher::Impl::spawn_worker(Worker& w, const RankAssignment& a) {
  const int lr = w.local_rank;
  const int redirect = cfg_.redirects.for_rank(lr) | cfg_.tee.for_rank(lr);
  const int tee = cfg_.tee.for_rank(lr);
  const bool filtered = cfg_.local_ranks_filter && !cfg_.local_ranks_filter->contains(lr);
  const std::string prefix = "[" + cfg_.role + std::to_string(lr) + "]:";

  SpawnRequest req;
  req.argv = command_.argv;
  WorkerEnvInputs in;
  in.config = &cfg_;
  in.assignment = &a;
  in.local_rank = lr;
  in.master_addr = master_addr_;
  in.master_port = master_port_;
  in.run_id = run_id_;
  in.error_file = w.error_file;
  in.omp_num_threads = omp_threads_;
  in.agent_id = agent_id();
  req.env = build_worker_env(env_, in);
  req.pipe_stdout = (redirect & kStdout) || filtered;
  req.pipe_stderr = true;  // always: its tail explains a failure without the script's help
  try {
    fs::create_directories(w.dir);
    SpawnedProcess p = spawner_->spawn(req);
    w.pid = p.pid;
    w.running = true;
    if (reaper_) reaper_->watch(p.pid);
    w.pidfd.assign(p.pidfd);
    auto start_pump = [&](int fd, bool to_file, const std::string& file, int console_fd,
                          bool with_prefix, TailBuffer* tail) {
      OutputRoute route;
      route.console_fd = console_fd;
      route.prefix = with_prefix ? prefix : "";
      route.file_fd = to_file ? open_log(w.dir + "/" + file) : -1;
      route.tail = tail;
      ++w.open_streams;
      auto pump = std::make_shared<StreamPump>(io_, fd, std::move(route), [this, &w] {
        if (--w.open_streams == 0 && !w.running) report_exit(w);
      });
      pump->start();
    };
    if (p.stdout_fd >= 0) {
      bool file = redirect & kStdout;
      int console = (filtered || (file && !(tee & kStdout))) ? -1 : STDOUT_FILENO;
      start_pump(p.stdout_fd, file, "stdout.log", console, file, nullptr);
    }
    if (p.stderr_fd >= 0) {
      bool file = redirect & kStderr;
      int console = (filtered || (file && !(tee & kStderr))) ? -1 : STDERR_FILENO;
      start_pump(p.stderr_fd, file, "stderr.log", console, file, &w.stderr_tail);
    }
    if (p.heartbeat_fd >= 0) {
      w.heartbeat.assign(p.heartbeat_fd);
      read_heartbeat(w);
    }
    w.pidfd.async_wait(asio::posix::stream_descriptor::wait_read, [this, &w](std::error_code ec) {
      if (!ec) on_worker_exit(w);
    });
  } catch (const std::exception& e) {
    WorkerFailure f;
    f.node_rank = a.node_rank;
    f.local_rank = lr;
    f.global_rank = a.base_rank + lr;
    f.host = host_;
    f.exit_code = 1;
    f.timestamp = wall_now();
    f.reason = std::string("could not start: ") + e.what();
    f.message = f.reason;
    w.reported = true;
    asio::post(io_, [this, lr, f] { handle(agent_.on_worker_exited(lr, f)); });
  }
}

void Launcher::Impl::read_heartbeat(Worker& w) {
  w.heartbeat.async_read_some(asio::buffer(w.beat_buf), [this, &w](std::error_code ec, size_t) {
    if (ec) return;  // the worker is gone
    if (cfg_.worker_hang_timeout.count() > 0 && w.running) {
      w.hang_timer.expires_after(cfg_.worker_hang_timeout);
      w.hang_timer.async_wait([this, &w](std::error_code tec) {
        if (tec || !w.running) return;
        WorkerFailure f;
        f.node_rank = assignment_.node_rank;
        f.local_rank = w.local_rank;
        f.global_rank = assignment_.base_rank + w.local_rank;
        f.host = host_;
        f.pid = w.pid;
        f.exit_code = -SIGKILL;
        f.timestamp = wall_now();
        std::ostringstream why;
        why << "hung: no heartbeat for "
            << std::chrono::duration<double>(cfg_.worker_hang_timeout).count() << " s";
        f.reason = why.str();
        f.message = f.reason;
        f.traceback = w.stderr_tail.text();
        log_->warn("local rank {} (pid {}) is {}", w.local_rank, w.pid, f.reason);
        handle(agent_.on_worker_hung(w.local_rank, f));
      });
    }
    read_heartbeat(w);
  });
}

void Launcher::Impl::on_worker_exit(Worker& w) {
  int status = 0;
  while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
  }
  w.wait_status = status;
  w.exit_time = wall_now();
  w.running = false;
  w.hang_timer.cancel();
  // Whatever the worker left in its process group goes with it.
  ::kill(-w.pid, SIGKILL);
  if (reaper_) reaper_->forget(w.pid);
  std::error_code ignored;
  w.pidfd.close(ignored);
  if (w.open_streams == 0) {
    report_exit(w);
    return;
  }
  // Let the pipes drain, so the stderr tail is complete; a descendant that escaped the group
  // and holds them open must not delay the report for long.
  w.eof_timer.expires_after(200ms);
  w.eof_timer.async_wait([this, &w](std::error_code ec) {
    if (!ec) report_exit(w);
  });
}

void Launcher::Impl::report_exit(Worker& w) {
  if (w.reported) return;
  w.reported = true;
  w.eof_timer.cancel();
  std::error_code ignored;
  w.heartbeat.close(ignored);
  std::optional<WorkerFailure> failure;
  int st = w.wait_status;
  bool failed = WIFSIGNALED(st) || (WIFEXITED(st) && WEXITSTATUS(st) != 0);
  if (failed) {
    WorkerFailure f;
    f.node_rank = assignment_.node_rank;
    f.local_rank = w.local_rank;
    f.global_rank = assignment_.base_rank + w.local_rank;
    f.host = host_;
    f.pid = w.pid;
    f.timestamp = w.exit_time;
    if (WIFSIGNALED(st)) {
      int sig = WTERMSIG(st);
      f.exit_code = -sig;
      f.reason = "killed by " + signal_name(sig) + " (signal " + std::to_string(sig) + ")";
    } else {
      f.exit_code = WEXITSTATUS(st);
      f.reason = "exited with code " + std::to_string(f.exit_code);
    }
    f.message = f.reason;
    if (auto ef = read_error_file(w.error_file)) {
      f.error_file = w.error_file;
      if (!ef->message.empty()) f.message = ef->message;
      f.traceback = ef->traceback;
      if (ef->timestamp > 0) f.timestamp = std::min(f.timestamp, ef->timestamp);
    }
    if (f.traceback.empty()) f.traceback = w.stderr_tail.text();
    failure = f;
    if (agent_.phase() == Agent::Phase::kRunning) {
      log_->warn("local rank {} (rank {}, pid {}) {}", w.local_rank, f.global_rank, w.pid,
                 f.reason);
    } else {
      log_->info("local rank {} (pid {}) stopped: {}", w.local_rank, w.pid, f.reason);
    }
  }
  if (fatal_) {
    bool any = false;
    for (auto& o : workers_) any |= o->running;
    if (!any) shut_down(1);
    return;
  }
  handle(agent_.on_worker_exited(w.local_rank, failure));
}

void Launcher::Impl::signal_workers(int sig) {
  for (auto& w : workers_) {
    if (w->running) ::kill(-w->pid, sig);
  }
}

void Launcher::Impl::fatal(const std::string& message) {
  if (fatal_ || finished_) return;
  fatal_ = true;
  log_->error("{}", message);
  std::fprintf(stderr, "cohortrun: %s\n", message.c_str());
  bool any = false;
  for (auto& w : workers_) any |= w->running;
  if (!any) {
    shut_down(1);
    return;
  }
  signal_workers(SIGTERM);
  stop_timer_.expires_after(cfg_.term_timeout);
  stop_timer_.async_wait([this](std::error_code ec) {
    if (!ec) signal_workers(SIGKILL);
  });
}

void Launcher::Impl::finish(const action::Finish& f) {
  finished_ = true;
  exit_code_ = f.exit_code;
  stop_timer_.cancel();
  if (!f.failed) {
    log_->info("all {} workers of node {} succeeded", assignment_.local_world_size,
               assignment_.node_rank);
  }
  rdzv_->stop_keep_alive();
  auto after_report = [this] {
    // The agent hosting the store keeps it up until every node has read the outcome.
    rdzv_->exit_barrier(agent_.round(), assignment_.nnodes, cfg_.exit_barrier_timeout,
                        [this](std::exception_ptr) { shut_down(exit_code_); });
  };
  if (!f.failed || (f.outcome && f.outcome->kind == Outcome::kAborted) ||
      (!f.outcome && f.local_failures.empty())) {
    if (f.failed) print_summary(f, {});
    after_report();
    return;
  }
  rdzv_->collect_failures(
      agent_.round(), assignment_.nnodes,
      [this, f, after_report](std::exception_ptr err, std::vector<WorkerFailure> all) {
        if (err || all.empty()) all = f.local_failures;
        print_summary(f, all);
        after_report();
      });
}

void Launcher::Impl::print_summary(const action::Finish& f, std::vector<WorkerFailure> failures) {
  if (failures.empty()) {
    std::string why = f.outcome && f.outcome->kind == Outcome::kAborted
                          ? "the job was stopped: " + f.outcome->detail
                          : "the job was stopped";
    std::fprintf(stderr, "cohortrun: %s\n", why.c_str());
    return;
  }
  std::string report = format_failure_report(command_.title, failures);
  write_fully(STDERR_FILENO, report);
  auto parent = env_.find("TORCHELASTIC_ERROR_FILE");
  if (parent != env_.end() && !parent->second.empty()) {
    auto first =
        *std::min_element(failures.begin(), failures.end(),
                          [](const auto& a, const auto& b) { return a.timestamp < b.timestamp; });
    std::optional<ErrorFileContent> child;
    if (!first.error_file.empty()) child = read_error_file(first.error_file);
    write_parent_error_file(parent->second, child, first.message, first.exit_code);
  }
}

void Launcher::Impl::shut_down(int code) {
  if (fatal_) code = 1;
  exit_code_ = code;
  finished_ = true;
  std::error_code ignored;
  signals_.cancel(ignored);
  stop_timer_.cancel();
  // Remaining pipe readers finish at EOF; do not wait on them for long.
  drain_timer_.expires_after(2s);
  drain_timer_.async_wait([this](std::error_code ec) {
    if (!ec) io_.stop();
  });
  bool busy = false;
  for (auto& w : workers_) busy |= w->open_streams > 0;
  if (!busy) io_.stop();
}

Launcher::Launcher(LaunchConfig config, std::map<std::string, std::string> env)
    : impl_(std::make_unique<Impl>(std::move(config), std::move(env))) {}
Launcher::~Launcher() = default;
int Launcher::run() {
  return impl_->run();
}

}  // namespace cohort::launch

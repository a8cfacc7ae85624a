#include "workers/worker_group.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <asio/post.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "cohort/base/duration_text.h"
#include "cohort/base/hang_probe.h"
#include "cohort/error.h"
#include "failure/error_file.h"
#include "workers/proc_file.h"

namespace cohort::launch {
namespace {

int open_log(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
  if (fd < 0) {
    int e = errno;
    throw IoError("cannot open " + path + ": " + std::strerror(e), e);
  }
  return fd;
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', ...); '?' when it cannot be read.
char scheduler_state(pid_t pid) {
  const std::vector<std::string> f = proc_stat_fields(pid);  // f[0] is field 3, the state
  return f.empty() || f[0].empty() ? '?' : f[0][0];
}

}  // namespace

struct WorkerGroup::Worker {
  Worker(asio::io_context& io, LoopClock& clock, WorkerSpec s)
      : spec(std::move(s)),
        pidfd(io),
        heartbeat(io),
        control(io),
        hang_timer(clock.make_timer()),
        drain_timer(clock.make_timer()),
        stack_timer(clock.make_timer()) {}

  WorkerSpec spec;
  pid_t pid = -1;
  bool running = false;   // started and not reaped
  bool reported = false;  // its exit was reported
  bool dumping = false;   // hung: asked for its stack, not yet reported
  // Set when the caller judged it hung (report_hung_with_stack): its reason and who waited.
  std::string hang_reason;
  std::vector<std::string> waiting;
  Clock::time_point nccl_deadline{};  // the wait for its NCCL Flight Recorder dump
  bool hung_reported = false;
  bool wedged_reported = false;
  std::optional<Clock::time_point> uninterruptible_since;  // in D state since
  std::string expired_timer;  // a FileTimerClient scope whose expiry killed it
  int wait_status = 0;
  double exit_time = 0;
  asio::posix::stream_descriptor pidfd;
  asio::posix::stream_descriptor heartbeat;
  asio::posix::stream_descriptor control;  // hang probes (cohort/base/hang_probe.h)
  std::unique_ptr<LoopTimer> hang_timer;
  std::unique_ptr<LoopTimer> drain_timer;
  std::unique_ptr<LoopTimer> stack_timer;
  std::shared_ptr<StreamPump> out_pump;
  std::shared_ptr<StreamPump> err_pump;
  char beat_buf[256];
  heartbeat_pipe::HeartbeatParser beats;
  std::optional<std::chrono::steady_clock::time_point> hello_at;
  char control_buf[4096];
  std::string control_line;           // an answer being read
  bool control_overlong = false;      // the line being read passed kMaxAnswerBytes: dropped
  int64_t asked = -1;                 // the probe it was last asked
  std::optional<std::string> answer;  // its answer to that probe

  bool answers_probes() const {
    return beats.hello() && beats.hello()->has(heartbeat_pipe::kProbeFeature) && control.is_open();
  }
  std::optional<std::chrono::steady_clock::time_point> last_beat;

  bool output_open() const {
    return (out_pump && !out_pump->at_eof()) || (err_pump && !err_pump->at_eof());
  }
};

WorkerGroup::WorkerGroup(asio::io_context& io, LoopClock& clock, ProcessSpawner& spawner,
                         ErrorFileReader& error_files, GroupSpec spec, WorkerGroupEvents events,
                         WorkerForker* forker)
    : io_(io),
      clock_(clock),
      spawner_(spawner),
      forker_(forker),
      spec_(std::move(spec)),
      events_(std::move(events)),
      state_timer_(clock.make_timer()),
      probe_timer_(clock.make_timer()),
      error_files_(error_files) {}

WorkerGroup::~WorkerGroup() {
  alive_.reset();  // from here on no handler or posted event of this group does anything
  state_timer_->cancel();
  for (auto& w : workers_) {
    if (w->running) {
      // A safety net, not a stop path: the agent stops its workers first, and only a worker that
      // outlived SIGKILL (stuck in the kernel) is still here. It is given a moment, never waited
      // for without bound; what cannot be reaped is left to the reaper process.
      spawner_.kill_group(w->pid, SIGKILL);
      std::optional<int> status;
      for (int i = 0; i < 100 && !(status = spawner_.reap_if_exited(w->pid)); ++i) ::usleep(5000);
      if (status && events_.reaped) events_.reaped(w->pid);
    }
    if (w->out_pump) w->out_pump->stop();
    if (w->err_pump) w->err_pump->stop();
    w->hang_timer->cancel();
    w->drain_timer->cancel();
    w->stack_timer->cancel();
    std::error_code ignored;
    w->heartbeat.close(ignored);
    w->control.close(ignored);
    w->pidfd.close(ignored);
  }
  probe_timer_->cancel();
}

void WorkerGroup::post(std::function<void()> event) {
  asio::post(io_, [alive = std::weak_ptr<int>(alive_), event = std::move(event)] {
    if (!alive.expired()) event();
  });
}

FailureSite WorkerGroup::site(const Worker& w) const {
  FailureSite s;
  s.node_rank = spec_.node_rank;
  s.local_rank = w.spec.local_rank;
  s.global_rank = spec_.base_rank + w.spec.local_rank;
  s.host = spec_.host;
  s.pid = w.pid > 0 ? w.pid : 0;
  return s;
}

void WorkerGroup::start() {
  for (auto& s : spec_.workers) workers_.push_back(std::make_unique<Worker>(io_, clock_, s));
  // Every fork server is asked before any answer is awaited: they fork at the same time. A
  // worker's folder (its error file's) exists before it starts; spawn() reports a failure to
  // make it.
  std::vector<bool> forking;
  for (auto& w : workers_) {
    std::error_code ec;
    if (!w->spec.dir.empty()) std::filesystem::create_directories(w->spec.dir, ec);
    forking.push_back(forker_ != nullptr && !ec &&
                      forker_->begin(w->spec.local_rank, w->spec.request));
  }
  for (size_t i = 0; i < workers_.size(); ++i) spawn(*workers_[i], forking[i]);
  if (spec_.uninterruptible_timeout.count() > 0) watch_uninterruptible();
}

void WorkerGroup::watch_uninterruptible() {
  using std::chrono::milliseconds;
  // Often enough to notice within a quarter of the timeout, at most once a second (torchrun
  // looks once per --monitor-interval).
  const milliseconds period =
      std::clamp(spec_.uninterruptible_timeout / 4, milliseconds(50), milliseconds(1000));
  state_timer_->start(period, [this] {
    const auto now = clock_.now();
    for (auto& w : workers_) {
      if (!w->running || w->wedged_reported) continue;
      if (scheduler_state(w->pid) != 'D') {
        w->uninterruptible_since.reset();
        continue;
      }
      if (!w->uninterruptible_since) w->uninterruptible_since = now;
      const auto in_d = now - *w->uninterruptible_since;
      if (in_d < spec_.uninterruptible_timeout) continue;
      w->wedged_reported = true;
      WorkerFailure f = make_failure(
          site(*w), -SIGKILL,
          "stuck in uninterruptible sleep (D state) for " +
              in_seconds(std::chrono::duration_cast<milliseconds>(in_d)) +
              " (TORCHELASTIC_UNINTERRUPTIBLE_STATE_TIMEOUT " +
              in_seconds(spec_.uninterruptible_timeout) +
              "): the job ends without a restart, since a new worker would contend for what it "
              "holds in the kernel");
      const int lr = w->spec.local_rank;
      post([this, lr, f] {
        if (events_.wedged) events_.wedged(lr, f);
      });
    }
    watch_uninterruptible();
  });
}

void WorkerGroup::spawn(Worker& w, bool forking) {
  int out_file = -1, err_file = -1;
  // A worker begun by the forker is collected whatever happens here, so that its server is
  // ready for the next one.
  std::optional<SpawnedProcess> forked;
  if (forking) forked = forker_->finish(w.spec.local_rank);
  try {
    if (!w.spec.dir.empty()) std::filesystem::create_directories(w.spec.dir);
    if (!w.spec.stdout_file.empty()) out_file = open_log(w.spec.stdout_file);
    if (!w.spec.stderr_file.empty()) err_file = open_log(w.spec.stderr_file);
    SpawnedProcess p =
        forked ? *std::exchange(forked, std::nullopt) : spawner_.spawn(w.spec.request);
    w.pid = p.pid;
    w.running = true;
    if (events_.started) events_.started(p.pid);
    w.pidfd.assign(p.pidfd);
    auto eof = [this, &w, alive = std::weak_ptr<int>(alive_)] {
      if (alive.expired()) return;
      if (!w.running && !w.output_open()) report(w);
    };
    if (p.stdout_fd >= 0) {
      PumpRoute r = w.spec.stdout_route;
      r.file_fd = std::exchange(out_file, -1);
      w.out_pump = StreamPump::start(io_, p.stdout_fd, std::move(r), eof);
    }
    if (p.stderr_fd >= 0) {
      PumpRoute r = w.spec.stderr_route;
      r.file_fd = std::exchange(err_file, -1);
      w.err_pump = StreamPump::start(io_, p.stderr_fd, std::move(r), eof);
    }
    if (p.heartbeat_fd >= 0) {
      w.heartbeat.assign(p.heartbeat_fd);
      read_heartbeat(w);
    }
    if (p.control_fd >= 0) {
      w.control.assign(p.control_fd);
      read_control(w);
    }
    watch_exit(w);
  } catch (const std::exception& e) {
    if (out_file >= 0) ::close(out_file);
    if (err_file >= 0) ::close(err_file);
    if (forked) {  // forked, but its log could not be opened: it must not run unwatched
      spawner_.kill_group(forked->pid, SIGKILL);
      spawner_.reap(forked->pid);
      for (int fd : {forked->pidfd, forked->stdout_fd, forked->stderr_fd, forked->heartbeat_fd})
        if (fd >= 0) ::close(fd);
    }
    WorkerFailure f = make_failure(site(w), 1, std::string("could not start: ") + e.what());
    w.reported = true;
    const int lr = w.spec.local_rank;
    post([this, lr, f] {
      if (events_.exited) events_.exited(lr, f);
    });
  }
}

void WorkerGroup::watch_exit(Worker& w) {
  w.pidfd.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, &w, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
                       if (ec || alive.expired()) return;
                       on_exit(w);
                     });
}

void WorkerGroup::read_heartbeat(Worker& w) {
  w.heartbeat.async_read_some(
      asio::buffer(w.beat_buf),
      [this, &w, alive = std::weak_ptr<int>(alive_)](std::error_code ec, size_t n) {
        if (ec || alive.expired()) return;  // the worker is gone, or so is the group
        // Only beats and step reports arm the hang timer: a hello is no beat, and a worker that
        // never beats is never judged by beats alone. One that answers probes is watched from
        // its hello on: the caller's probe judges it, beats or none.
        const bool had_hello = w.beats.hello().has_value();
        const bool beat = w.beats.feed(std::string_view(w.beat_buf, n));
        const auto now = std::chrono::steady_clock::now();
        if (beat) w.last_beat = now;
        const bool new_hello = !had_hello && w.beats.hello().has_value();
        if (new_hello) w.hello_at = now;
        if (beat || (new_hello && w.answers_probes() && events_.silent)) arm_hang_timer(w);
        read_heartbeat(w);
      });
}

void WorkerGroup::arm_hang_timer(Worker& w) {
  // A worker that answers probes is judged by the caller's probe, when the caller listens.
  const bool probed = w.answers_probes() && events_.silent != nullptr;
  const std::chrono::milliseconds timeout =
      probed && spec_.probe_silence.count() > 0 ? spec_.probe_silence : spec_.hang_timeout;
  if (timeout.count() <= 0 || !w.running) return;
  w.hang_timer->start(timeout, [this, &w, probed] {
    if (!w.running || w.dumping) return;
    if (probed) {
      const int lr = w.spec.local_rank;
      post([this, lr] {
        if (events_.silent) events_.silent(lr);
      });
      return;
    }
    // Its stack first: the summary should show where it was stuck.
    w.dumping = true;
    spawner_.kill_process(w.pid, spec_.stack_signal);
    w.stack_timer->start(spec_.stack_grace, [this, &w] { report_hung(w, std::nullopt); });
  });
}

void WorkerGroup::read_control(Worker& w) {
  w.control.async_read_some(
      asio::buffer(w.control_buf),
      [this, &w, alive = std::weak_ptr<int>(alive_)](std::error_code ec, size_t n) {
        if (ec || alive.expired()) return;  // the worker is gone, or so is the group
        std::string_view in(w.control_buf, n);
        while (!in.empty()) {
          const size_t nl = in.find('\n');
          const std::string_view piece = in.substr(0, nl);
          if (!w.control_overlong) {
            w.control_line.append(piece);
            if (w.control_line.size() > hang_probe::kMaxAnswerBytes) {
              w.control_overlong = true;
              w.control_line.clear();
            }
          }
          if (nl == std::string_view::npos) break;
          if (!w.control_overlong) take_answer(w, std::exchange(w.control_line, {}));
          w.control_overlong = false;
          in.remove_prefix(nl + 1);
        }
        read_control(w);
      });
}

void WorkerGroup::take_answer(Worker& w, std::string line) {
  int64_t id = -1;
  try {
    id = hang_probe::parse_answer(line).id;
  } catch (const std::exception&) {
    return;  // not an answer: dropped
  }
  if (id != w.asked || id != probe_id_ || w.answer) return;  // late, or not asked
  w.answer = std::move(line);
  finish_probe_if_answered();
}

void WorkerGroup::finish_probe_if_answered() {
  if (!probe_done_) return;
  for (const auto& w : workers_)
    if (w->asked == probe_id_ && !w->answer && w->running) return;
  finish_probe();
}

void WorkerGroup::probe(int64_t id, std::chrono::milliseconds deadline,
                        std::function<void(std::vector<ProbeReply>)> done) {
  probe_timer_->cancel();
  probe_id_ = id;
  probe_done_ = std::move(done);
  bool asked_any = false;
  const std::string question = hang_probe::encode_request(id);
  for (auto& w : workers_) {
    w->asked = -1;
    w->answer.reset();
    if (!w->running || !w->answers_probes()) continue;
    // A dozen bytes into an empty socket buffer: it never blocks, and a worker that does not read
    // its questions fills it only after hundreds of them. MSG_NOSIGNAL: a worker that closed its
    // end is an error here, not a SIGPIPE.
    if (::send(w->control.native_handle(), question.data(), question.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(question.size()))
      continue;
    w->asked = id;
    asked_any = true;
  }
  if (!asked_any) {
    finish_probe();
    return;
  }
  probe_timer_->start(deadline, [this] { finish_probe(); });
}

void WorkerGroup::finish_probe() {
  if (!probe_done_) return;
  probe_timer_->cancel();
  std::vector<ProbeReply> replies;
  for (const auto& w : workers_) {
    ProbeReply r;
    r.local_rank = w->spec.local_rank;
    r.pid = w->beats.hello() ? static_cast<pid_t>(w->beats.hello()->pid) : w->pid;
    r.running = w->running;
    if (w->answer) {
      r.answer = std::move(*w->answer);
    } else if (!w->running) {
      r.no_answer = w->pid > 0 ? "it had exited" : "it never started";
    } else if (!w->answers_probes()) {
      r.no_answer =
          "it does not answer hang probes (not a Python worker with cohortrun's worker module, "
          "nor libcohort)";
    } else if (w->asked != probe_id_) {
      r.no_answer = "its control socket did not take the question";
    } else {
      r.no_answer =
          "no answer in time (its main thread may hold Python's GIL in native code, or the "
          "process is stopped)";
    }
    replies.push_back(std::move(r));
  }
  for (auto& w : workers_) {
    w->asked = -1;
    w->answer.reset();
  }
  post([done = std::exchange(probe_done_, nullptr), replies = std::move(replies)] {
    done(replies);
  });
}

std::vector<WorkerReading> WorkerGroup::readings() const {
  std::vector<WorkerReading> out;
  out.reserve(workers_.size());
  for (const auto& w : workers_) {
    out.push_back({w->spec.local_rank, w->pid, w->running, !w->running && w->wait_status != 0,
                   w->last_beat, w->beats.beaten_by_hand(), w->beats.last_step(), w->hello_at,
                   w->answers_probes()});
  }
  return out;
}

void WorkerGroup::on_exit(Worker& w) {
  w.wait_status = spawner_.reap(w.pid);
  w.exit_time = wall_clock_now();
  w.running = false;
  w.hang_timer->cancel();
  finish_probe_if_answered();  // it will not answer now
  // Whatever the worker left in its process group goes with it.
  spawner_.kill_group(w.pid, SIGKILL);
  if (events_.reaped) events_.reaped(w.pid);
  std::error_code ignored;
  w.pidfd.close(ignored);
  if (!w.output_open()) {
    report(w);
    return;
  }
  // Let the pipes drain, so the stderr tail is complete; a descendant that escaped the group
  // and holds them open must not delay the report for long.
  w.drain_timer->start(spec_.drain_grace, [this, &w] { report(w); });
}

void WorkerGroup::report_hung(Worker& w, std::optional<WorkerFailure> exit) {
  if (w.hung_reported) return;
  w.hung_reported = true;
  w.stack_timer->cancel();
  const std::string why = w.hang_reason.empty()
                              ? "hung: no heartbeat for " + in_seconds(spec_.hang_timeout)
                              : w.hang_reason;
  WorkerFailure f = make_failure(
      site(w), exit ? exit->exit_code : -SIGKILL,
      why + (exit ? " (its stack, asked for with " + signal_name(spec_.stack_signal) + ", below)"
                  : " (it did not answer " + signal_name(spec_.stack_signal) + " with its stack)"));
  f.waiting = w.waiting;
  const std::vector<std::string> dumps = nccl_dumps(w);
  if (!dumps.empty()) {
    f.reason += "; its NCCL Flight Recorder dump (torchfrtrace reads it): ";
    for (size_t i = 0; i < dumps.size(); ++i) f.reason += (i ? ", " : "") + dumps[i];
    f.message = f.reason;
  }
  if (exit) {
    f.error_file = exit->error_file;
    f.traceback = exit->traceback;
  } else if (w.err_pump) {
    f.traceback = w.err_pump->tail().text();
  }
  const int lr = w.spec.local_rank;
  post([this, lr, f] {
    if (events_.hung) events_.hung(lr, f);
  });
}

void WorkerGroup::report(Worker& w) {
  if (w.reported) return;
  w.reported = true;
  w.drain_timer->cancel();
  std::error_code ignored;
  w.heartbeat.close(ignored);
  if (describe_exit(w.wait_status).failed && !w.spec.error_file.empty()) {
    // The worker controls the file (a FIFO, a link to /dev/zero, a hung mount): read off the loop.
    error_files_.read(w.spec.error_file, [this, &w, alive = std::weak_ptr<int>(alive_)](
                                             std::optional<ErrorFileContent> ef) {
      if (!alive.expired()) finish_report(w, std::move(ef));  // the reader outlives groups
    });
    return;
  }
  finish_report(w, std::nullopt);
}

void WorkerGroup::finish_report(Worker& w, std::optional<ErrorFileContent> ef) {
  std::optional<WorkerFailure> failure;
  ExitDescription d = describe_exit(w.wait_status);
  if (d.failed) {
    WorkerFailure f = make_failure(site(w), d.exit_code, d.reason, w.exit_time);
    if (ef) {
      f.error_file = w.spec.error_file;
      if (!ef->message.empty()) f.message = ef->message;
      f.traceback = ef->traceback;
      if (ef->timestamp > 0) f.timestamp = std::min(f.timestamp, ef->timestamp);
      f.error_file_text = std::move(ef->raw);
    }
    if (f.traceback.empty() && w.err_pump) f.traceback = w.err_pump->tail().text();
    if (!w.expired_timer.empty()) {
      const bool message_is_reason = f.message == f.reason;
      f.reason = "its file timer '" + w.expired_timer + "' expired: " + f.reason;
      if (message_is_reason) f.message = f.reason;
    }
    failure = std::move(f);
  }
  const int lr = w.spec.local_rank;
  if (w.dumping) {
    // It ended after the stack request: the hang is the failure; its exit is a consequence.
    report_hung(w, failure);
    failure.reset();
  }
  post([this, lr, failure] {
    if (events_.exited) events_.exited(lr, failure);
  });
}

void WorkerGroup::report_hung_with_stack(int local_rank, std::string reason,
                                         std::vector<std::string> waiting) {
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return;
  Worker& w = *workers_[static_cast<size_t>(local_rank)];
  if (!w.running || w.dumping || w.hung_reported) return;
  w.hang_reason = std::move(reason);
  w.waiting = std::move(waiting);
  w.dumping = true;
  w.hang_timer->cancel();
  // An NCCL worker's Flight Recorder first: PyTorch dumps it from a C++ thread when its pipe is
  // written to, without the GIL; the stack request would end the process before.
  if (poke_nccl_pipes(w) > 0) {
    w.nccl_deadline = clock_.now() + kNcclDumpWait;
    wait_for_nccl_dump(w);
    return;
  }
  ask_for_stack(w);
}

void WorkerGroup::ask_for_stack(Worker& w) {
  spawner_.kill_process(w.pid, spec_.stack_signal);
  w.stack_timer->start(spec_.stack_grace, [this, &w] { report_hung(w, std::nullopt); });
}

int WorkerGroup::poke_nccl_pipes(Worker& w) {
  namespace fs = std::filesystem;
  if (w.spec.nccl_pipe_stem.empty()) return 0;
  const fs::path stem(w.spec.nccl_pipe_stem);
  const std::string name = stem.filename().string();
  std::error_code ec;
  int poked = 0;
  for (const auto& e : fs::directory_iterator(stem.parent_path(), ec)) {
    const std::string f = e.path().filename().string();
    if (f.rfind(name, 0) != 0 || !e.is_fifo(ec)) continue;
    // Non-blocking: a pipe nobody reads (a dead process group) fails at once with ENXIO.
    const int fd = ::open(e.path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    poked += ::write(fd, "1", 1) == 1;
    ::close(fd);
  }
  return poked;
}

std::vector<std::string> WorkerGroup::nccl_dumps(const Worker& w) const {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  if (w.spec.nccl_dump_prefix.empty()) return out;
  const fs::path prefix(w.spec.nccl_dump_prefix);
  const std::string name = prefix.filename().string();
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(prefix.parent_path(), ec)) {
    if (e.path().filename().string().rfind(name, 0) == 0 && e.is_regular_file(ec) &&
        e.file_size(ec) > 0)
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void WorkerGroup::wait_for_nccl_dump(Worker& w) {
  if (!w.running) return;
  if (!nccl_dumps(w).empty() || clock_.now() >= w.nccl_deadline) {
    ask_for_stack(w);
    return;
  }
  w.stack_timer->start(std::chrono::milliseconds(100), [this, &w] { wait_for_nccl_dump(w); });
}

bool WorkerGroup::signal_for_expired_timer(pid_t pid, const std::string& scope, int sig) {
  const pid_t pgid = ::getpgid(pid);
  for (auto& w : workers_) {
    if (!w->running || (w->pid != pid && w->pid != pgid)) continue;
    if (w->expired_timer.empty()) w->expired_timer = scope;
    spawner_.kill_process(pid, sig);
    return true;
  }
  return false;
}

void WorkerGroup::signal(int sig) {
  for (auto& w : workers_)
    if (w->running) spawner_.kill_group(w->pid, sig);
}

bool WorkerGroup::any_running() const {
  for (const auto& w : workers_)
    if (w->running) return true;
  return false;
}

std::vector<pid_t> WorkerGroup::running_pids() const {
  std::vector<pid_t> pids;
  for (const auto& w : workers_)
    if (w->running) pids.push_back(w->pid);
  return pids;
}

}  // namespace cohort::launch

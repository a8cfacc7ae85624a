#include "cohort/heartbeat.h"

#include "cohort/base/heartbeat_line.h"
#include "cohort/base/worker_env_names.h"
#include "probe_server.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace cohort {
namespace {

// write() with SIGPIPE blocked on this thread, consuming a SIGPIPE the write raised, so that a
// launcher that went away never kills the worker (pipes have no MSG_NOSIGNAL).
ssize_t write_without_sigpipe(int fd, const void* buf, size_t len) {
  sigset_t pipe_set, old_set;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  sigset_t pending;
  sigpending(&pending);
  const bool was_pending = sigismember(&pending, SIGPIPE) == 1;
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old_set);
  ssize_t n;
  do {
    n = ::write(fd, buf, len);
  } while (n < 0 && errno == EINTR);
  const int saved = errno;
  if (n < 0 && saved == EPIPE && !was_pending) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old_set, nullptr);
  errno = saved;
  return n;
}

}  // namespace

std::optional<int> heartbeat_fd_from_env(const EnvMap& env) {
  auto it = env.find(worker_env::kHeartbeatFd);
  if (it == env.end()) return std::nullopt;
  int fd = -1;
  const std::string& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), fd);
  if (ec != std::errc() || ptr != s.data() + s.size() || fd < 0) return std::nullopt;
  return fd;
}

HeartbeatWriter::HeartbeatWriter(int fd, std::chrono::nanoseconds min_interval)
    : fd_(fd),
      min_interval_ns_(min_interval.count()),
      last_ns_(std::numeric_limits<int64_t>::min() / 2) {}

bool HeartbeatWriter::beat(Clock::time_point now) {
  if (fd_ < 0) return false;
  const int64_t t =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  int64_t last = last_ns_.load(std::memory_order_relaxed);
  do {
    if (t - last < min_interval_ns_) return false;
  } while (!last_ns_.compare_exchange_weak(last, t, std::memory_order_relaxed));
  const char byte = heartbeat_pipe::kBeat;
  // EAGAIN: the launcher has not drained the pipe, it will see the earlier bytes. EPIPE/EBADF: no
  // one is listening. Either way the worker carries on.
  return write_without_sigpipe(fd_, &byte, 1) == 1;
}

bool HeartbeatWriter::report(int64_t step, double step_seconds, double items_per_second,
                             double comm_seconds, Clock::time_point now) {
  if (fd_ < 0) return false;
  const std::string line =
      heartbeat_pipe::encode_step_report({step, step_seconds, items_per_second, comm_seconds});
  if (line.empty()) return false;
  last_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count(),
      std::memory_order_relaxed);
  return write_without_sigpipe(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
}

namespace {

HeartbeatWriter& process_writer() {
  static HeartbeatWriter writer([] {
    const char* v = std::getenv(worker_env::kHeartbeatFd);
    if (v == nullptr) return -1;
    return heartbeat_fd_from_env(EnvMap{{worker_env::kHeartbeatFd, v}}).value_or(-1);
  }());
  return writer;
}

// The steps since the last report, averaged into the next one.
struct StepWindow {
  HeartbeatWriter::Clock::time_point last_report{};
  int steps = 0;
  double step_s = 0, items = 0, comm_s = 0;
};

}  // namespace

void heartbeat() {
  process_writer().beat();
}

namespace detail {

void say_hello(const std::vector<std::string>& features) {
  const int fd = process_writer().fd();
  if (fd < 0) return;
  heartbeat_pipe::Hello h;
  h.pid = ::getpid();
  h.features = features;
  const std::string line = heartbeat_pipe::encode_hello(h);
  if (!line.empty()) write_without_sigpipe(fd, line.data(), line.size());
}

}  // namespace detail

void report_step(int64_t step, double step_seconds, double items_per_second, double comm_seconds) {
  constexpr auto kReportInterval = std::chrono::milliseconds(250);
  static StepWindow w;
  HeartbeatWriter& writer = process_writer();
  if (writer.fd() < 0) return;
  ++w.steps;
  w.step_s += step_seconds;
  w.items += items_per_second * step_seconds;  // items, so that the mean is weighted by time
  w.comm_s += comm_seconds;
  const auto now = HeartbeatWriter::Clock::now();
  if (now - w.last_report < kReportInterval) return;
  writer.report(step, w.step_s / w.steps, w.step_s > 0 ? w.items / w.step_s : 0, w.comm_s / w.steps,
                now);
  w = StepWindow{now};
}

}  // namespace cohort

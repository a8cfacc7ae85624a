// Heartbeats from a worker to its local cohortrun, which restarts the group when a worker stops
// beating for --worker-hang-timeout seconds.
//
// Contract with the launcher: cohortrun hands the write end of a pipe to each worker and names it
// in COHORT_HEARTBEAT_FD (non-blocking). A beat writes one byte, at most one per 100 ms; EAGAIN
// (the launcher is behind) and EPIPE (it went away) are ignored, and the write never raises
// SIGPIPE. Without COHORT_HEARTBEAT_FD every beat is a no-op. Every collective of libcohort beats
// on entry and on completion, so a worker stuck inside a collective stops beating.
//
// Step reports ride on the same pipe: report_step() tells the launcher how far the worker is and
// how long its steps take (cohortrun's metrics, `cohortctl status`, the straggler check). A
// report is one line, "S <step> <step_s> <items_per_s> <comm_s>\n", written in one write() (under
// PIPE_BUF, so never interleaved with other bytes); at most one per 250 ms, averaging the steps
// since the last one. Every report is also a beat.
//
// Thread safety: heartbeat() and HeartbeatWriter::beat() are safe from any thread; report_step()
// from the one thread that runs the steps.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "cohort/context.h"

namespace cohort {

// Beats through the process-wide writer made from COHORT_HEARTBEAT_FD (read on the first call).
void heartbeat();

// Step `step` (counted from 1) took `step_seconds` of wall time, of which `comm_seconds` in
// communication (gradient allreduce, waiting included), and processed `items_per_second`
// samples or tokens per second (as the worker counts them; 0 when it does not).
void report_step(int64_t step, double step_seconds, double items_per_second, double comm_seconds);

// The fd named by COHORT_HEARTBEAT_FD in `env`, or nullopt when it is absent or malformed.
std::optional<int> heartbeat_fd_from_env(const EnvMap& env);

// Writes beats to one fd, rate-limited. Does not own the fd.
class HeartbeatWriter {
 public:
  using Clock = std::chrono::steady_clock;

  // fd < 0 makes every beat a no-op.
  explicit HeartbeatWriter(int fd,
                           std::chrono::nanoseconds min_interval = std::chrono::milliseconds(100));
  HeartbeatWriter(const HeartbeatWriter&) = delete;
  HeartbeatWriter& operator=(const HeartbeatWriter&) = delete;

  // Writes one byte unless the previous byte went out less than min_interval before `now`.
  // Returns true iff a byte was written.
  bool beat(Clock::time_point now = Clock::now());

  int fd() const { return fd_; }

  // Writes one step report line (see report_step()), and counts it as a beat. True iff written.
  bool report(int64_t step, double step_seconds, double items_per_second, double comm_seconds,
              Clock::time_point now = Clock::now());

 private:
  const int fd_;
  const int64_t min_interval_ns_;
  std::atomic<int64_t> last_ns_;  // time_since_epoch of the last byte written
};

}  // namespace cohort

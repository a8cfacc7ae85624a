// Heartbeats from a worker to its local cohortrun, which restarts the group when a worker stops
// beating for --worker-hang-timeout seconds.
//
// Contract with the launcher: cohortrun hands the write end of a pipe to each worker and names it
// in COHORT_HEARTBEAT_FD (non-blocking). A beat writes one byte, at most one per 100 ms; EAGAIN
// (the launcher is behind) and EPIPE (it went away) are ignored, and the write never raises
// SIGPIPE. Without COHORT_HEARTBEAT_FD every beat is a no-op. Every collective of libcohort beats
// on entry and on completion, so a worker stuck inside a collective stops beating.
//
// Thread safety: heartbeat() and HeartbeatWriter::beat() are safe from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>

#include "cohort/context.h"

namespace cohort {

// Beats through the process-wide writer made from COHORT_HEARTBEAT_FD (read on the first call).
void heartbeat();

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

 private:
  const int fd_;
  const int64_t min_interval_ns_;
  std::atomic<int64_t> last_ns_;  // time_since_epoch of the last byte written
};

}  // namespace cohort

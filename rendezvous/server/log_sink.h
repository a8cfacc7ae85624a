// QueuedLogSink: cohortd's log lines, written by a thread of their own so that logging never
// blocks the event loop.
//
// A logger calling the sink formats the line and puts it in a bounded queue (a short mutex, no
// I/O); the writer thread ("cohortd-log") writes queued lines to a descriptor (stderr, or a
// --log-file). When the queue is full, as when nobody reads cohortd's stderr pipe, lines are
// dropped and counted; take_dropped() says how many, for a line said later. The writer waits for
// the descriptor to be writable (poll) and writes at most PIPE_BUF bytes at a time, so it never
// blocks in write(2) on a pipe and can always be stopped. A reader that went away (EPIPE) makes
// the writer drop what it has: with SIGPIPE ignored, cohortd serves on without a log.
//
// Thread safety: all public members are safe from any thread.
#pragma once

#include <spdlog/sinks/base_sink.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace cohort::rdzv {

class QueuedLogSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Writes to `fd` (not owned: the caller closes it after the sink is destroyed). Holds at most
  // `max_queued_bytes` of lines not yet written.
  explicit QueuedLogSink(int fd, size_t max_queued_bytes = 4 << 20);
  // Writes what is queued for up to a second more, then stops the writer thread.
  ~QueuedLogSink() override;
  QueuedLogSink(const QueuedLogSink&) = delete;
  QueuedLogSink& operator=(const QueuedLogSink&) = delete;

  // Lines dropped since the last call.
  uint64_t take_dropped() { return dropped_.exchange(0); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  void write_loop();
  // Writes all of `line`; false when the descriptor failed or `stop_` came first.
  bool write_all(const std::string& line);

  const int fd_;
  const size_t max_queued_bytes_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::string> queue_;     // guarded by queue_mu_
  size_t queued_bytes_ = 0;           // guarded by queue_mu_
  bool stopping_ = false;             // guarded by queue_mu_
  std::atomic<bool> give_up_{false};  // the destructor's grace period is over
  std::atomic<uint64_t> dropped_{0};
  std::thread writer_;
};

}  // namespace cohort::rdzv

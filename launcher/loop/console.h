// ConsoleStream: cohortrun's own stdout or stderr, written without ever blocking the event loop.
//
// A console that nobody reads (a pipe into a stalled program) must not stop the launcher: it
// still has to see exits, signals and heartbeats. Writes go to a private non-blocking
// description of the same pipe or terminal (reopened through /proc/self/fd, so that the
// descriptor the workers inherit stays blocking); what the console cannot take yet waits in a
// bounded queue, drained when the descriptor becomes writable. Past the bound, output is dropped
// and counted, and one warning says so once the console drains again (files under --log-dir with
// --redirects keep everything). A console that went away (EPIPE) is closed: the job carries on
// without it (cohortrun ignores SIGPIPE).
//
// Regular files and /dev/null are written directly (they never block for long, and reopening a
// file would lose its O_APPEND and offset).
//
// Thread safety: write() and write_blocking() are safe from any thread (loggers on the store
// threads use them); the rest from the loop's thread.
#pragma once

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace spdlog::sinks {
class sink;
}

namespace cohort::launch {

class ConsoleStream {
 public:
  // `fd`: STDOUT_FILENO or STDERR_FILENO (not closed; a private copy is used).
  ConsoleStream(asio::io_context& io, int fd, size_t max_queued = 4u << 20);
  ~ConsoleStream();
  ConsoleStream(const ConsoleStream&) = delete;
  ConsoleStream& operator=(const ConsoleStream&) = delete;

  // Queues `bytes`; never blocks. Drops them (counted) when the queue is full or the console
  // closed.
  void write(std::string_view bytes);
  // Writes what is queued and then `text`, waiting at most `timeout` for the console to take
  // them (the failure summary at the end of a job).
  void write_blocking(std::string_view text, std::chrono::milliseconds timeout);

  bool is_terminal() const { return terminal_; }
  uint64_t dropped_bytes() const;
  bool closed() const;
  int fd() const { return original_fd_; }

 private:
  // Writes from queue_ until it is empty or the descriptor would block. REQUIRES: mu_ held.
  void drain_locked();
  // Arms a wait for writability on the loop (posted, so any thread may call it).
  void arm();
  void on_writable();

  asio::io_context& io_;
  const int original_fd_;
  bool terminal_ = false;
  bool nonblocking_ = false;  // writes to fd_ return EAGAIN instead of blocking
  bool socket_ = false;       // fd_ is a socket: send(MSG_DONTWAIT)
  int fd_ = -1;               // private descriptor (owned), or original_fd_ for files
  bool owns_fd_ = false;
  const size_t max_queued_;
  std::unique_ptr<asio::posix::stream_descriptor> waiter_;  // loop thread only

  mutable std::mutex mu_;
  std::string queue_;           // guarded by mu_
  bool armed_ = false;          // guarded by mu_
  bool closed_ = false;         // guarded by mu_
  uint64_t dropped_ = 0;        // guarded by mu_: since start
  uint64_t dropped_lines_ = 0;  // guarded by mu_: not yet reported
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

// cohortrun's two console streams.
struct Console {
  Console(asio::io_context& io) : out(io, 1), err(io, 2) {}
  ConsoleStream out;
  ConsoleStream err;
};

// An spdlog sink that writes formatted log lines to `stream` (which must outlive it), so that
// cohortrun's own log lines cannot block the loop either.
std::shared_ptr<spdlog::sinks::sink> console_log_sink(ConsoleStream& stream);

}  // namespace cohort::launch

// FileTimerServer: the agent side of PyTorch's file-based timers, as torchrun 2.x runs it when
// TORCHELASTIC_ENABLE_FILE_TIMER=1 (torch/distributed/elastic/timer/file_based_local_timer.py).
//
// A worker's FileTimerClient opens the FIFO named by TORCHELASTIC_TIMER_FILE and writes one JSON
// line per request: {"version": 1, "pid": P, "scope_id": S, "expiration_time": T, "signal": N}.
// T is wall-clock seconds since the epoch; a negative T releases the timer (P, S). When a timer
// expires with N > 0, the server reports it once, and forgets every timer of that pid: the caller
// sends the signal. torchrun then also kills itself with that signal; cohortrun does not: the
// worker's failure names the timer, and the group restarts like for any other failure.
//
// The server creates the FIFO (replacing a stale file at that path) and removes it when destroyed.
// A line that is not such a request is logged and skipped; the pipe stays open.
//
// Thread safety: the loop's thread only.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "cohort/base/environment.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class FileTimerServer {
 public:
  using OnExpired = std::function<void(pid_t pid, const std::string& scope, int signal)>;

  // Creates the FIFO at `path`; `log` takes the lines about requests it cannot read. Throws
  // IoError naming the path when it cannot.
  FileTimerServer(asio::io_context& io, std::string path, std::shared_ptr<spdlog::logger> log,
                  OnExpired on_expired);
  ~FileTimerServer();
  FileTimerServer(const FileTimerServer&) = delete;
  FileTimerServer& operator=(const FileTimerServer&) = delete;

  const std::string& path() const { return path_; }
  // The timers of a process that ended go with it.
  void forget(pid_t pid);
  size_t active_timers() const { return timers_.size(); }

  // Parses one request line; false when it is not one. (Public for the unit test.)
  struct Request {
    pid_t pid = 0;
    std::string scope;
    double expiration_time = 0;  // < 0: release
    int signal = 0;
  };
  static bool parse_request(const std::string& line, Request* out);

 private:
  void read_more();
  void on_line(const std::string& line);
  // Reports what expired, then sleeps until the next expiration.
  void check();

  struct Timer {
    double expiration_time;
    int signal;
  };
  std::string path_;
  std::shared_ptr<spdlog::logger> log_;
  OnExpired on_expired_;
  asio::posix::stream_descriptor fifo_;
  int keep_open_fd_ = -1;  // a writer of our own: the FIFO never reads EOF between clients
  asio::steady_timer check_timer_;
  std::map<std::pair<pid_t, std::string>, Timer> timers_;
  std::string partial_;
  char buf_[4096];
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

// The FIFO path for this job when the environment enables the file timer, else "": torchrun's
// rules (TORCHELASTIC_TIMER_FILE, else <tmp>/watchdog_timer_<random>).
std::string file_timer_path(const EnvMap& env);

}  // namespace cohort::launch

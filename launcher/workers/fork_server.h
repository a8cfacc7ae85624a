// ForkServer: one local rank's fork server, a Python process that has imported torch once and
// forks that rank's restarted workers (python/cohort/_forkserver.py says how, and what a forked
// worker gets), and cohortrun's end of the channel to it.
//
// The server is started with the worker's interpreter, environment and CPU binding, in a process
// group of its own, with the parent-death signal, by the same ProcessSpawner as the workers. It
// imports while the job runs and says when it is ready. fork() then sends it a worker's request
// with the descriptors the worker gets (ChildDescriptors, as for an exec'd worker) and returns the
// worker, which the server has made this process's child (cohortrun is the child subreaper): from
// there on it is waited for, signalled and reaped as any other worker. When the server cannot
// start a worker faithfully, fork() says why and the caller starts it the ordinary way.
//
// Thread safety: the loop's thread only.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "workers/child_descriptors.h"
#include "workers/output.h"
#include "workers/process_spawner.h"

namespace cohort::launch {

struct ForkServerSpec {
  int local_rank = 0;
  std::string server_file;  // python/cohort/_forkserver.py
  SpawnRequest worker;      // the worker as it would be exec'd: [python, -u, script|-m module, ...]
  std::string log_file;     // the server's own output ("" = discarded)
  // The modules to pre-import, comma-separated, instead of the server's own list (torch's, and
  // COHORT_FORK_PRELOAD): for tests, which need no torch.
  std::optional<std::string> preload;
  std::chrono::milliseconds reply_timeout{10000};  // for each fork()
};

class ForkServer {
 public:
  enum class State {
    kStarting,  // importing
    kReady,     // forks workers
    kRefused,   // it cannot serve (said why: CUDA initialised in it, a thread in it, stale)
    kGone,      // it exited, or stopped answering
  };

  // Starts the server. `changed` runs (from the loop) when the state changes on its own: ready,
  // refused, gone. Throws IoError when the process cannot be started, UsageError when the
  // worker's command is no Python entry point.
  ForkServer(asio::io_context& io, ProcessSpawner& spawner, ForkServerSpec spec,
             std::function<void()> changed);
  // Closes the channel (the server exits), kills its group and reaps it.
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  State state() const { return state_; }
  // Why it is refused or gone.
  const std::string& reason() const { return reason_; }
  pid_t pid() const { return pid_; }
  // Seconds from start to ready (0 before).
  double start_seconds() const { return start_seconds_; }

  // Forking a worker takes two calls, so that the servers of several ranks fork at once: send()
  // asks for the worker of `request` (false, with `why`, when the request could not be made);
  // collect() waits for the answer (a few milliseconds, at most reply_timeout) and returns the
  // worker, or nullopt with `why` (the state then kRefused when the server never will, kGone
  // when it broke). REQUIRES: send: state() == kReady and nothing pending; collect: a send().
  bool send(const SpawnRequest& request, std::string* why);
  std::optional<SpawnedProcess> collect(std::string* why);
  bool pending() const { return pending_ != nullptr; }
  // True once the server process has exited and was reaped.
  bool exited() const { return reaped_; }

  // The command line that starts a server for `worker` (its interpreter, this server file, the
  // channel's number, the entry point, and room for the worker's own command line, which a
  // forked worker writes over the server's). Empty when `worker` is no Python entry point.
  static std::vector<std::string> command(const std::string& server_file,
                                          const std::vector<std::string>& worker_argv,
                                          int channel_fd);

 private:
  void wait_hello();
  void on_exit();
  void report_exit();
  void set(State s, std::string reason);
  void post_changed();

  asio::io_context& io_;
  ProcessSpawner& spawner_;
  ForkServerSpec spec_;
  std::function<void()> changed_;
  State state_ = State::kStarting;
  std::string reason_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_status_ = 0;
  bool exit_reported_ = false;
  std::chrono::steady_clock::time_point started_;
  double start_seconds_ = 0;
  asio::posix::stream_descriptor channel_;  // SOCK_SEQPACKET
  asio::posix::stream_descriptor pidfd_;
  asio::steady_timer drain_timer_;  // for the last words of a server that died
  std::shared_ptr<StreamPump> out_pump_, err_pump_;
  std::unique_ptr<ChildDescriptors> pending_;  // of the worker asked for, until collect()
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace cohort::launch

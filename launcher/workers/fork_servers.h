// ForkServers: this node's fork servers, one per local rank (fork_server.h), started with the
// first round's workers and used for every restart after it.
//
// A rank's server that is not ready (still importing, refused, gone) leaves that rank's workers to
// the ordinary spawner, with a warning saying why; one that turns stale (a pre-imported module
// changed on disk) is replaced by a new one for the rounds after. Before a restart the agent waits
// for servers that are still importing (when_settled()): the server started earlier than an exec'd
// worker would, so it is ready sooner than that worker would have imported torch.
//
// Thread safety: the loop's thread only.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "workers/fork_server.h"
#include "workers/worker_group.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

struct ForkServersOptions {
  std::string server_file;  // python/cohort/_forkserver.py
  std::string log_dir;      // fork_server_<local rank>.log there ("" = none)
  // A rank whose server failed this many times (gone, or stale) gets no more.
  int max_starts = 3;
};

class ForkServers final : public WorkerForker {
 public:
  // `started`/`gone`: a server process started or was reaped (the reaper's list; optional).
  ForkServers(asio::io_context& io, ProcessSpawner& spawner, ForkServersOptions options,
              std::shared_ptr<spdlog::logger> log, std::function<void(pid_t)> started = {},
              std::function<void(pid_t)> gone = {});
  ~ForkServers() override;

  // Starts a server for every worker of `group` whose rank has none that can still serve.
  void start(const GroupSpec& group);
  // True while a server is importing.
  bool any_starting() const;
  // Runs `settled` (from the loop) once no server is importing; at once (posted) when none is.
  // A later call, or cancel_wait(), replaces it.
  void when_settled(std::function<void()> settled);
  void cancel_wait() { settled_ = nullptr; }
  // The servers still importing after `waited` are given up on: killed, never started again.
  void abandon_starting(std::chrono::milliseconds waited);
  // WorkerForker: asks local rank's server for the worker (false: start it the ordinary way),
  // then collects it (nullopt: start it the ordinary way; a warning says why).
  bool begin(int local_rank, const SpawnRequest& request) override;
  std::optional<SpawnedProcess> finish(int local_rank) override;
  // The servers' pids (the agent keeps them from its stray-children sweep).
  std::vector<pid_t> pids() const;

 private:
  struct Slot {
    std::unique_ptr<ForkServer> server;
    int starts = 0;
    bool told = false;       // its refusal or loss was logged
    bool forgotten = false;  // its exit was reported (gone_)
    SpawnRequest request;    // of the worker begun, until finish()
    std::chrono::steady_clock::time_point begun;
  };
  void start_one(int local_rank, const SpawnRequest& worker);
  void on_changed(int local_rank);
  void after_failure(int local_rank, Slot& slot, const std::string& why,
                     const SpawnRequest& request);
  void drop(Slot& slot);

  asio::io_context& io_;
  ProcessSpawner& spawner_;
  ForkServersOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::function<void(pid_t)> started_, gone_;
  std::map<int, Slot> slots_;
  std::function<void()> settled_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);
};

}  // namespace cohort::launch

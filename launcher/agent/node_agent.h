// NodeAgent: cohortrun on one node, wired together. It owns the loop's parts and connects them:
// the Agent (agent.h, the only state machine) decides; the JobRendezvous (static or elastic)
// talks to the store; the WorkerGroup of the current round runs the workers; the console writes
// without blocking; signals, timers and store replies become the Agent's events, and its actions
// are carried out here. Every way the job ends passes through the Agent's Finish action and the
// ending's steps after it (the summary, the exit barrier), each an Agent action; ShutDown ends it.
//
// Launcher (cohort/launch/launcher.h) runs one for real. Tests build one with NodeAgentDeps: a
// fake ProcessSpawner, a manual clock, an in-process store and their own loop, so that whole
// lifecycles (several nodes over one store) run in milliseconds without processes.
//
// Thread safety: the loop's thread only.
#pragma once

#include <asio/io_context.hpp>
#include <asio/signal_set.hpp>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "agent/agent.h"
#include "agent/join_notices.h"
#include "cohort/base/environment.h"
#include "failure/error_file_reader.h"
#include "failure/event_log.h"
#include "gpu/gpu_monitor.h"
#include "loop/console.h"
#include "loop/loop_clock.h"
#include "observe/hang_watch.h"
#include "observe/node_observer.h"
#include "plan/interpreter_probe.h"
#include "plan/job_plan.h"
#include "rdzv/job_rendezvous.h"
#include "workers/file_timer.h"
#include "workers/fork_servers.h"
#include "workers/process_spawner.h"
#include "workers/reaper.h"
#include "workers/worker_cgroup.h"
#include "workers/worker_group.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

struct NodeAgentDeps {
  asio::io_context* io = nullptr;     // null: its own loop, run by run()
  LoopClock* clock = nullptr;         // null: Asio's timers
  ProcessSpawner* spawner = nullptr;  // null: PosixSpawner
  StoreBridge::StoreFactory store;    // tests: an in-process store; nothing is hosted
  std::string advertised_address;     // tests: what an elastic node advertises
  bool real_process = true;  // signal handlers, reaper, subreaper, orphan sweep, SIGPIPE ignored
  ConsoleStream* out = nullptr;  // null: cohortrun's stdout and stderr
  ConsoleStream* err = nullptr;
};

class NodeAgent {
 public:
  NodeAgent(JobPlan plan, EnvMap env, NodeAgentDeps deps = {});
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  // Sets up (store, rendezvous) and starts the Agent. Throws UsageError for a configuration that
  // cannot work here (an endpoint, an address) and Error when the store cannot be hosted.
  void start();
  // start(), then runs its own loop until the job is over; returns the exit status (0, 1, 128+N).
  int run();

  // The job is over on this node and the node is torn down (the Agent's ShutDown).
  bool done() const { return agent_.phase() == Agent::Phase::kDone; }
  int exit_code() const { return exit_code_; }
  // As if cohortrun received `sig` (tests; real signals arrive through the signal set).
  void signal(int sig);
  const Agent& agent() const { return agent_; }
  const JobRendezvous* rendezvous() const { return rdzv_.get(); }

 private:
  void handle(std::vector<Action> actions);
  void rendezvous(int after_round);
  // The rendezvous gave this node `a`: watch the round's outcome and start its workers.
  void joined(const RankAssignment& a);
  // How long a round's workers wait for fork servers still importing (fork_servers.h).
  static constexpr std::chrono::milliseconds kForkServerWait{30000};
  void start_workers(const RankAssignment& a, const std::optional<Outcome>& previous);
  // --store-relay: whether this node's workers reach their store through its relay (auto: for
  // jobs that may have kAutoRelayRanks ranks or more).
  bool relays_workers() const;
  static constexpr int64_t kAutoRelayRanks = 1024;
  void stop_workers(int sig, std::chrono::milliseconds grace);
  // SIGKILL to every worker; those still running kUnkillableGrace later are given up on.
  void kill_workers();
  static constexpr std::chrono::milliseconds kUnkillableGrace{5000};
  void finish(const action::Finish& f);
  void report(const action::Finish& f, std::vector<WorkerFailure> failures);
  void shut_down();
  // shut_down() has run: the store bridge, the group and the observer are gone.
  bool torn_down() const { return rdzv_ == nullptr; }
  void wait_for_signals();
  void on_signal(int sig);
  // A store call's error handler: the job cannot go on without it.
  std::function<void(std::exception_ptr)> fatal_on_error(std::string what);
  std::set<pid_t> keep_pids() const;
  std::chrono::milliseconds wait_after_first_exit() const;
  // This node is done: bounds how long the others may still run.
  void bound_the_others(int round);
  std::unique_ptr<JobRendezvous> make_rendezvous();
  // TORCHELASTIC_ENABLE_FILE_TIMER=1: serves the workers' FileTimerClients (file_timer.h).
  void start_file_timer();
  // The status records, the straggler check and the metrics endpoint (node_observer.h).
  void start_observer();
  // Asks the workers' Python which it is and which PyTorch it finds (interpreter_probe.h).
  void start_interpreter_probe();
  // The workers' cgroup, where this agent may make one (worker_cgroup.h); says which applies.
  void start_worker_cgroup();
  // Kills what the last group's workers left: their cgroup's processes, then stray children.
  void clear_leftovers();

  JobPlan plan_;
  EnvMap env_;
  NodeAgentDeps deps_;
  std::unique_ptr<asio::io_context> own_io_;
  asio::io_context& io_;
  std::unique_ptr<LoopClock> own_clock_;
  LoopClock& clock_;
  std::unique_ptr<ProcessSpawner> own_spawner_;
  ProcessSpawner& spawner_;
  std::unique_ptr<Console> own_console_;
  ConsoleStream* out_;
  ConsoleStream* err_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<Reaper> reaper_;
  std::unique_ptr<WorkerCgroup> cgroup_;     // the workers' (real processes, where permitted)
  std::unique_ptr<InterpreterProbe> probe_;  // Python workers of real processes
  // How long a worker's error file may take to read before its failure goes without it.
  static constexpr std::chrono::milliseconds kErrorFileReadLimit{2000};
  // The groups' (declared before group_, so that it outlives each): a read stuck in a hung mount
  // can outlast its group, and its process is not a stray to kill (keep_pids).
  ErrorFileReader error_files_;
  // Restarted Python workers are forked from these (plan_.fork_server_file); before group_, which
  // uses them.
  std::unique_ptr<ForkServers> forks_;
  asio::signal_set signals_;
  Agent agent_;
  std::unique_ptr<JobRendezvous> rdzv_;
  std::unique_ptr<WorkerGroup> group_;
  std::unique_ptr<FileTimerServer> file_timer_;
  std::unique_ptr<GpuMonitor> gpu_;  // real processes only: NVML, or one line saying it is off
  RankAssignment assignment_;
  EventLog events_;
  std::vector<pid_t> worker_pids_;  // this round's, by local rank
  std::unique_ptr<LoopTimer> stop_timer_;
  std::unique_ptr<LoopTimer> finish_timer_;     // the ending's deadlines (barrier, abort grace)
  std::unique_ptr<LoopTimer> wait_timer_;       // --wait-after-first-exit
  JoinNotices join_notices_;                    // what this node says while a rendezvous is pending
  std::unique_ptr<LoopTimer> fork_wait_timer_;  // bounds the wait for fork servers
  bool relay_refusal_said_ = false;             // "store relay off" is said once a job
  int exit_code_ = 0;
  // Last: it reads the group, the rendezvous and the GPU monitor above (real processes only).
  std::unique_ptr<NodeObserver> observer_;
  // Hang probes across the job (observe/hang_watch.h); after the group it watches in the
  // destruction order's reverse: reset before it.
  std::unique_ptr<HangWatch> hang_watch_;
  void start_hang_watch();
  AgentView observed() const;
};

}  // namespace cohort::launch

// Agent: the node agent's decisions, as a pure state machine.
//
// Events come in (rendezvous done, a worker exited or hung, the attempt's outcome was decided in
// the store, a signal, the stop grace period ended, a fatal error such as a lost store, the steps
// of the ending: failures collected, the exit barrier passed, the abort landed, a deadline);
// actions come out (rendezvous, start workers, stop or kill them, publish a failure or a success,
// finish, report, pass the exit barrier, shut down). The NodeAgent turns pidfds, pipes, signals,
// timers and store replies into events and carries the actions out; tests drive the machine
// directly. No clock, no I/O: times arrive inside events. It is the launcher's only state
// machine: every way a job ends goes through Finish and ends in ShutDown.
//
// Policy (torchrun's, made job-wide): the first failure anywhere stops every worker of the round on
// every node; the round's outcome is decided once in the store, with the job's restart count; the
// job starts a new round while that count stays within --max-restarts, all nodes together, else it
// fails with the root cause. A membership change (a node waiting to join) starts a new round
// without spending a restart. A signal stops the local workers with that signal and aborts the job
// everywhere. Rounds are numbered by the rendezvous, not by the agent: a late node joins whatever
// round is current.
//
// How a job ends on this node, once its last round is decided (Finish):
//   - stopped here (a signal, a fatal error): Report what this node knows at once; then, if an
//     abort is still on its way to the store, wait up to abort_grace for it (phase kLeaving);
//     then ShutDown;
//   - otherwise, when the job failed and failures are known: CollectFailures from every node
//     (phase kCollectingFailures), Report them all; a job that failed without any: Report that;
//   - then the ExitBarrier (phase kExitBarrier): count out, and wait for the other nodes (the node
//     hosting the store keeps it up until every node has read the outcome), at most
//     exit_barrier_timeout plus a margin; then ShutDown (phase kDone).
// A stop signal during any of these ends them at once: ShutDown.
//
// Thread safety: none; used from the launcher's loop thread.
#pragma once

#include <chrono>
#include <optional>
#include <variant>
#include <vector>

#include "failure/failure.h"
#include "rdzv/round_types.h"

namespace cohort::launch {

namespace action {
// Join the first round after `after_round` (-1: the first round of the job).
struct Rendezvous {
  int after_round = -1;
};
struct StartWorkers {
  RankAssignment assignment;
  std::optional<Outcome> previous;  // how the round before ended (why this is a restart)
};
// Send `signal` to every running worker's process group; KillWorkers follows after `grace`
// unless they are all gone by then (the Launcher arms the timer and reports StopDeadline).
struct StopWorkers {
  int signal = 0;
  std::chrono::milliseconds grace{0};
};
struct KillWorkers {};
// Publish this node's failures of the round and try to decide its outcome as failed, with the
// job's restart count one higher than `restart_count`.
struct PublishFailure {
  int round = 0;
  int restart_count = 0;
  std::vector<WorkerFailure> failures;
};
// Count this node as done; the last node decides the outcome as succeeded.
struct PublishSuccess {
  int round = 0;
};
// Decide the outcome as aborted (a signal on this node).
struct PublishAbort {
  int round = 0;
  std::string detail;
};
// The job is over on this node: exit with `exit_code` once the ending below is done (log it, stop
// keeping alive; what follows is CollectFailures or Report, then AwaitAbort or ExitBarrier, then
// ShutDown).
struct Finish {
  int exit_code = 0;
  bool failed = false;
  std::optional<Outcome> outcome;             // the deciding outcome, when one is known
  std::vector<WorkerFailure> local_failures;  // of the last round
  std::string reason;  // why this node stopped when no failure says it (a signal, a lost store)
  int signal = 0;      // the signal that stopped the job, or 0
};
// Read every node's failure records of `round` for the summary (on_failures_collected).
struct CollectFailures {
  int round = 0;
};
// Print the failure summary of a failed job: `failures` (every node's, or this node's), or, when
// there are none, why the job was stopped.
struct Report {
  Finish finish;
  std::vector<WorkerFailure> failures;
};
// Count this node out of `round` and wait for the other nodes (on_exit_barrier_done), or until
// `deadline` (on_finish_deadline).
struct ExitBarrier {
  int round = 0;
  std::chrono::milliseconds deadline{0};
};
// An abort is on its way to the store: wait for it (on_abort_published), or until `grace`
// (on_finish_deadline).
struct AwaitAbort {
  std::chrono::milliseconds grace{0};
};
// The ending is done: tear the node down. Always the last action the Agent gives.
struct ShutDown {};
}  // namespace action

// Every member of every action has a default, and actions are emplaced into their vectors, never
// pushed as a temporary Action: GCC 12 and later (at -O2 and above) inline a temporary variant's
// move into the vector and warn (-Wmaybe-uninitialized) that the members of the alternatives it
// does not hold are read (the members of RankAssignment, Outcome, WorkerFailure). A variant built
// in place in the vector's storage is never moved from a half-built local.
using Action =
    std::variant<action::Rendezvous, action::StartWorkers, action::StopWorkers, action::KillWorkers,
                 action::PublishFailure, action::PublishSuccess, action::PublishAbort,
                 action::Finish, action::CollectFailures, action::Report, action::ExitBarrier,
                 action::AwaitAbort, action::ShutDown>;

struct AgentOptions {
  int max_restarts = 0;
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
  // --exit-barrier-timeout: how long the other nodes get to count out; the barrier's deadline is
  // this plus kExitBarrierMargin.
  std::chrono::milliseconds exit_barrier_timeout{std::chrono::seconds(300)};
  // How long a node stopped here waits for its abort to reach the store before it leaves.
  std::chrono::milliseconds abort_grace{800};
};

class Agent {
 public:
  enum class Phase {
    kIdle,
    kRendezvous,
    kRunning,
    kAwaitingOutcome,
    kStopping,
    // The ending (see the file comment):
    kCollectingFailures,
    kLeaving,
    kExitBarrier,
    kDone,
  };
  // The exit barrier's deadline is exit_barrier_timeout plus this: the barrier's own store call
  // times out first, and says so.
  static constexpr std::chrono::milliseconds kExitBarrierMargin{5000};

  explicit Agent(AgentOptions options);

  std::vector<Action> start();
  std::vector<Action> on_rendezvous_done(const RankAssignment& assignment);
  // A worker exited. `failure` describes it when it failed (non-zero code or a signal) and the
  // Launcher could fill in host, pid, time and error file; nullopt for exit code 0.
  std::vector<Action> on_worker_exited(int local_rank, std::optional<WorkerFailure> failure);
  // A worker stopped beating; `failure` carries the "hung" reason. The worker still runs.
  std::vector<Action> on_worker_hung(int local_rank, WorkerFailure failure);
  // The job is hung, judged from every rank's answers to a hang probe (observe/hang_watch.h):
  // `root_cause` is the culprit's failure, possibly a worker of another node. As a local failure:
  // published, and the workers stopped.
  std::vector<Action> on_group_hung(WorkerFailure root_cause);
  // Worker `local_rank` is wedged in the kernel (uninterruptible sleep): a failure that ends
  // the job on every node without a restart.
  std::vector<Action> on_worker_wedged(int local_rank, WorkerFailure failure);
  // The outcome of `round` was decided (ignored unless it is the current round).
  std::vector<Action> on_outcome(int round, const Outcome& outcome);
  std::vector<Action> on_signal(int sig);
  std::vector<Action> on_stop_deadline();
  // Workers still running this long after SIGKILL cannot be killed (uninterruptible sleep in a
  // driver or file system): they are given up on, so that the agent can finish.
  std::vector<Action> on_kill_deadline();
  // This node cannot go on (the store is lost for good, the rendezvous failed, an internal
  // error): stop the local workers, tell the others, and end the job here with exit code 1.
  // Ignored once the job is ending.
  std::vector<Action> on_fatal(std::string reason);
  // The ending's steps (see the file comment). `failures`: every node's failure records, or
  // nullopt when they could not be read (the summary then has this node's).
  std::vector<Action> on_failures_collected(std::optional<std::vector<WorkerFailure>> failures);
  std::vector<Action> on_abort_published();
  std::vector<Action> on_exit_barrier_done();
  std::vector<Action> on_finish_deadline();

  Phase phase() const { return phase_; }
  // Finish was given: the job is over on this node and only its ending remains.
  bool ending() const { return phase_ >= Phase::kCollectingFailures; }
  int round() const { return round_; }
  int restart_count() const { return restart_count_; }

 private:
  enum class StopReason { kNone, kLocalFailure, kRemote, kSignal, kFatal };
  enum class WorkerState { kRunning, kSucceeded, kFailed, kGone };

  void begin_stop(StopReason reason, int sig, std::vector<Action>* out);
  bool all_workers_gone() const;
  // True when `f` is how a worker ends when this agent stops it.
  bool is_stop_consequence(const WorkerFailure& f) const;
  // Moves on once the workers are gone and the outcome is known.
  void advance(std::vector<Action>* out);
  void finish(int code, bool failed, std::vector<Action>* out, std::string reason = {});
  void report(std::vector<WorkerFailure> failures, std::vector<Action>* out);
  void exit_barrier(std::vector<Action>* out);
  void shut_down(std::vector<Action>* out);

  AgentOptions options_;
  Phase phase_ = Phase::kIdle;
  int round_ = -1;
  int restart_count_ = 0;
  std::vector<WorkerState> workers_;
  std::vector<WorkerFailure> failures_;  // this node, this round
  std::optional<Outcome> outcome_;       // of this round
  StopReason stop_reason_ = StopReason::kNone;
  int signal_ = 0;
  int stop_signal_ = 0;  // the signal the current stop sent
  std::string fatal_reason_;
  bool abort_pending_ = false;  // a PublishAbort has not been answered yet
  action::Finish finish_{};     // once ending()
};

// The phase as status records, metrics and cohortctl name it: "starting", "rendezvous",
// "running", "finishing" (the workers succeeded; the outcome is pending), "stopping", and "done"
// once the job is over on this node (its ending's steps included).
const char* phase_name(Agent::Phase phase);

}  // namespace cohort::launch

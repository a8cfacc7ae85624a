// Agent: the node agent's decisions, as a pure state machine.
//
// Events come in (rendezvous done, a worker exited or hung, the attempt's outcome was decided in
// the store, a signal, the stop grace period ended, a fatal error such as a lost store); actions
// come out (rendezvous, start workers, stop or kill them, publish a failure or a success, finish).
// The Launcher turns pidfds, pipes, signals, timers and store replies into events and carries the
// actions out; tests drive the machine directly. No clock, no I/O: times arrive inside events.
// It is the launcher's only state machine: every way a job ends goes through Finish, which prints
// the summary.
//
// Policy (torchrun's, made job-wide): the first failure anywhere stops every worker of the round on
// every node; the round's outcome is decided once in the store, with the job's restart count; the
// job starts a new round while that count stays within --max-restarts, all nodes together, else it
// fails with the root cause. A membership change (a node waiting to join) starts a new round
// without spending a restart. A signal stops the local workers with that signal and aborts the job
// everywhere. Rounds are numbered by the rendezvous, not by the agent: a late node joins whatever
// round is current.
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
// The job is over on this node: print the summary when failed, then exit with `exit_code`.
struct Finish {
  int exit_code = 0;
  bool failed = false;
  std::optional<Outcome> outcome;             // the deciding outcome, when one is known
  std::vector<WorkerFailure> local_failures;  // of the last round
  std::string reason;  // why this node stopped when no failure says it (a signal, a lost store)
  int signal = 0;      // the signal that stopped the job, or 0
};
}  // namespace action

// Every member of every action has a default, and actions are emplaced into their vectors, never
// pushed as a temporary Action: GCC 12 and later (at -O2 and above) inline a temporary variant's
// move into the vector and warn (-Wmaybe-uninitialized) that the members of the alternatives it
// does not hold are read (the members of RankAssignment, Outcome, WorkerFailure). A variant built
// in place in the vector's storage is never moved from a half-built local.
using Action = std::variant<action::Rendezvous, action::StartWorkers, action::StopWorkers,
                            action::KillWorkers, action::PublishFailure, action::PublishSuccess,
                            action::PublishAbort, action::Finish>;

struct AgentOptions {
  int max_restarts = 0;
  std::chrono::milliseconds term_timeout{std::chrono::seconds(30)};
};

class Agent {
 public:
  enum class Phase { kIdle, kRendezvous, kRunning, kAwaitingOutcome, kStopping, kDone };

  explicit Agent(AgentOptions options);

  std::vector<Action> start();
  std::vector<Action> on_rendezvous_done(const RankAssignment& assignment);
  // A worker exited. `failure` describes it when it failed (non-zero code or a signal) and the
  // Launcher could fill in host, pid, time and error file; nullopt for exit code 0.
  std::vector<Action> on_worker_exited(int local_rank, std::optional<WorkerFailure> failure);
  // A worker stopped beating; `failure` carries the "hung" reason. The worker still runs.
  std::vector<Action> on_worker_hung(int local_rank, WorkerFailure failure);
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
  std::vector<Action> on_fatal(std::string reason);

  Phase phase() const { return phase_; }
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
};

}  // namespace cohort::launch

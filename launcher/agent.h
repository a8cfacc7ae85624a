// Agent: the node agent's decisions, as a pure state machine.
//
// Events come in (rendezvous done, a worker exited or hung, the attempt's outcome was decided in
// the store, a signal, the stop grace period ended); actions come out (rendezvous, start workers,
// stop or kill them, publish a failure or a success, finish). The Launcher turns pidfds, pipes,
// signals, timers and store replies into events and carries the actions out; tests drive the
// machine directly. No clock, no I/O: times arrive inside events.
//
// Policy (torchrun's, made job-wide): the first failure anywhere stops every worker of the attempt
// on every node; the attempt's outcome is decided once in the store; the job restarts while
// attempt < max_restarts, all nodes together, else it fails with the root cause. A signal stops
// the local workers with that signal and aborts the job everywhere.
//
// Thread safety: none; used from the launcher's loop thread.
#pragma once

#include <chrono>
#include <optional>
#include <variant>
#include <vector>

#include "failure.h"
#include "static_rendezvous.h"

namespace cohort::launch {

namespace action {
struct Rendezvous {
  int attempt;
};
struct StartWorkers {
  RankAssignment assignment;
};
// Send `signal` to every running worker's process group; KillWorkers follows after `grace`
// unless they are all gone by then (the Launcher arms the timer and reports StopDeadline).
struct StopWorkers {
  int signal;
  std::chrono::milliseconds grace;
};
struct KillWorkers {};
// Publish this node's failures of the attempt and try to decide the outcome as failed.
struct PublishFailure {
  int attempt;
  std::vector<WorkerFailure> failures;
};
// Count this node as done; the last node decides the outcome as succeeded.
struct PublishSuccess {
  int attempt;
};
// Decide the outcome as aborted (a signal on this node).
struct PublishAbort {
  int attempt;
  std::string detail;
};
// The job is over on this node: print the summary when failed, then exit with `exit_code`.
struct Finish {
  int exit_code;
  bool failed;
  std::optional<Outcome> outcome;              // the deciding outcome, when one is known
  std::vector<WorkerFailure> local_failures;  // of the last attempt
};
}  // namespace action

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
  std::vector<Action> on_outcome(int attempt, const Outcome& outcome);
  std::vector<Action> on_signal(int sig);
  std::vector<Action> on_stop_deadline();

  Phase phase() const { return phase_; }
  int attempt() const { return attempt_; }

 private:
  enum class StopReason { kNone, kLocalFailure, kRemote, kSignal };
  enum class WorkerState { kRunning, kSucceeded, kFailed, kGone };

  void begin_stop(StopReason reason, int sig, std::vector<Action>* out);
  bool all_workers_gone() const;
  // Moves on once the workers are gone and the outcome is known.
  void advance(std::vector<Action>* out);
  void finish(int code, bool failed, std::vector<Action>* out);

  AgentOptions options_;
  Phase phase_ = Phase::kIdle;
  int attempt_ = 0;
  std::vector<WorkerState> workers_;
  std::vector<WorkerFailure> failures_;  // this node, this attempt
  std::optional<Outcome> outcome_;       // of this attempt
  StopReason stop_reason_ = StopReason::kNone;
  int signal_ = 0;
  bool published_failure_ = false;
};

}  // namespace cohort::launch

#include "agent/agent.h"

#include <algorithm>
#include <csignal>

namespace cohort::launch {

Agent::Agent(AgentOptions options) : options_(options) {}

std::vector<Action> Agent::start() {
  phase_ = Phase::kRendezvous;
  return {action::Rendezvous{round_}};
}

std::vector<Action> Agent::on_rendezvous_done(const RankAssignment& assignment) {
  std::vector<Action> out;
  if (phase_ != Phase::kRendezvous || assignment.round <= round_) return out;
  std::optional<Outcome> previous = outcome_;
  round_ = assignment.round;
  restart_count_ = assignment.restart_count;
  workers_.assign(static_cast<size_t>(assignment.local_world_size), WorkerState::kRunning);
  failures_.clear();
  outcome_.reset();
  stop_reason_ = StopReason::kNone;
  phase_ = Phase::kRunning;
  out.emplace_back(action::StartWorkers{assignment, std::move(previous)});
  return out;
}

bool Agent::is_stop_consequence(const WorkerFailure& f) const {
  // Killed by a signal this agent sends to stop workers, or a shell's 128+N for one.
  for (int sig : {SIGTERM, SIGKILL, stop_signal_}) {
    if (sig == 0) continue;
    if (f.exit_code == -sig || f.exit_code == 128 + sig) return true;
  }
  return false;
}

bool Agent::all_workers_gone() const {
  return std::none_of(workers_.begin(), workers_.end(),
                      [](WorkerState s) { return s == WorkerState::kRunning; });
}

void Agent::begin_stop(StopReason reason, int sig, std::vector<Action>* out) {
  phase_ = Phase::kStopping;
  stop_signal_ = sig;
  stop_reason_ = reason;
  if (!all_workers_gone()) out->emplace_back(action::StopWorkers{sig, options_.term_timeout});
}

std::vector<Action> Agent::on_worker_exited(int local_rank, std::optional<WorkerFailure> failure) {
  std::vector<Action> out;
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return out;
  WorkerState& w = workers_[static_cast<size_t>(local_rank)];
  if (w != WorkerState::kRunning) return out;
  switch (phase_) {
    case Phase::kRunning:
      if (!failure) {
        w = WorkerState::kSucceeded;
        if (all_workers_gone()) {
          phase_ = Phase::kAwaitingOutcome;
          out.emplace_back(action::PublishSuccess{round_});
          advance(&out);  // the outcome may already be known
        }
        return out;
      }
      w = WorkerState::kFailed;
      failures_.push_back(*failure);
      out.emplace_back(action::PublishFailure{round_, restart_count_, failures_});
      begin_stop(StopReason::kLocalFailure, SIGTERM, &out);
      advance(&out);
      return out;
    case Phase::kStopping:
      // An exit after the stop decision is usually its consequence (the stop signal, SIGKILL),
      // but a worker that failed on its own meanwhile (every rank raising at once) is a failure
      // too: it joins the report.
      w = WorkerState::kGone;
      if (failure && !is_stop_consequence(*failure) && stop_reason_ != StopReason::kSignal) {
        failures_.push_back(*failure);
        out.emplace_back(action::PublishFailure{round_, restart_count_, failures_});
      }
      advance(&out);
      return out;
    default:
      w = WorkerState::kGone;
      return out;
  }
}

std::vector<Action> Agent::on_worker_hung(int local_rank, WorkerFailure failure) {
  std::vector<Action> out;
  if (phase_ != Phase::kRunning) return out;
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return out;
  if (workers_[static_cast<size_t>(local_rank)] != WorkerState::kRunning) return out;
  failures_.push_back(std::move(failure));
  out.emplace_back(action::PublishFailure{round_, restart_count_, failures_});
  begin_stop(StopReason::kLocalFailure, SIGTERM, &out);
  return out;
}

std::vector<Action> Agent::on_group_hung(WorkerFailure root_cause) {
  std::vector<Action> out;
  if (phase_ != Phase::kRunning) return out;
  failures_.push_back(std::move(root_cause));
  out.push_back(action::PublishFailure{round_, restart_count_, failures_});
  begin_stop(StopReason::kLocalFailure, SIGTERM, &out);
  return out;
}

std::vector<Action> Agent::on_worker_wedged(int local_rank, WorkerFailure failure) {
  std::vector<Action> out;
  if (phase_ != Phase::kRunning) return out;
  if (local_rank < 0 || static_cast<size_t>(local_rank) >= workers_.size()) return out;
  if (workers_[static_cast<size_t>(local_rank)] != WorkerState::kRunning) return out;
  const std::string reason = "rank " + std::to_string(failure.global_rank) + " " + failure.reason;
  failures_.push_back(std::move(failure));
  out.emplace_back(action::PublishFailure{round_, restart_count_, failures_});
  // As a fatal error: every node stops, nobody restarts.
  for (Action& a : on_fatal(reason)) out.push_back(std::move(a));
  return out;
}

std::vector<Action> Agent::on_outcome(int round, const Outcome& outcome) {
  std::vector<Action> out;
  if (round != round_ || outcome_) return out;
  outcome_ = outcome;
  switch (phase_) {
    case Phase::kRunning:
      if (outcome.kind != Outcome::kSucceeded) begin_stop(StopReason::kRemote, SIGTERM, &out);
      // A success decided while our workers still run cannot happen: we have not counted.
      break;
    case Phase::kRendezvous:
      // The job was aborted elsewhere before our workers started.
      if (outcome.kind == Outcome::kAborted) finish(1, true, &out, outcome.detail);
      return out;
    default:
      break;
  }
  advance(&out);
  return out;
}

std::vector<Action> Agent::on_signal(int sig) {
  std::vector<Action> out;
  if (phase_ == Phase::kDone) return out;
  if (ending()) {
    // Only the summary, the barrier or the abort's grace remain: leave now.
    shut_down(&out);
    return out;
  }
  if (signal_ != 0) {
    // A second signal while stopping: no more grace.
    if (phase_ == Phase::kStopping) out.emplace_back(action::KillWorkers{});
    return out;
  }
  signal_ = sig;
  abort_pending_ = true;
  out.emplace_back(action::PublishAbort{round_, signal_name(sig) + " received"});
  switch (phase_) {
    case Phase::kRunning:
      begin_stop(StopReason::kSignal, sig, &out);
      advance(&out);
      break;
    case Phase::kStopping:
      stop_reason_ = StopReason::kSignal;
      advance(&out);
      break;
    default:
      finish(128 + sig, true, &out, signal_name(sig) + " received");
      break;
  }
  return out;
}

std::vector<Action> Agent::on_fatal(std::string reason) {
  std::vector<Action> out;
  if (ending() || !fatal_reason_.empty()) return out;
  fatal_reason_ = std::move(reason);
  abort_pending_ = true;
  out.emplace_back(action::PublishAbort{round_, fatal_reason_});
  if (phase_ == Phase::kRunning || phase_ == Phase::kStopping) {
    if (phase_ == Phase::kRunning) begin_stop(StopReason::kFatal, SIGTERM, &out);
    if (stop_reason_ != StopReason::kSignal) stop_reason_ = StopReason::kFatal;
    advance(&out);
    return out;
  }
  finish(1, true, &out, fatal_reason_);
  return out;
}

std::vector<Action> Agent::on_stop_deadline() {
  std::vector<Action> out;
  if (phase_ == Phase::kStopping && !all_workers_gone()) out.emplace_back(action::KillWorkers{});
  return out;
}

std::vector<Action> Agent::on_kill_deadline() {
  std::vector<Action> out;
  if (phase_ != Phase::kStopping) return out;
  for (WorkerState& w : workers_) {
    if (w == WorkerState::kRunning) w = WorkerState::kGone;
  }
  advance(&out);
  return out;
}

void Agent::finish(int code, bool failed, std::vector<Action>* out, std::string reason) {
  finish_ = action::Finish{code, failed, outcome_, failures_, std::move(reason), signal_};
  out->emplace_back(finish_);
  if (finish_.signal != 0 || !finish_.reason.empty()) {
    // Stopped here (a signal, a lost store): the store may be unreachable or busy with a call
    // that will not return; say what is known and go, after a moment for the abort to land.
    report(finish_.local_failures, out);
    if (!abort_pending_) {
      shut_down(out);
      return;
    }
    phase_ = Phase::kLeaving;
    out->emplace_back(action::AwaitAbort{options_.abort_grace});
    return;
  }
  // Every node's failures make the summary, unless the job was aborted (the abort says why) or
  // nothing failed anywhere that a record would show.
  const bool consult = failed && !(outcome_ && outcome_->kind == Outcome::kAborted) &&
                       (outcome_ || !failures_.empty());
  if (consult) {
    phase_ = Phase::kCollectingFailures;
    out->emplace_back(action::CollectFailures{round_});
    return;
  }
  if (failed) report({}, out);
  exit_barrier(out);
}

void Agent::report(std::vector<WorkerFailure> failures, std::vector<Action>* out) {
  out->emplace_back(action::Report{finish_, std::move(failures)});
}

void Agent::exit_barrier(std::vector<Action>* out) {
  phase_ = Phase::kExitBarrier;
  out->emplace_back(
      action::ExitBarrier{round_, options_.exit_barrier_timeout + kExitBarrierMargin});
}

void Agent::shut_down(std::vector<Action>* out) {
  phase_ = Phase::kDone;
  out->emplace_back(action::ShutDown{});
}

std::vector<Action> Agent::on_failures_collected(
    std::optional<std::vector<WorkerFailure>> failures) {
  std::vector<Action> out;
  if (phase_ != Phase::kCollectingFailures) return out;
  report(failures && !failures->empty() ? std::move(*failures) : finish_.local_failures, &out);
  exit_barrier(&out);
  return out;
}

std::vector<Action> Agent::on_abort_published() {
  std::vector<Action> out;
  abort_pending_ = false;
  if (phase_ == Phase::kLeaving) shut_down(&out);
  return out;
}

std::vector<Action> Agent::on_exit_barrier_done() {
  std::vector<Action> out;
  if (phase_ == Phase::kExitBarrier) shut_down(&out);
  return out;
}

std::vector<Action> Agent::on_finish_deadline() {
  std::vector<Action> out;
  if (phase_ == Phase::kExitBarrier || phase_ == Phase::kLeaving) shut_down(&out);
  return out;
}

void Agent::advance(std::vector<Action>* out) {
  if (phase_ == Phase::kStopping) {
    if (!all_workers_gone()) return;
    if (stop_reason_ == StopReason::kSignal) {
      finish(128 + signal_, true, out, signal_name(signal_) + " received");
      return;
    }
    if (stop_reason_ == StopReason::kFatal) {
      finish(1, true, out, fatal_reason_);
      return;
    }
    if (!outcome_) return;  // our failure report is on its way to the store
  } else if (phase_ == Phase::kAwaitingOutcome) {
    if (!outcome_) return;
    if (outcome_->kind == Outcome::kSucceeded) {
      finish(0, false, out);
      return;
    }
  } else {
    return;
  }
  // The round failed (here or elsewhere), changes membership, or was aborted elsewhere.
  bool again = outcome_->kind == Outcome::kRescale ||
               (outcome_->kind == Outcome::kFailed && outcome_->restarts <= options_.max_restarts);
  if (again) {
    phase_ = Phase::kRendezvous;
    out->emplace_back(action::Rendezvous{round_});
    return;
  }
  finish(1, true, out);
}

const char* phase_name(Agent::Phase phase) {
  switch (phase) {
    case Agent::Phase::kIdle:
      return "starting";
    case Agent::Phase::kRendezvous:
      return "rendezvous";
    case Agent::Phase::kRunning:
      return "running";
    case Agent::Phase::kAwaitingOutcome:
      return "finishing";
    case Agent::Phase::kStopping:
      return "stopping";
    case Agent::Phase::kCollectingFailures:
    case Agent::Phase::kLeaving:
    case Agent::Phase::kExitBarrier:
    case Agent::Phase::kDone:
      return "done";
  }
  return "unknown";
}

}  // namespace cohort::launch

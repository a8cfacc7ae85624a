// The agent's decisions, driven event by event without processes.
#include "agent/agent.h"

#include <gtest/gtest.h>

#include <csignal>
#include <optional>

namespace cohort::launch {
namespace {

// A copy of the first action of type T (a copy: callers often pass temporaries).
template <typename T>
std::optional<T> find(const std::vector<Action>& actions) {
  for (const auto& a : actions)
    if (auto* p = std::get_if<T>(&a)) return *p;
  return std::nullopt;
}

RankAssignment assignment(int round, int nproc = 2, int restarts = -1) {
  RankAssignment a;
  a.round = round;
  a.restart_count = restarts < 0 ? round : restarts;
  a.local_world_size = nproc;
  a.world_size = nproc;
  return a;
}

WorkerFailure failure(int local_rank, int code) {
  WorkerFailure f;
  f.local_rank = local_rank;
  f.global_rank = local_rank;
  f.exit_code = code;
  f.reason = "exited with code " + std::to_string(code);
  return f;
}

Outcome outcome(Outcome::Kind kind, int node = 0) {
  Outcome o;
  o.kind = kind;
  o.node_rank = node;
  return o;
}

TEST(Agent, SuccessPublishesThenFinishesOnTheOutcome) {
  Agent agent({0, std::chrono::seconds(30)});
  ASSERT_TRUE(find<action::Rendezvous>(agent.start()));
  ASSERT_TRUE(find<action::StartWorkers>(agent.on_rendezvous_done(assignment(0))));
  EXPECT_TRUE(agent.on_worker_exited(0, std::nullopt).empty());
  auto acts = agent.on_worker_exited(1, std::nullopt);
  ASSERT_TRUE(find<action::PublishSuccess>(acts));
  EXPECT_FALSE(find<action::Finish>(acts));  // other nodes may still fail
  auto fin = find<action::Finish>(agent.on_outcome(0, outcome(Outcome::kSucceeded)));
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 0);
  EXPECT_FALSE(fin->failed);
}

TEST(Agent, RestartsExactlyMaxRestartsTimes) {
  const int kMaxRestarts = 3;
  Agent agent({kMaxRestarts, std::chrono::seconds(30)});
  agent.start();
  int rendezvous = 1;
  for (int attempt = 0;; ++attempt) {
    agent.on_rendezvous_done(assignment(attempt));
    auto acts = agent.on_worker_exited(1, failure(1, 3));
    auto stop = find<action::StopWorkers>(acts);
    ASSERT_TRUE(stop);
    EXPECT_EQ(stop->signal, SIGTERM);
    auto pub = find<action::PublishFailure>(acts);
    ASSERT_TRUE(pub);
    EXPECT_EQ(pub->round, attempt);
    EXPECT_EQ(pub->restart_count, attempt);
    EXPECT_TRUE(agent.on_worker_exited(0, failure(0, -15)).empty());  // waits for the outcome
    Outcome o = outcome(Outcome::kFailed);
    o.restarts = attempt + 1;  // what the publisher computes
    o.first_failure = failure(1, 3);
    acts = agent.on_outcome(attempt, o);
    if (auto r = find<action::Rendezvous>(acts)) {
      EXPECT_EQ(r->after_round, attempt);
      ++rendezvous;
      continue;
    }
    auto fin = find<action::Finish>(acts);
    ASSERT_TRUE(fin);
    EXPECT_EQ(fin->exit_code, 1);
    EXPECT_TRUE(fin->failed);
    ASSERT_EQ(fin->local_failures.size(), 1u);
    EXPECT_EQ(fin->local_failures[0].exit_code, 3);
    EXPECT_EQ(attempt, kMaxRestarts);
    break;
  }
  EXPECT_EQ(rendezvous, kMaxRestarts + 1);
}

TEST(Agent, RemoteFailureStopsLocalWorkersWithoutCountingThemAsFailures) {
  Agent agent({1, std::chrono::seconds(30)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  Outcome o = outcome(Outcome::kFailed, 1);
  o.restarts = 1;
  auto acts = agent.on_outcome(0, o);
  ASSERT_TRUE(find<action::StopWorkers>(acts));
  EXPECT_FALSE(find<action::PublishFailure>(acts));
  agent.on_worker_exited(0, failure(0, -15));
  acts = agent.on_worker_exited(1, failure(1, -15));
  ASSERT_TRUE(find<action::Rendezvous>(acts));
  // The next round's restart count comes from the rendezvous, not from the agent.
  ASSERT_TRUE(find<action::StartWorkers>(agent.on_rendezvous_done(assignment(1, 2, 1))));
  EXPECT_EQ(agent.round(), 1);
  EXPECT_EQ(agent.restart_count(), 1);
}

TEST(Agent, RescaleStartsANewRoundWithoutSpendingARestart) {
  Agent agent({0, std::chrono::seconds(30)});  // no restarts allowed at all
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  Outcome o = outcome(Outcome::kRescale, 2);
  o.restarts = 0;
  ASSERT_TRUE(find<action::StopWorkers>(agent.on_outcome(0, o)));
  agent.on_worker_exited(0, failure(0, -15));
  auto r = find<action::Rendezvous>(agent.on_worker_exited(1, failure(1, -15)));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->after_round, 0);
  // A failure beyond the budget then ends the job.
  agent.on_rendezvous_done(assignment(1, 2, 0));
  agent.on_worker_exited(1, failure(1, 3));
  agent.on_worker_exited(0, failure(0, -15));
  Outcome f = outcome(Outcome::kFailed);
  f.restarts = 1;
  auto fin = find<action::Finish>(agent.on_outcome(1, f));
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 1);
}

TEST(Agent, StopGraceEndsInSigkill) {
  Agent agent({0, std::chrono::seconds(5)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  auto stop = find<action::StopWorkers>(agent.on_worker_exited(1, failure(1, 2)));
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->grace, std::chrono::seconds(5));
  EXPECT_TRUE(find<action::KillWorkers>(agent.on_stop_deadline()));
}

TEST(Agent, SignalStopsWithThatSignalAndExitsWith128PlusIt) {
  Agent agent({5, std::chrono::seconds(30)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  auto acts = agent.on_signal(SIGINT);
  ASSERT_TRUE(find<action::PublishAbort>(acts));
  auto stop = find<action::StopWorkers>(acts);
  ASSERT_TRUE(stop);
  EXPECT_EQ(stop->signal, SIGINT);
  // A second signal does not wait for the grace period.
  EXPECT_TRUE(find<action::KillWorkers>(agent.on_signal(SIGINT)));
  agent.on_worker_exited(0, failure(0, -2));
  auto fin = find<action::Finish>(agent.on_worker_exited(1, failure(1, -2)));
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 128 + SIGINT);
}

TEST(Agent, AbortDecidedElsewhereEndsTheJobWithoutRestart) {
  Agent agent({5, std::chrono::seconds(30)});
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  Outcome o = outcome(Outcome::kAborted, 1);
  o.detail = "SIGTERM received on node 1";
  agent.on_outcome(0, o);
  auto fin = find<action::Finish>(agent.on_worker_exited(0, failure(0, -15)));
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 1);
  ASSERT_TRUE(fin->outcome);
  EXPECT_EQ(fin->outcome->kind, Outcome::kAborted);
}

TEST(Agent, HungWorkerIsAFailure) {
  Agent agent({1, std::chrono::seconds(1)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  WorkerFailure f = failure(1, -9);
  f.reason = "hung: no heartbeat for 5 s";
  auto acts = agent.on_worker_hung(1, f);
  auto pub = find<action::PublishFailure>(acts);
  ASSERT_TRUE(pub);
  EXPECT_EQ(pub->failures[0].reason, "hung: no heartbeat for 5 s");
  ASSERT_TRUE(find<action::StopWorkers>(acts));
}

TEST(Agent, AGroupJudgedHungIsAFailureWhoeverTheCulpritIs) {
  Agent agent({0, std::chrono::seconds(1)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  WorkerFailure f = failure(1, -9);
  f.node_rank = 1;  // another node's worker
  f.global_rank = 3;
  f.reason = "hung: never entered all_reduce ...";
  f.waiting = {"rank 0 (n0, pid 1): waits in all_reduce ..."};
  auto acts = agent.on_group_hung(f);
  auto pub = find<action::PublishFailure>(acts);
  ASSERT_TRUE(pub);
  ASSERT_EQ(pub->failures.size(), 1u);
  EXPECT_EQ(pub->failures[0].global_rank, 3);
  EXPECT_EQ(pub->failures[0].waiting, f.waiting);
  ASSERT_TRUE(find<action::StopWorkers>(acts));
  // Once the workers are being stopped, a second verdict changes nothing.
  EXPECT_TRUE(agent.on_group_hung(f).empty());
}

TEST(Agent, WedgedWorkerEndsTheJobWithoutARestartEvenWithRestartsLeft) {
  Agent agent({5, std::chrono::seconds(1)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  WorkerFailure f = failure(1, -9);
  f.reason = "stuck in uninterruptible sleep (D state) for 2 s";
  auto acts = agent.on_worker_wedged(1, f);
  ASSERT_TRUE(find<action::PublishFailure>(acts));
  auto abort = find<action::PublishAbort>(acts);
  ASSERT_TRUE(abort);  // every node stops; nobody restarts
  EXPECT_NE(abort->detail.find("rank 1 stuck in uninterruptible sleep"), std::string::npos);
  ASSERT_TRUE(find<action::StopWorkers>(acts));
  agent.on_worker_exited(0, failure(0, -15));
  // The wedged one ignores SIGKILL: it is given up on at the kill deadline, and the job ends.
  EXPECT_TRUE(find<action::KillWorkers>(agent.on_stop_deadline()));
  auto fin = find<action::Finish>(agent.on_kill_deadline());
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 1);
  EXPECT_FALSE(find<action::Rendezvous>(agent.on_kill_deadline()));
}

TEST(Agent, StaleOutcomesAndUnknownWorkersAreIgnored) {
  Agent agent({2, std::chrono::seconds(1)});
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  EXPECT_TRUE(agent.on_outcome(7, outcome(Outcome::kFailed)).empty());
  EXPECT_TRUE(agent.on_worker_exited(9, failure(9, 1)).empty());
  EXPECT_TRUE(agent.on_rendezvous_done(assignment(0)).empty());  // not a new round
}

// ---- how a job ends on this node (the Agent's file comment) -------------------------------------

// The kinds of `actions`, in order, for comparing whole sequences.
std::vector<size_t> kinds(const std::vector<Action>& actions) {
  std::vector<size_t> k;
  for (const auto& a : actions) k.push_back(a.index());
  return k;
}
template <typename... T>
std::vector<size_t> kinds_of() {
  return {Action(T{}).index()...};
}

// The round failed, with no restart left for a job of ending_options().
Outcome failed_for_good() {
  Outcome o = outcome(Outcome::kFailed);
  o.restarts = 1;
  return o;
}

AgentOptions ending_options(int max_restarts = 0) {
  AgentOptions o;
  o.max_restarts = max_restarts;
  o.term_timeout = std::chrono::seconds(1);
  o.exit_barrier_timeout = std::chrono::seconds(40);
  o.abort_grace = std::chrono::milliseconds(800);
  return o;
}

TEST(AgentEnding, ASuccessPassesTheExitBarrierThenShutsDown) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_worker_exited(0, std::nullopt);
  auto acts = agent.on_outcome(0, outcome(Outcome::kSucceeded));
  EXPECT_EQ(kinds(acts), (kinds_of<action::Finish, action::ExitBarrier>()));
  auto barrier = find<action::ExitBarrier>(acts);
  EXPECT_EQ(barrier->round, 0);
  EXPECT_EQ(barrier->deadline, std::chrono::seconds(40) + Agent::kExitBarrierMargin);
  EXPECT_EQ(agent.phase(), Agent::Phase::kExitBarrier);
  EXPECT_TRUE(agent.ending());
  // Late events of the finished round change nothing.
  EXPECT_TRUE(agent.on_fatal("lost the store").empty());
  EXPECT_TRUE(agent.on_failures_collected(std::nullopt).empty());
  EXPECT_TRUE(agent.on_abort_published().empty());
  EXPECT_EQ(kinds(agent.on_exit_barrier_done()), kinds_of<action::ShutDown>());
  EXPECT_EQ(agent.phase(), Agent::Phase::kDone);
  EXPECT_TRUE(agent.on_finish_deadline().empty());
  EXPECT_TRUE(agent.on_signal(SIGTERM).empty());
}

TEST(AgentEnding, AnExitBarrierThatNeverCompletesEndsAtItsDeadline) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_worker_exited(0, std::nullopt);
  agent.on_outcome(0, outcome(Outcome::kSucceeded));
  EXPECT_EQ(kinds(agent.on_finish_deadline()), kinds_of<action::ShutDown>());
  EXPECT_TRUE(agent.on_exit_barrier_done().empty());  // too late: already done
}

TEST(AgentEnding, AFailedJobCollectsEveryNodesFailuresReportsThemThenPassesTheBarrier) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0));
  auto acts = agent.on_worker_exited(1, failure(1, 3));
  agent.on_worker_exited(0, failure(0, -15));  // stopped by the agent
  acts = agent.on_outcome(0, failed_for_good());
  auto fin = find<action::Finish>(acts);
  ASSERT_TRUE(fin);
  EXPECT_EQ(fin->exit_code, 1);
  ASSERT_EQ(fin->local_failures.size(), 1u);
  EXPECT_EQ(kinds(acts), (kinds_of<action::Finish, action::CollectFailures>()));
  EXPECT_EQ(agent.phase(), Agent::Phase::kCollectingFailures);

  WorkerFailure remote = failure(0, 7);
  remote.global_rank = 5;
  std::vector<WorkerFailure> all{fin->local_failures[0], remote};
  acts = agent.on_failures_collected(all);
  EXPECT_EQ(kinds(acts), (kinds_of<action::Report, action::ExitBarrier>()));
  auto report = find<action::Report>(acts);
  ASSERT_EQ(report->failures.size(), 2u);
  EXPECT_EQ(report->failures[1].global_rank, 5);
  EXPECT_EQ(report->finish.exit_code, 1);
  EXPECT_EQ(kinds(agent.on_exit_barrier_done()), kinds_of<action::ShutDown>());
}

TEST(AgentEnding, FailuresThatCannotBeCollectedAreReportedFromThisNode) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_worker_exited(0, failure(0, 2));
  auto acts = agent.on_outcome(0, failed_for_good());
  ASSERT_TRUE(find<action::CollectFailures>(acts));
  for (auto collected : {std::optional<std::vector<WorkerFailure>>(),
                         std::optional<std::vector<WorkerFailure>>(std::vector<WorkerFailure>{})}) {
    Agent again(ending_options());
    again.start();
    again.on_rendezvous_done(assignment(0, 1));
    again.on_worker_exited(0, failure(0, 2));
    again.on_outcome(0, failed_for_good());
    auto report = find<action::Report>(again.on_failures_collected(collected));
    ASSERT_TRUE(report);
    ASSERT_EQ(report->failures.size(), 1u);
    EXPECT_EQ(report->failures[0].exit_code, 2);
  }
}

TEST(AgentEnding, AJobAbortedElsewhereReportsWithoutCollectingAndPassesTheBarrier) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  Outcome aborted = outcome(Outcome::kAborted, 1);
  aborted.detail = "SIGTERM received";
  agent.on_outcome(0, aborted);
  auto acts = agent.on_worker_exited(0, failure(0, -15));
  EXPECT_EQ(kinds(acts), (kinds_of<action::Finish, action::Report, action::ExitBarrier>()));
  EXPECT_TRUE(find<action::Report>(acts)->failures.empty());
}

TEST(AgentEnding, ASignalHereReportsAtOnceAndLeavesWhenTheAbortHasLanded) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  auto acts = agent.on_signal(SIGINT);
  EXPECT_TRUE(find<action::PublishAbort>(acts));
  acts = agent.on_worker_exited(0, failure(0, -SIGINT));
  EXPECT_EQ(kinds(acts), (kinds_of<action::Finish, action::Report, action::AwaitAbort>()));
  EXPECT_EQ(find<action::AwaitAbort>(acts)->grace, std::chrono::milliseconds(800));
  EXPECT_EQ(find<action::Finish>(acts)->exit_code, 128 + SIGINT);
  EXPECT_EQ(agent.phase(), Agent::Phase::kLeaving);
  EXPECT_EQ(kinds(agent.on_abort_published()), kinds_of<action::ShutDown>());
}

TEST(AgentEnding, AnAbortThatNeverLandsIsWaitedForOnlyItsGrace) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_signal(SIGTERM);
  agent.on_worker_exited(0, failure(0, -SIGTERM));
  EXPECT_EQ(kinds(agent.on_finish_deadline()), kinds_of<action::ShutDown>());
}

TEST(AgentEnding, AnAbortThatLandedBeforeTheEndShutsDownWithoutWaiting) {
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_fatal("lost the store");
  EXPECT_TRUE(agent.on_abort_published().empty());  // the workers still stop
  auto acts = agent.on_worker_exited(0, failure(0, -SIGTERM));
  EXPECT_EQ(kinds(acts), (kinds_of<action::Finish, action::Report, action::ShutDown>()));
  EXPECT_EQ(find<action::Finish>(acts)->reason, "lost the store");
}

TEST(AgentEnding, ASignalWhileEndingLeavesAtOnceFromEveryStep) {
  auto collecting = [] {
    auto a = std::make_unique<Agent>(ending_options());
    a->start();
    a->on_rendezvous_done(assignment(0, 1));
    a->on_worker_exited(0, failure(0, 4));
    a->on_outcome(0, failed_for_good());
    return a;
  };
  auto barrier = [] {
    auto a = std::make_unique<Agent>(ending_options());
    a->start();
    a->on_rendezvous_done(assignment(0, 1));
    a->on_worker_exited(0, std::nullopt);
    a->on_outcome(0, outcome(Outcome::kSucceeded));
    return a;
  };
  auto leaving = [] {
    auto a = std::make_unique<Agent>(ending_options());
    a->start();
    a->on_rendezvous_done(assignment(0, 1));
    a->on_signal(SIGTERM);
    a->on_worker_exited(0, failure(0, -SIGTERM));
    return a;
  };
  for (auto make : {+collecting, +barrier, +leaving}) {
    auto agent = make();
    ASSERT_TRUE(agent->ending());
    EXPECT_EQ(kinds(agent->on_signal(SIGINT)), kinds_of<action::ShutDown>());
    EXPECT_EQ(agent->phase(), Agent::Phase::kDone);
  }
}

TEST(AgentEnding, ShutDownIsAlwaysTheLastActionOfItsBatch) {
  // Every path above gives ShutDown last; a NodeAgent tears itself down on it and acts on nothing
  // after it. One more path: a fatal error whose abort landed while the workers stopped.
  Agent agent(ending_options());
  agent.start();
  agent.on_rendezvous_done(assignment(0, 1));
  agent.on_fatal("the rendezvous failed");
  agent.on_abort_published();
  auto acts = agent.on_worker_exited(0, failure(0, -SIGTERM));
  ASSERT_FALSE(acts.empty());
  EXPECT_TRUE(std::holds_alternative<action::ShutDown>(acts.back()));
  for (size_t i = 0; i + 1 < acts.size(); ++i)
    EXPECT_FALSE(std::holds_alternative<action::ShutDown>(acts[i]));
}

TEST(AgentEnding, EveryPhaseHasTheNameObserversShowAndTheEndingReadsAsDone) {
  using P = Agent::Phase;
  EXPECT_STREQ(phase_name(P::kIdle), "starting");
  EXPECT_STREQ(phase_name(P::kRendezvous), "rendezvous");
  EXPECT_STREQ(phase_name(P::kRunning), "running");
  EXPECT_STREQ(phase_name(P::kAwaitingOutcome), "finishing");
  EXPECT_STREQ(phase_name(P::kStopping), "stopping");
  for (P p : {P::kCollectingFailures, P::kLeaving, P::kExitBarrier, P::kDone})
    EXPECT_STREQ(phase_name(p), "done");
}

}  // namespace
}  // namespace cohort::launch

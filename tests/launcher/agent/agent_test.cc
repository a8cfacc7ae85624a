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

}  // namespace
}  // namespace cohort::launch

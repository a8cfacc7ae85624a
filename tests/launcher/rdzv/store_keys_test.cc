// Every store key's builder against its parser: what the agents write, cohortctl reads back.
#include "rdzv/store_keys.h"

#include <gtest/gtest.h>

namespace cohort::launch {
namespace {

using Kind = keys::ParsedKey::Kind;

TEST(StoreKeys, EveryBuilderParsesBackToWhatBuiltIt) {
  for (int round : {0, 7, 123456}) {
    for (int n : {0, 3, 99999}) {
      auto node = keys::parse(keys::node(round, n));
      EXPECT_EQ(node.kind, Kind::kNode);
      EXPECT_EQ(node.round, round);
      EXPECT_EQ(node.node_rank, n);
      auto failures = keys::parse(keys::failures(round, n));
      EXPECT_EQ(failures.kind, Kind::kFailures);
      EXPECT_EQ(failures.round, round);
      EXPECT_EQ(failures.node_rank, n);
      auto running = keys::parse(keys::running(round, n));
      EXPECT_EQ(running.kind, Kind::kRunning);
      EXPECT_EQ(running.round, round);
      EXPECT_EQ(running.node_rank, n);
      auto status = keys::parse(keys::status(n));
      EXPECT_EQ(status.kind, Kind::kStatus);
      EXPECT_EQ(status.node_rank, n);
      auto answers = keys::parse(keys::hang_answers(round, n + 7, n));
      EXPECT_EQ(answers.kind, Kind::kHangAnswers);
      EXPECT_EQ(answers.round, round);
      EXPECT_EQ(answers.probe, n + 7);
      EXPECT_EQ(answers.node_rank, n);
      auto changed = keys::parse(keys::round_changed(round, n));
      EXPECT_EQ(changed.kind, Kind::kRoundChanged);
      EXPECT_EQ(changed.round, round);
      EXPECT_EQ(changed.version, n);
    }
    EXPECT_EQ(keys::parse(keys::done_count(round)).kind, Kind::kDoneCount);
    EXPECT_EQ(keys::parse(keys::outcome(round)).kind, Kind::kOutcome);
    EXPECT_EQ(keys::parse(keys::outcome(round)).round, round);
    EXPECT_EQ(keys::parse(keys::exit_count(round)).kind, Kind::kExitCount);
    EXPECT_EQ(keys::parse(keys::exit_all(round)).kind, Kind::kExitAll);
    EXPECT_EQ(keys::parse(keys::hang_probe(round)).kind, Kind::kHangProbe);
    EXPECT_EQ(keys::parse(keys::hang_probe(round)).round, round);
    EXPECT_EQ(keys::parse(keys::round_state(round)).kind, Kind::kRoundState);
    EXPECT_EQ(keys::parse(keys::round_state(round)).round, round);
  }
  EXPECT_EQ(keys::parse(keys::current_round()).kind, Kind::kCurrentRound);
  for (int port : {1, 29500, 65535}) {
    auto wp = keys::parse(keys::worker_port(port));
    EXPECT_EQ(wp.kind, Kind::kWorkerPort);
    EXPECT_EQ(wp.port, port);
  }
  for (std::string id : {"host-1:4242:abc", "a/b"}) {
    auto hb = keys::parse(keys::keep_alive(id));
    EXPECT_EQ(hb.kind, Kind::kKeepAlive);
    EXPECT_EQ(hb.node_id, id);
    auto alive = keys::parse(keys::alive(id));
    EXPECT_EQ(alive.kind, Kind::kAlive);
    EXPECT_EQ(alive.node_id, id);
  }
}

TEST(StoreKeys, KeysOfNoBuilderAreOther) {
  for (const char* k : {"",
                        "round",
                        "round/1",
                        "round/x/outcome",
                        "round/01/outcome",
                        "round/-1/outcome",
                        "round/1/node",
                        "round/1/node/2/3",
                        "round/1/running",
                        "worker_port",
                        "worker_port/x",
                        "worker_port/1/2",
                        "round/1/nodes/2",
                        "status",
                        "status/",
                        "status/+2",
                        "rdzv/current/1",
                        "rdzv/hb/",
                        "rdzv/round/1/changed",
                        "rdzv/round/1/changed/v",
                        "workers/round/1/x",
                        "round/99999999999999999999/outcome",
                        "round/1/hang/2",
                        "round/1/hang/x/0",
                        "round/1/hang/1/2/3"}) {
    EXPECT_EQ(keys::parse(k).kind, Kind::kOther) << k;
  }
}

TEST(StoreKeys, RunPrefixSplitsBack) {
  std::string rest;
  EXPECT_EQ(keys::split_run(keys::run_prefix("job-1") + "/" + keys::outcome(2), &rest), "job-1");
  EXPECT_EQ(rest, "round/2/outcome");
  EXPECT_EQ(keys::split_run("cohort/job-1", &rest), std::nullopt);  // no relative part
  EXPECT_EQ(keys::split_run("cohort//x"), std::nullopt);
  EXPECT_EQ(keys::split_run("other/job/x"), std::nullopt);
  EXPECT_EQ(keys::split_run("/cohort/job/x"), std::nullopt);
  EXPECT_EQ(keys::split_run(keys::lobby()), std::nullopt);  // outside every run
}

}  // namespace
}  // namespace cohort::launch

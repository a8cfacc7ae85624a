// What `cohortctl status` reads of a job, on the in-memory store, from records written by the
// agents' own functions (round_ops, NodeStatus): rounds, outcomes, failures, status records, the
// elastic round being formed, and records it cannot read. (cohortctl_test.cc runs the command.)
#include "ctl/job_status.h"

#include <gtest/gtest.h>

#include <set>

#include "cohort/rdzv/memory_store.h"
#include "cohort/rdzv/prefix_store.h"
#include "rdzv/round_ops.h"
#include "rdzv/store_keys.h"

namespace cohort::launch {
namespace {

// A MemoryStore that remembers every key written, as cohortctl lists a TcpStore's keys.
class ListedStore final : public Store {
 public:
  std::vector<std::string> keys() const { return {keys_.begin(), keys_.end()}; }

  void set(std::string_view k, std::string_view v) override {
    note(k);
    s_.set(k, v);
  }
  std::string get(std::string_view k) override { return s_.get(k); }
  int64_t add(std::string_view k, int64_t d) override {
    note(k);
    return s_.add(k, d);
  }
  std::string compare_set(std::string_view k, std::string_view e, std::string_view d) override {
    std::string r = s_.compare_set(k, e, d);
    if (s_.check(std::vector<std::string>{std::string(k)})) note(k);
    return r;
  }
  bool check(std::span<const std::string> ks) override { return s_.check(ks); }
  using Store::wait;
  void wait(std::span<const std::string> ks, std::chrono::milliseconds t) override {
    s_.wait(ks, t);
  }
  bool delete_key(std::string_view k) override {
    keys_.erase(std::string(k));
    return s_.delete_key(k);
  }
  int64_t num_keys() override { return s_.num_keys(); }
  std::vector<std::string> multi_get(std::span<const std::string> ks) override {
    return s_.multi_get(ks);
  }
  void multi_set(std::span<const std::string> ks, std::span<const std::string> vs) override {
    for (const auto& k : ks) note(k);
    s_.multi_set(ks, vs);
  }
  void append(std::string_view k, std::string_view v) override {
    note(k);
    s_.append(k, v);
  }
  std::chrono::milliseconds timeout() const override { return s_.timeout(); }
  void set_timeout(std::chrono::milliseconds t) override { s_.set_timeout(t); }
  std::string describe() const override { return "listed memory"; }

 private:
  void note(std::string_view k) { keys_.insert(std::string(k)); }
  MemoryStore s_{std::chrono::milliseconds(0)};  // a missing key fails at once
  std::set<std::string> keys_;
};

NodeInfo node(int rank, int nproc) {
  NodeInfo n;
  n.id = "n" + std::to_string(rank) + ":1:x";
  n.node_rank = rank;
  n.nproc = nproc;
  n.host = "node" + std::to_string(rank);
  n.settings["--max-restarts"] = "3";
  return n;
}

NodeStatus status(int rank, const std::string& state, int round, double updated) {
  NodeStatus s;
  s.node_rank = rank;
  s.host = "node" + std::to_string(rank);
  s.state = state;
  s.round = round;
  s.restarts = round;
  s.max_restarts = 3;
  s.nnodes = 2;
  s.updated = updated;
  WorkerStatus w;
  w.rank = rank;
  s.workers.push_back(w);
  return s;
}

class JobStatusTest : public ::testing::Test {
 protected:
  // Job `run`'s keys (relative to its prefix), as cohortctl groups them.
  JobStatus read(const std::string& run) {
    auto jobs = group_jobs(store_.keys());
    return read_job(store_, run, jobs[run]);
  }

  ListedStore store_;
  PrefixStore train_{keys::run_prefix("train"), store_};
};

TEST_F(JobStatusTest, KeysAreGroupedByRunAndOthersIgnored) {
  const auto jobs = group_jobs({"cohort/a/round/0/node/0", "cohort/b/status/1", "cohort/a/status/0",
                                "unrelated/key", "cohort/", "default_pg/0//cpu//1"});
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs.at("a"), (std::vector<std::string>{"round/0/node/0", "status/0"}));
  EXPECT_EQ(jobs.at("b"), (std::vector<std::string>{"status/1"}));
}

TEST_F(JobStatusTest, ARunningJobIsWhatItsNodesSay) {
  for (int n : {0, 1}) train_.set(keys::node(0, n), to_json(node(n, 2)));
  train_.set(keys::status(1), to_json(status(1, "running", 0, 1000.5)));
  train_.set(keys::status(0), to_json(status(0, "running", 0, 1001.25)));
  const JobStatus j = read("train");
  EXPECT_EQ(j.run_id, "train");
  EXPECT_EQ(j.round, 0);
  EXPECT_EQ(j.nnodes, 2);
  EXPECT_EQ(j.workers, 4);
  ASSERT_EQ(j.nodes.size(), 2u);
  EXPECT_EQ(j.nodes[1].host, "node1");
  EXPECT_EQ(j.state, "running");
  EXPECT_EQ(j.max_restarts, 3);
  EXPECT_DOUBLE_EQ(j.updated, 1001.25);  // the newest record
  ASSERT_EQ(j.node_status.size(), 2u);
  EXPECT_EQ(j.node_status[0].node_rank, 0);  // by node rank
  EXPECT_TRUE(j.rounds.empty());
  EXPECT_TRUE(j.problems.empty());
}

TEST_F(JobStatusTest, AFailedRoundKeepsItsFailuresAndTheLostNodeFromItsOutcome) {
  for (int r : {0, 1})
    for (int n : {0, 1}) train_.set(keys::node(r, n), to_json(node(n, 2)));
  WorkerFailure first = make_failure({1, 0, 2, "node1", 42}, -9, "node node1 lost", 10);
  WorkerFailure stopped = make_failure({0, 1, 1, "node0", 41}, 1, "exited with code 1", 20);
  round_ops::publish_outcome(train_, 0, Outcome{Outcome::kFailed, 0, 1, "node node1 lost", first});
  round_ops::publish_failure(train_, 0, 0, 0, {stopped});
  train_.set(keys::status(0), to_json(status(0, "running", 1, 5)));
  const JobStatus j = read("train");
  EXPECT_EQ(j.round, 1);
  EXPECT_EQ(j.restarts, 1);
  EXPECT_EQ(j.state, "running");  // round 1 is undecided: the agents' word
  ASSERT_EQ(j.rounds.size(), 1u);
  const RoundRecord& r0 = j.rounds[0];
  EXPECT_EQ(r0.round, 0);
  EXPECT_EQ(r0.world_size, 4);
  ASSERT_TRUE(r0.outcome);
  EXPECT_EQ(r0.outcome->kind, Outcome::kFailed);
  ASSERT_EQ(r0.failures.size(), 2u);  // node 0's report, and node 1 from the outcome
  EXPECT_EQ(r0.failures[0].reason, "exited with code 1");
  EXPECT_EQ(r0.failures[1].reason, "node node1 lost");
}

TEST_F(JobStatusTest, ADecidedOutcomeOutranksTheLastRecords) {
  train_.set(keys::node(0, 0), to_json(node(0, 1)));
  train_.set(keys::status(0), to_json(status(0, "running", 0, 5)));
  round_ops::publish_success(train_, 0, 0, 1);
  round_ops::exit_barrier(train_, 0, 1, false, std::chrono::milliseconds(0));
  const JobStatus j = read("train");
  EXPECT_EQ(j.state, "succeeded");
  EXPECT_EQ(j.round, 0);
}

TEST_F(JobStatusTest, WithoutStatusRecordsTheStateComesFromTheRounds) {
  PrefixStore grow(keys::run_prefix("grow"), store_);
  grow.set(keys::node(1, 0), to_json(node(0, 4)));
  grow.compare_set(keys::current_round(), "", "2");  // the elastic rendezvous forms round 2
  grow.set(keys::round_state(2), "opaque: not read");
  JobStatus j = read("grow");
  EXPECT_EQ(j.round, 2);
  EXPECT_EQ(j.state, "rendezvous");
  EXPECT_TRUE(j.nodes.empty());  // round 2 has no node yet
  EXPECT_EQ(j.max_restarts, 3);  // from the nodes' settings
  EXPECT_TRUE(j.problems.empty());
  train_.set(keys::node(0, 0), to_json(node(0, 2)));
  j = read("train");
  EXPECT_EQ(j.state, "running");
  EXPECT_EQ(j.workers, 2);
  EXPECT_EQ(read("nothing").state, "unknown");
}

TEST_F(JobStatusTest, UnreadableRecordsAreNamedAndTheRestIsRead) {
  train_.set(keys::node(0, 0), to_json(node(0, 2)));
  train_.set(keys::node(0, 1), "{broken");
  train_.set(keys::outcome(0), R"({"kind": "exploded"})");
  train_.set(keys::failures(0, 1), "[1, 2]");
  train_.set(keys::status(3), "not json");
  const JobStatus j = read("train");
  EXPECT_EQ(j.nnodes, 1);
  EXPECT_EQ(j.workers, 2);
  ASSERT_EQ(j.problems.size(), 4u);
  std::set<std::string> named;
  for (const auto& p : j.problems) named.insert(p.substr(0, p.find(':')));
  EXPECT_EQ(named,
            (std::set<std::string>{"cohort/train/round/0/node/1", "cohort/train/round/0/outcome",
                                   "cohort/train/round/0/failures/1", "cohort/train/status/3"}));
}

TEST(JobStatus, OutcomeWords) {
  EXPECT_EQ(outcome_word(Outcome::kSucceeded), "succeeded");
  EXPECT_EQ(outcome_word(Outcome::kFailed), "failed");
  EXPECT_EQ(outcome_word(Outcome::kAborted), "aborted");
  EXPECT_EQ(outcome_word(Outcome::kRescale), "rescale");
}

}  // namespace
}  // namespace cohort::launch

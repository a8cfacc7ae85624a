// What `cohortctl status` prints of jobs it has read: the list, one job's detail (nodes and their
// workers, stragglers, failures with their root cause, unreadable records) and the same as JSON.
#include "ctl/status_view.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cohort::launch {
namespace {

using nlohmann::json;

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

constexpr double kNow = 1764790000;

// Job "train": 2 nodes; round 0 failed (rank 3 segfaulted, then rank 1 timed out); round 1 runs.
JobStatus train() {
  JobStatus j;
  j.run_id = "train";
  j.round = 1;
  j.nnodes = 2;
  j.workers = 4;
  j.restarts = 1;
  j.max_restarts = 3;
  j.state = "running";
  j.updated = kNow - 12;
  NodeStatus s;
  s.node_rank = 1;
  s.host = "node1";
  s.round = 1;
  s.state = "running";
  s.updated = kNow - 0.4;
  WorkerStatus w;
  w.rank = 2;
  w.local_rank = 0;
  w.pid = 5002;
  w.state = "running";
  w.heartbeat_age_s = 0.2;
  w.step = 1202;
  w.step_s = 0.125;
  w.items_per_s = 1024;
  w.comm_share = 0.25;
  w.cpu_s = 42.5;
  w.rss_bytes = 300LL << 20;
  s.workers.push_back(w);
  WorkerStatus quiet;  // a PyTorch worker: no reports
  quiet.rank = 3;
  quiet.local_rank = 1;
  quiet.pid = 5003;
  quiet.state = "running";
  s.workers.push_back(quiet);
  j.node_status.push_back(s);
  j.stragglers.push_back({2, "node1", 2.5, "GPU 0: thermal slowdown"});
  RoundRecord r;
  r.round = 0;
  r.world_size = 4;
  WorkerFailure segv = make_failure({1, 1, 3, "node1", 4243}, -11, "killed by SIGSEGV", kNow - 60);
  segv.gpu = "Xid 79";
  WorkerFailure late = make_failure({0, 1, 1, "node0", 4141}, 1, "exited with code 1", kNow - 30);
  late.message = "collective timed out after 30 s";
  r.failures = {late, segv};
  r.outcome = Outcome{Outcome::kFailed, 1, 1, "killed by SIGSEGV", segv};
  j.rounds.push_back(r);
  RoundRecord rescale;
  rescale.round = 1;
  rescale.outcome = Outcome{Outcome::kRescale, 0, 1, "a node joined", std::nullopt};
  j.rounds.push_back(rescale);
  return j;
}

TEST(StatusView, TheListHasOneLinePerJobWithWhatIsUnknownAsADash) {
  JobStatus forming;
  forming.run_id = "grow";
  forming.state = "rendezvous";
  const std::string list = render_job_list({forming, train()}, kNow);
  EXPECT_TRUE(has(list, "RUN ID  ROUND  NODES  WORKERS  STATE       RESTARTS  UPDATED\n")) << list;
  EXPECT_TRUE(has(list, "grow    -      0      0        rendezvous  0/?       -\n")) << list;
  EXPECT_TRUE(has(list, "train   1      2      4        running     1/3       12 s ago\n")) << list;
  EXPECT_EQ(render_job_list({}, kNow), "no jobs in this store\n");
}

TEST(StatusView, TheDetailShowsEveryWorkersReadingsAndWhatIsUnknown) {
  const std::string d = render_job_detail(train(), kNow);
  EXPECT_EQ(d.rfind("job train: running, round 1, 2 nodes, 4 workers, restarts 1/3, updated "
                    "12 s ago\n",
                    0),
            0u)
      << d;
  EXPECT_TRUE(has(d, "\nnode 1 (node1): running, round 1, updated 0.4 s ago\n")) << d;
  EXPECT_TRUE(has(d,
                  "  RANK  LOCAL  PID   STATE    HEARTBEAT  STEP  STEP TIME  ITEMS/S  COMM  "
                  "CPU     RSS\n"))
      << d;
  EXPECT_TRUE(has(d,
                  "  2     0      5002  running  0.2 s ago  1202  125.0 ms   1024.0   25%   "
                  "42.5 s  300.0 MiB\n"))
      << d;
  EXPECT_TRUE(has(d,
                  "  3     1      5003  running  -          -     -          -        -     "
                  "-       -\n"))
      << d;
  EXPECT_TRUE(has(d,
                  "\nstragglers:\n  rank 2 (node1): compute time per step 2.5x the median of "
                  "the other ranks; its GPU: GPU 0: thermal slowdown\n"))
      << d;
}

TEST(StatusView, FailuresNameTheRootCauseAndSkipRescales) {
  const std::string d = render_job_detail(train(), kNow);
  EXPECT_TRUE(has(d,
                  "\nfailures:\n  round 0: failed (restarts 1): killed by SIGSEGV\n"
                  "    root cause: rank 3 (local rank 1, node 1, node1, pid 4243): killed by "
                  "SIGSEGV (exit code -11)\n      gpu: Xid 79\n"
                  "    also: rank 1 (node0): exited with code 1\n"))
      << d;
  EXPECT_FALSE(has(d, "round 1:")) << d;  // a rescale is no failure
  EXPECT_FALSE(has(d, "unreadable records")) << d;
}

TEST(StatusView, ATimeoutRootCauseNamesTheRanksThatHadNotFailedAndItsMessage) {
  JobStatus j = train();
  RoundRecord& r = j.rounds[0];
  r.failures = {r.failures[0]};  // only the timeout
  r.failures[0].timestamp = kNow - 90;
  r.outcome->first_failure.reset();
  const std::string d = render_job_detail(j, kNow);
  EXPECT_TRUE(has(d,
                  "    root cause: rank 1 (local rank 1, node 0, node0, pid 4141): exited with "
                  "code 1 (exit code 1)\n      message: collective timed out after 30 s\n"
                  "      it timed out waiting; ranks that had not failed (one was late or "
                  "hung): 0, 2, 3\n"))
      << d;
}

TEST(StatusView, WithoutStatusRecordsTheNodesAreListedAndProblemsNamed) {
  JobStatus j;
  j.run_id = "old";
  j.round = 0;
  j.nnodes = 1;
  j.workers = 1;
  j.state = "running";
  NodeInfo n;
  n.node_rank = 0;
  n.host = "h0";
  n.pid = 77;
  n.nproc = 1;
  j.nodes.push_back(n);
  j.problems.push_back("cohort/old/status/1: malformed node status record");
  const std::string d = render_job_detail(j, kNow);
  EXPECT_TRUE(has(d, "job old: running, round 0, 1 node, 1 worker, restarts 0/?\n")) << d;
  EXPECT_TRUE(has(d, "\nno node status published")) << d;
  EXPECT_TRUE(has(d, "  node 0 (h0, pid 77): 1 worker\n")) << d;
  EXPECT_TRUE(has(d,
                  "\nunreadable records:\n  cohort/old/status/1: malformed node status "
                  "record\n"))
      << d;
}

TEST(StatusView, JsonHasTheSameContent) {
  const json l = json::parse(job_list_json({train()}, kNow));
  ASSERT_EQ(l["jobs"].size(), 1u);
  EXPECT_EQ(l["jobs"][0]["run_id"], "train");
  EXPECT_EQ(l["jobs"][0]["max_restarts"], 3);
  EXPECT_DOUBLE_EQ(l["jobs"][0]["age_s"].get<double>(), 12);
  const json d = json::parse(job_detail_json(train(), kNow));
  EXPECT_EQ(d["state"], "running");
  ASSERT_EQ(d["nodes"].size(), 1u);
  EXPECT_EQ(d["nodes"][0]["workers"][0]["step"], 1202);
  EXPECT_FALSE(d["nodes"][0]["workers"][1].contains("step"));
  EXPECT_EQ(d["stragglers"][0]["ratio"], 2.5);
  ASSERT_EQ(d["rounds"].size(), 2u);
  EXPECT_EQ(d["rounds"][0]["outcome"]["kind"], "failed");
  EXPECT_EQ(d["rounds"][0]["root_cause"]["global_rank"], 3);
  EXPECT_EQ(d["rounds"][0]["failures"].size(), 2u);
  EXPECT_EQ(d["rounds"][0]["timeout_suspects"], json::array());  // the root cause is no timeout
  EXPECT_TRUE(d["rounds"][1]["root_cause"].is_null());
  JobStatus unknown;
  EXPECT_EQ(json::parse(job_list_json({unknown}, kNow))["jobs"][0]["age_s"], -1);
}

// Any client of a tokenless store can write what cohortctl shows: a C1 control or a
// bidirectional override reaches the terminal escaped.
TEST(StatusView, JsonEscapesEverythingPastAscii) {
  JobStatus j;
  j.run_id =
      "evil\xc2\x9b"
      "31m\xe2\x80\xae";
  const std::string text = job_detail_json(j, kNow);
  for (unsigned char c : text) EXPECT_LT(c, 0x80) << text;
  EXPECT_TRUE(has(text, "\\u009b")) << text;
  EXPECT_TRUE(has(text, "\\u202e")) << text;
  EXPECT_EQ(json::parse(text)["run_id"], j.run_id);
}

TEST(StatusView, AHangShowsTheCulpritWithItsStackAndTheWaitingRanks) {
  JobStatus j = train();
  EXPECT_FALSE(has(render_job_detail(j, kNow), "\nhang ")) << "no report, no section";
  HangStatus h;
  h.probe = 4;
  h.at = kNow - 2;
  h.report.verdict = HangReport::Verdict::kHung;
  h.report.summary = "rank 3 (node1, pid 5003) never entered all_reduce";
  h.report.culprits.push_back({3, "hung: never entered all_reduce ([520] Float)",
                               "Thread MainThread (main), most recent call last:\n"
                               "  File \"train.py\", line 9, in load\n"});
  h.culprit_hosts.push_back("node1");
  h.report.waiting.push_back("rank 2 (node1, pid 5002): waits in all_reduce, for 6.0 s");
  j.hang = h;
  const std::string text = render_job_detail(j, kNow);
  EXPECT_TRUE(
      has(text, "\nhang (probe 4, 2.0 s ago): hung: rank 3 (node1, pid 5003) never entered"))
      << text;
  EXPECT_TRUE(has(text, "  culprit rank 3 (node1): hung: never entered all_reduce ([520] Float)\n"))
      << text;
  EXPECT_TRUE(has(text, "      File \"train.py\", line 9, in load\n")) << text;
  EXPECT_TRUE(has(text, "  rank 2 (node1, pid 5002): waits in all_reduce, for 6.0 s\n")) << text;
  const json doc = json::parse(job_detail_json(j, kNow));
  EXPECT_EQ(doc["hang"]["verdict"], "hung");
  EXPECT_EQ(doc["hang"]["culprits"][0]["rank"], 3);
  EXPECT_EQ(doc["hang"]["culprits"][0]["host"], "node1");
  EXPECT_EQ(doc["hang"]["waiting"].size(), 1u);
}

TEST(StatusView, BytesAndAges) {
  EXPECT_EQ(format_bytes(-1), "-");
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(12LL << 20), "12.0 MiB");
  EXPECT_EQ(format_bytes(3LL << 40), "3.0 TiB");
  EXPECT_EQ(format_bytes(5000LL << 40), "5000.0 TiB");
  auto updated = [](double ago) {
    JobStatus j;
    j.updated = kNow - ago;
    return render_job_list({j}, kNow);
  };
  EXPECT_TRUE(has(updated(9.94), "9.9 s ago"));
  EXPECT_TRUE(has(updated(119), "119 s ago"));
  EXPECT_TRUE(has(updated(600), "10 min ago"));
  EXPECT_TRUE(has(updated(9000), "2.5 h ago"));
}

}  // namespace
}  // namespace cohort::launch

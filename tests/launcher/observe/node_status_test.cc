// The status record a node agent publishes and cohortctl reads: a contract between versions
// (fields are only added; unknown ones are ignored).
#include "observe/node_status.h"

#include "observe/hang_watch.h"

#include <gtest/gtest.h>

#include "cohort/error.h"

namespace cohort::launch {
namespace {

TEST(NodeStatus, RoundTripsAndReadsRecordsWithFieldsItDoesNotKnow) {
  NodeStatus s;
  s.node_rank = 1;
  s.host = "n2";
  s.round = 3;
  s.state = "running";
  s.restarts = 1;
  s.max_restarts = 3;
  s.nnodes = 2;
  s.updated = 1764790000.25;
  WorkerStatus w;
  w.rank = 5;
  w.local_rank = 1;
  w.pid = 77;
  w.state = "running";
  w.step = 120;
  w.step_s = 0.05;
  w.gpu = "thermal throttle at 91 C";
  s.workers.push_back(w);
  WorkerStatus quiet;  // no reports: its unknowns stay unknown
  quiet.rank = 6;
  quiet.local_rank = 2;
  quiet.state = "running";
  s.workers.push_back(quiet);
  s.stragglers.push_back({5, "n2", 2.5, "thermal throttle at 91 C"});
  NodeStatus r = node_status_from_json(to_json(s));
  EXPECT_EQ(r.host, "n2");
  EXPECT_EQ(r.round, 3);
  ASSERT_EQ(r.workers.size(), 2u);
  EXPECT_EQ(r.workers[0].step, 120);
  EXPECT_EQ(r.workers[0].gpu, "thermal throttle at 91 C");
  EXPECT_FALSE(r.workers[1].step.has_value());
  EXPECT_FALSE(r.workers[1].heartbeat_age_s.has_value());
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_DOUBLE_EQ(r.stragglers[0].ratio, 2.5);
  EXPECT_EQ(node_status_from_json(R"({"node_rank": 0, "future_field": [1, 2]})").node_rank, 0);
  EXPECT_THROW(node_status_from_json("{\"host\": \"x\"}"), ProtocolError);
  EXPECT_THROW(node_status_from_json("not json"), ProtocolError);
}

TEST(NodeStatus, CarriesTheLastHangReportAndRefusesAMalformedOne) {
  NodeStatus s;
  s.host = "n1";
  HangStatus h;
  h.probe = 7;
  h.at = 1764790000.5;
  h.report.verdict = HangReport::Verdict::kHung;
  h.report.summary = "rank 1 (n1, pid 42) never entered all_reduce";
  h.report.hung_for_s = 5.5;
  h.report.culprits.push_back({1, "hung: never entered all_reduce", "Thread MainThread\n"});
  h.culprit_hosts.push_back("n1");
  h.report.waiting.push_back("rank 0 (n1, pid 41): waits in all_reduce, for 5.5 s");
  s.hang = h;
  NodeStatus r = node_status_from_json(to_json(s));
  ASSERT_TRUE(r.hang.has_value());
  EXPECT_EQ(r.hang->probe, 7);
  EXPECT_EQ(r.hang->report.verdict, HangReport::Verdict::kHung);
  EXPECT_DOUBLE_EQ(r.hang->report.hung_for_s, 5.5);
  ASSERT_EQ(r.hang->report.culprits.size(), 1u);
  EXPECT_EQ(r.hang->report.culprits[0].stack, "Thread MainThread\n");
  EXPECT_EQ(r.hang->culprit_hosts, std::vector<std::string>{"n1"});
  EXPECT_EQ(r.hang->report.waiting, h.report.waiting);
  EXPECT_FALSE(node_status_from_json(to_json(NodeStatus{})).hang.has_value());
  EXPECT_THROW(node_status_from_json(R"({"node_rank": 0, "hang": {"waiting": "x"}})"),
               ProtocolError);
}

TEST(NodeStatus, ANumberThatIsNoWholeNumberOfItsFieldIsMalformedNotConverted) {
  // Any client of the store can write a status record or a node's hang answers; a fraction or a
  // number past the field's range was converted with static_cast (undefined for a double).
  for (const char* bad : {R"({"node_rank": 1e300})", R"({"node_rank": 0, "round": 2.5})",
                          R"({"node_rank": 0, "workers": [{"rank": 0, "step": 1e300}]})",
                          R"({"node_rank": 0, "workers": [{"rank": 4294967296}]})",
                          R"({"node_rank": 0, "stragglers": [{"rank": -1e300}]})",
                          R"({"node_rank": 0, "hang": {"probe": 0.5}})",
                          R"({"node_rank": 0, "hang": {"culprits": [{"rank": 1e300}]}})"}) {
    EXPECT_THROW(node_status_from_json(bad), ProtocolError) << bad;
  }
  RankAssignment a;
  a.nnodes = 1;
  NodeInfo n;
  n.nproc = 1;
  n.host = "n0";
  a.nodes.push_back(n);
  for (const char* bad : {R"({"host": "n0", "workers": [{"rank": 1e300}]})",
                          R"({"host": "n0", "workers": [{"rank": 0, "pid": 2.5}]})"}) {
    EXPECT_THROW(ranks_from_answers(a, {std::string(bad)}), ProtocolError) << bad;
  }
}

}  // namespace
}  // namespace cohort::launch

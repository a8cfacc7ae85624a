// The failure summary's layout (torchrun's), its root cause and the ranks a timeout names.
#include "failure/failure_report.h"

#include <gtest/gtest.h>

#include <limits>

#include "failure/failure.h"

namespace cohort::launch {
namespace {

WorkerFailure make(int rank, double ts, int code) {
  WorkerFailure f;
  f.global_rank = rank;
  f.local_rank = rank;
  f.host = "node1";
  f.pid = 100 + rank;
  f.exit_code = code;
  f.timestamp = ts;
  f.reason = "exited with code " + std::to_string(code);
  f.message = f.reason;
  f.traceback = "line one\nline two";
  return f;
}

TEST(FailureReport, TorchrunLayoutWithTheEarliestFailureAsRootCause) {
  std::string r = format_failure_report("train.py", {make(3, 200, 1), make(1, 100, 2)});
  EXPECT_EQ(r.find(std::string(60, '=') + "\ntrain.py FAILED\n" + std::string(60, '-') +
                   "\nFailures:\n[3]:\n"),
            0u)
      << r;
  auto root = r.find("Root Cause (first observed failure):\n[1]:\n");
  ASSERT_NE(root, std::string::npos);
  EXPECT_NE(r.find("  rank      : 1 (local_rank: 1)", root), std::string::npos);
  EXPECT_NE(r.find("  exitcode  : 2 (pid: 101)", root), std::string::npos);
  EXPECT_NE(r.find("  error_file: <N/A>"), std::string::npos);
  EXPECT_NE(r.find("  traceback : line one\n  line two\n"), std::string::npos) << r;
  EXPECT_LT(r.find("rank      : 3"), root);
}

TEST(FailureReport, ATimeOutsideTheCalendarIsUnknownNotUndefined) {
  // A hang dated by a worker's own clock, or an error file's timestamp, may be anything; past
  // time_t's range the conversion was undefined behaviour (the hang_answer fuzzer found -1e300).
  for (double ts : {-1e300, 1e300, -1.0, 1e12, std::numeric_limits<double>::quiet_NaN(),
                    std::numeric_limits<double>::infinity()}) {
    std::string r = format_failure_report("t", {make(0, ts, 1)});
    EXPECT_NE(r.find("  time      : unknown\n"), std::string::npos) << ts << "\n" << r;
  }
  std::string r = format_failure_report("t", {make(0, 1764790000, 1)});
  EXPECT_NE(r.find("  time      : 2025-"), std::string::npos) << r;
}

TEST(FailureReport, SingleFailureSaysNoOtherFailures) {
  std::string r = format_failure_report("t", {make(0, 1, 1)});
  EXPECT_NE(r.find("Failures:\n  <NO_OTHER_FAILURES>\n"), std::string::npos);
}

TEST(FailureReport, ATimeoutNamesTheRanksThatHadNotFailed) {
  WorkerFailure waited = make(0, 100, 1);
  waited.message = "RuntimeError: Wait timeout after 10000ms, keys: /default_pg/0//cpu//1";
  WorkerFailure also = make(4, 101, 1);
  std::string r = format_failure_report("train.py", {waited, also}, 8);
  EXPECT_NE(r.find("Rank 0 timed out waiting; these ranks had not failed (a rank that was late "
                   "or hung is among them):\n  1-3, 5-7\n"),
            std::string::npos)
      << r;
  // Not a timeout: nobody else is named.
  EXPECT_EQ(format_failure_report("t", {make(0, 1, 1)}, 8).find("had not failed"),
            std::string::npos);
}

TEST(FailureReport, WhatNvmlSaidIsALineOfItsOwnAndTravelsThroughTheStore) {
  WorkerFailure f = make(2, 5, 1);
  f.gpu = "GPU 2 (GPU-abc, NVIDIA H200): Xid 79 (GPU has fallen off the bus)";
  WorkerFailure back = failure_from_json(to_json(f));
  EXPECT_EQ(back.gpu, f.gpu);
  std::string r = format_failure_report("t", {back});
  EXPECT_NE(r.find("  error_file: <N/A>\n  gpu       : GPU 2 (GPU-abc, NVIDIA H200): Xid 79 (GPU "
                   "has fallen off the bus)\n  traceback : "),
            std::string::npos)
      << r;
  // Without a note there is no such line, and a record without the key (an older agent's) reads.
  EXPECT_EQ(format_failure_report("t", {make(0, 1, 1)}).find("gpu       :"), std::string::npos);
  EXPECT_EQ(failure_from_json(to_json(make(0, 1, 1))).gpu, "");
  EXPECT_EQ(to_json(make(0, 1, 1)).find("\"gpu\""), std::string::npos);
}

TEST(FailureReport, TheOtherFailuresFollowInRankOrderWhateverTheirTime) {
  std::string r = format_failure_report(
      "t", {make(5, 300, 1), make(2, 400, 1), make(7, 100, 1), make(0, 350, 1)});
  const auto r0 = r.find("[0]:"), r2 = r.find("[2]:"), r5 = r.find("[5]:");
  const auto root = r.find("Root Cause (first observed failure):\n[7]:\n");
  ASSERT_NE(root, std::string::npos) << r;
  EXPECT_LT(r0, r2);
  EXPECT_LT(r2, r5);
  EXPECT_LT(r5, root);
  EXPECT_EQ(r.find("[7]:"), root + std::string("Root Cause (first observed failure):\n").size());
}

TEST(FailureReport, AnErrorFileAndAMessageTheTracebackLacksAreBothShown) {
  WorkerFailure f = make(1, 1, 1);
  f.error_file = "/tmp/attempt_0/1/error.json";
  f.message = "ValueError: bad shape";
  f.traceback = "Traceback (most recent call last):\n  File \"t.py\", line 3";
  std::string r = format_failure_report("t", {f});
  EXPECT_NE(r.find("  error_file: /tmp/attempt_0/1/error.json\n"), std::string::npos) << r;
  EXPECT_NE(r.find("  traceback : Traceback (most recent call last):\n    File \"t.py\", line 3\n"
                   "  ValueError: bad shape\n"),
            std::string::npos)
      << r;
  // Neither traceback nor message: <N/A>.
  WorkerFailure bare = make(1, 1, 1);
  bare.traceback.clear();
  bare.message.clear();
  EXPECT_NE(format_failure_report("t", {bare}).find("  traceback : <N/A>\n"), std::string::npos);
}

TEST(FailureReport, ALongTracebackShowsItsEndAndWhereTheRestIs) {
  WorkerFailure f = make(0, 1, 1);
  f.error_file = "/logs/error.json";
  f.traceback.clear();
  for (int i = 0; i < 1000; ++i) f.traceback += "frame " + std::to_string(i) + "\n";
  std::string r = format_failure_report("train.py", {f});
  EXPECT_NE(r.find("frame 999"), std::string::npos);
  EXPECT_NE(r.find("frame 900"), std::string::npos);  // the last 100 lines
  EXPECT_EQ(r.find("frame 899\n"), std::string::npos) << r;
  EXPECT_NE(r.find("bytes before these left out; the whole file: /logs/error.json"),
            std::string::npos);
  // One line longer than the bound: its end.
  f.traceback = std::string(100000, 'x') + "END";
  r = format_failure_report("train.py", {f});
  EXPECT_LT(r.size(), 20000u);
  EXPECT_NE(r.find("xxxEND"), std::string::npos);
}

TEST(FailureReport, RootCauseIsTheEarliestAndTheFirstOfATie) {
  EXPECT_EQ(root_cause({make(0, 30, 1), make(1, 10, 1), make(2, 20, 1)}), 1u);
  EXPECT_EQ(root_cause({make(0, 10, 1), make(1, 10, 1)}), 0u);
  EXPECT_EQ(root_cause({make(4, 1, 1)}), 0u);
}

TEST(FailureReport, RankListsShortenRunsOfThreeOrMore) {
  EXPECT_EQ(rank_list({}), "");
  EXPECT_EQ(rank_list({4}), "4");
  EXPECT_EQ(rank_list({4, 5}), "4, 5");
  EXPECT_EQ(rank_list({1, 3, 5, 6, 7, 8, 9}), "1, 3, 5-9");
  EXPECT_EQ(rank_list({0, 1, 2, 10, 11}), "0-2, 10, 11");
}

TEST(FailureReport, ATimeoutIsSaidInTheReasonTheMessageOrTheTraceback) {
  WorkerFailure f = make(0, 1, 1);
  EXPECT_FALSE(is_timeout(f));
  f.reason = "hung: no heartbeat for 5 s";
  EXPECT_FALSE(is_timeout(f));
  f.message = "torch.distributed.DistBackendError: Socket Timed Out";
  EXPECT_TRUE(is_timeout(f));
  f = make(0, 1, 1);
  f.traceback = "grpc: DEADLINE EXCEEDED";
  EXPECT_TRUE(is_timeout(f));
  f = make(0, 1, 1);
  f.reason = "timeout";
  EXPECT_TRUE(is_timeout(f));
}

TEST(FailureReport, TimeoutSuspectsAreEveryRankThatHadNotFailed) {
  WorkerFailure waited = make(2, 10, 1);
  waited.message = "Wait timeout";
  // The root cause (rank 2, earliest) timed out; rank 0 failed too; ranks beyond the world and
  // negative ranks are ignored.
  EXPECT_EQ(timeout_suspects({make(0, 20, 1), waited, make(9, 30, 1), make(-1, 40, 1)}, 4),
            (std::vector<int>{1, 3}));
  // A timeout that is not the root cause names nobody.
  WorkerFailure later = waited;
  later.timestamp = 50;
  EXPECT_TRUE(timeout_suspects({make(0, 20, 1), later}, 4).empty());
  // The world unknown: nobody.
  EXPECT_TRUE(timeout_suspects({waited}, 0).empty());
}

}  // namespace
}  // namespace cohort::launch

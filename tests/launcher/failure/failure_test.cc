// Failure records and round outcomes: their trip through the store (JSON), wait statuses in
// torchrun's terms, and signal names.
#include "failure/failure.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "cohort/error.h"

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

// Found by fuzz_error_file: a traceback cut inside a UTF-8 sequence made the failure's trip
// through the store throw (nlohmann::json refuses to write invalid UTF-8).
TEST(FailureReport, InvalidUtf8InATracebackSurvivesTheTripThroughTheStore) {
  WorkerFailure f = make(2, 5, 1);
  f.traceback = "box \xe2\x96";
  f.message = "bad \xff byte";
  WorkerFailure back = failure_from_json(to_json(f));
  EXPECT_EQ(back.global_rank, 2);
  EXPECT_EQ(back.message, "bad \xef\xbf\xbd byte");  // U+FFFD
  EXPECT_EQ(back.traceback.rfind("box ", 0), 0u);
}

TEST(Failure, EveryFieldSurvivesTheTripThroughTheStore) {
  WorkerFailure f = make(5, 1764790000.5, -11);
  f.node_rank = 2;
  f.local_rank = 1;
  f.error_file = "/logs/attempt_0/1/error.json";
  f.gpu = "Xid 79";
  const WorkerFailure b = failure_from_json(to_json(f));
  EXPECT_EQ(b.node_rank, 2);
  EXPECT_EQ(b.local_rank, 1);
  EXPECT_EQ(b.global_rank, 5);
  EXPECT_EQ(b.host, "node1");
  EXPECT_EQ(b.pid, 105);
  EXPECT_EQ(b.exit_code, -11);
  EXPECT_DOUBLE_EQ(b.timestamp, 1764790000.5);
  EXPECT_EQ(b.reason, f.reason);
  EXPECT_EQ(b.error_file, f.error_file);
  EXPECT_EQ(b.message, f.message);
  EXPECT_EQ(b.traceback, "line one\nline two");
  EXPECT_EQ(b.gpu, "Xid 79");

  const auto list = failures_from_json(to_json(std::vector<WorkerFailure>{f, make(0, 1, 3)}));
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].global_rank, 5);
  EXPECT_EQ(list[1].exit_code, 3);
  EXPECT_TRUE(failures_from_json(to_json(std::vector<WorkerFailure>{})).empty());
}

TEST(Failure, AnOutcomeOfEveryKindSurvivesTheTripThroughTheStore) {
  for (auto kind : {Outcome::kSucceeded, Outcome::kFailed, Outcome::kAborted, Outcome::kRescale}) {
    Outcome o;
    o.kind = kind;
    o.node_rank = 3;
    o.restarts = 2;
    o.detail = "SIGTERM received on node 3";
    const Outcome b = outcome_from_json(to_json(o));
    EXPECT_EQ(b.kind, kind);
    EXPECT_EQ(b.node_rank, 3);
    EXPECT_EQ(b.restarts, 2);
    EXPECT_EQ(b.detail, o.detail);
    EXPECT_FALSE(b.first_failure);
  }
  Outcome failed;
  failed.kind = Outcome::kFailed;
  failed.first_failure = make(7, 9, 1);
  const Outcome b = outcome_from_json(to_json(failed));
  ASSERT_TRUE(b.first_failure);
  EXPECT_EQ(b.first_failure->global_rank, 7);
  EXPECT_NE(to_json(failed).find("\"kind\":\"failed\""), std::string::npos) << to_json(failed);
}

TEST(Failure, MalformedRecordsAreProtocolErrorsNamingWhatTheyAre) {
  auto message_of = [](auto&& parse) -> std::string {
    try {
      parse();
    } catch (const ProtocolError& e) {
      return e.what();
    }
    return "no ProtocolError";
  };
  EXPECT_NE(
      message_of([] { failure_from_json("{\"host\": \"a\"}"); }).find("malformed failure record"),
      std::string::npos);
  EXPECT_NE(
      message_of([] { failures_from_json("[{\"node_rank\": 0}]"); }).find("malformed failure list"),
      std::string::npos);
  EXPECT_NE(message_of([] { failures_from_json("not json"); }).find("malformed failure list"),
            std::string::npos);
  const std::string unknown = message_of([] { outcome_from_json(R"({"kind": "exploded"})"); });
  EXPECT_NE(unknown.find("malformed outcome record"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("unknown kind 'exploded'"), std::string::npos) << unknown;
  EXPECT_NE(message_of([] { outcome_from_json("{}"); }).find("malformed outcome record"),
            std::string::npos);
}

TEST(Failure, ANumberThatIsNoWholeIntIsMalformedNotConverted) {
  // Any client of the store can write these records; a fraction or a number past int's range was
  // converted with static_cast (undefined for a double: 1e300 became INT_MIN).
  for (const char* bad :
       {R"([{"node_rank": 0, "local_rank": 0, "global_rank": 1e300}])",
        R"([{"node_rank": 0.5, "local_rank": 0, "global_rank": 0}])",
        R"([{"node_rank": 0, "local_rank": 0, "global_rank": 0, "exit_code": 4294967297}])",
        R"([{"node_rank": 0, "local_rank": 0, "global_rank": 0, "pid": -1e20}])"}) {
    EXPECT_THROW(failures_from_json(bad), ProtocolError) << bad;
  }
  EXPECT_THROW(outcome_from_json(R"({"kind": "failed", "restarts": 1e300})"), ProtocolError);
  EXPECT_THROW(outcome_from_json(R"({"kind": "failed", "node_rank": 2.5})"), ProtocolError);
}

TEST(Failure, ARecordWithOnlyItsRanksReadsWithDefaults) {
  const WorkerFailure f =
      failure_from_json(R"({"node_rank": 1, "local_rank": 2, "global_rank": 3, "new": true})");
  EXPECT_EQ(f.global_rank, 3);
  EXPECT_EQ(f.host, "");
  EXPECT_EQ(f.exit_code, 0);
  const Outcome o = outcome_from_json(R"({"kind": "rescale"})");
  EXPECT_EQ(o.kind, Outcome::kRescale);
  EXPECT_EQ(o.restarts, 0);
}

TEST(Failure, MakeFailureUsesTheReasonAsItsMessageAndStampsNow) {
  FailureSite site{1, 2, 6, "n2", 4242};
  const double before = wall_clock_now();
  const WorkerFailure f = make_failure(site, -9, "killed by SIGKILL (signal 9)");
  const double after = wall_clock_now();
  EXPECT_EQ(f.node_rank, 1);
  EXPECT_EQ(f.local_rank, 2);
  EXPECT_EQ(f.global_rank, 6);
  EXPECT_EQ(f.host, "n2");
  EXPECT_EQ(f.pid, 4242);
  EXPECT_EQ(f.exit_code, -9);
  EXPECT_EQ(f.message, f.reason);
  EXPECT_GE(f.timestamp, before);
  EXPECT_LE(f.timestamp, after);
  EXPECT_DOUBLE_EQ(make_failure(site, 1, "x", 12.5).timestamp, 12.5);
}

TEST(Failure, WaitStatusesInTorchrunsTerms) {
  const ExitDescription ok = describe_exit(W_EXITCODE(0, 0));
  EXPECT_FALSE(ok.failed);
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.reason, "exited with code 0");
  const ExitDescription three = describe_exit(W_EXITCODE(3, 0));
  EXPECT_TRUE(three.failed);
  EXPECT_EQ(three.exit_code, 3);
  EXPECT_EQ(three.reason, "exited with code 3");
  const ExitDescription segv = describe_exit(W_EXITCODE(0, SIGSEGV));
  EXPECT_TRUE(segv.failed);
  EXPECT_EQ(segv.exit_code, -SIGSEGV);
  EXPECT_EQ(segv.reason, "killed by SIGSEGV (signal 11)");
}

TEST(Failure, SignalNamesBothWays) {
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGRTMIN + 1), "SIG" + std::to_string(SIGRTMIN + 1));
  EXPECT_EQ(signal_number("SIGTERM"), SIGTERM);
  EXPECT_EQ(signal_number("TERM"), SIGTERM);
  EXPECT_EQ(signal_number(" USR1 "), SIGUSR1);
  EXPECT_EQ(signal_number("15"), 15);
  EXPECT_EQ(signal_number("0"), 0);
  EXPECT_EQ(signal_number(std::to_string(NSIG)), 0);
  EXPECT_EQ(signal_number("SIGNOPE"), 0);
  EXPECT_EQ(signal_number(""), 0);
}

}  // namespace
}  // namespace cohort::launch

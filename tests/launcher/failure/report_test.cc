// The failure summary's layout, error files in both torchrun formats, and output line handling.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "failure/error_file.h"
#include "failure/failure.h"
#include "failure/failure_report.h"
#include "workers/output.h"

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

class ErrorFileTest : public ::testing::Test {
 protected:
  std::string path_ = "/tmp/cohort_error_file_test_" + std::to_string(::getpid()) + ".json";
  void TearDown() override { ::unlink(path_.c_str()); }
  void write(const std::string& s) { std::ofstream(path_) << s; }
};

TEST_F(ErrorFileTest, RecordFormat) {
  write(
      R"({"message": {"message": "ValueError: boom", "extraInfo": {"py_callstack": "Traceback...", "timestamp": "1700000000"}}})");
  auto c = read_error_file(path_);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->message, "ValueError: boom");
  EXPECT_EQ(c->traceback, "Traceback...");
  EXPECT_EQ(c->timestamp, 1700000000);
}

TEST_F(ErrorFileTest, PlainFormat) {
  write(R"({"message": "Signal 11 (SIGSEGV) received by PID 7", "timestamp": 1700000001})");
  auto c = read_error_file(path_);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->message, "Signal 11 (SIGSEGV) received by PID 7");
  EXPECT_EQ(c->timestamp, 1700000001);
}

TEST_F(ErrorFileTest, MissingAndMalformed) {
  EXPECT_FALSE(read_error_file(path_));
  write("{not json");
  auto c = read_error_file(path_);
  ASSERT_TRUE(c);
  EXPECT_NE(c->message.find("unreadable error file"), std::string::npos);
  write(R"({"message": 42})");
  EXPECT_NE(read_error_file(path_)->message.find("unreadable"), std::string::npos);
}

TEST_F(ErrorFileTest, ParentCopyCarriesTheErrorCode) {
  write(R"({"message": {"message": "E: x", "extraInfo": {"timestamp": "1"}}})");
  auto child = read_error_file(path_);
  std::string parent = path_ + ".parent";
  write_parent_error_file(parent, child, "ignored", 3);
  auto p = read_error_file(parent);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->message, "E: x");
  EXPECT_NE(p->raw.find("\"errorCode\":3"), std::string::npos) << p->raw;
  ::unlink(parent.c_str());
}

TEST(LineSplitter, WholeLinesOnlyAcrossChunks) {
  LineSplitter s(8);
  std::vector<std::string> lines;
  auto on = [&](std::string_view l) { lines.emplace_back(l); };
  s.feed("ab", on);
  s.feed("c\nde", on);
  s.feed("f\n\n", on);
  s.feed("0123456789", on);  // longer than the limit: handed out in pieces
  s.finish(on);
  EXPECT_EQ(lines, (std::vector<std::string>{"abc", "def", "", "01234567", "89"}));
}

TEST(TailBuffer, KeepsTheLastLines) {
  TailBuffer t(3, 1000);
  for (int i = 0; i < 10; ++i) t.push("line " + std::to_string(i));
  EXPECT_EQ(t.text(), "line 7\nline 8\nline 9");
}

}  // namespace
}  // namespace cohort::launch

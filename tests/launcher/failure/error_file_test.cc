// torchrun's error files on the launcher's side: reading both formats, and the parent's copy.
// (The format itself: tests/base/error_file_format_test.cc.)
#include "failure/error_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace cohort::launch {
namespace {

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

TEST_F(ErrorFileTest, WithoutAChildFileTheParentCopyIsBuiltFromTheMessage) {
  write_parent_error_file(path_, std::nullopt, "node 1 lost: no keep-alive for 30 s", 1);
  auto p = read_error_file(path_);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->message, "node 1 lost: no keep-alive for 30 s");
  EXPECT_GT(p->timestamp, 0);
  // Written through a temporary file that is renamed: none is left behind.
  EXPECT_NE(::access((path_ + ".tmp." + std::to_string(::getpid())).c_str(), F_OK), 0);
}

TEST_F(ErrorFileTest, AParentCopyThatCannotBeWrittenIsSkippedQuietly) {
  EXPECT_NO_THROW(write_parent_error_file("/nonexistent-dir/error.json", std::nullopt, "x", 1));
  EXPECT_FALSE(read_error_file("/nonexistent-dir/error.json"));
}

}  // namespace
}  // namespace cohort::launch

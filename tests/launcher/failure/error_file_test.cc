// torchrun's error files on the launcher's side: reading both formats (bounded, only regular files,
// off the loop), and the parent's copy.
// (The format itself: tests/base/error_file_format_test.cc.)
#include "failure/error_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <fstream>

#include "failure/bounded_file.h"
#include "failure/error_file_reader.h"

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

TEST_F(ErrorFileTest, WhatIsNotARegularFileIsNotRead) {
  // A FIFO would hold the reader until a writer came; a link could point at /dev/zero.
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  auto fifo = read_error_file(path_);
  ASSERT_TRUE(fifo);
  EXPECT_EQ(fifo->message, "the error file is a FIFO; not read");
  ::unlink(path_.c_str());
  ASSERT_EQ(::symlink("/dev/zero", path_.c_str()), 0);
  auto link = read_error_file(path_);
  ASSERT_TRUE(link);
  EXPECT_EQ(link->message, "the error file is a symbolic link; not read");
}

TEST_F(ErrorFileTest, ALargeFileIsReadFromItsEndWithinTheBound) {
  std::string big(kMaxErrorFileBytes + 4096, 'x');
  big.replace(big.size() - 4, 4, "TAIL");
  write(big);
  auto c = read_error_file(path_);
  ASSERT_TRUE(c);
  EXPECT_NE(c->message.find("over the 1 MiB cohortrun reads"), std::string::npos) << c->message;
  EXPECT_EQ(c->traceback.size(), kMaxErrorFileBytes);
  EXPECT_TRUE(c->traceback.ends_with("TAIL"));
}

TEST(BoundedFile, SaysWhyItRefuses) {
  EXPECT_EQ(read_bounded_file("/nonexistent/x", 10).status, BoundedFile::Status::kMissing);
  auto dir = read_bounded_file("/tmp", 10);
  EXPECT_EQ(dir.status, BoundedFile::Status::kRefused);
  EXPECT_EQ(dir.problem, "is a directory");
  EXPECT_EQ(read_bounded_file("/dev/null", 10).problem, "is a character device");
}

// What a reading process writes (write_bounded_file, system calls only) reads back as the file
// read in place would.
TEST_F(ErrorFileTest, WrittenByAReaderProcessItReadsAsInPlace) {
  auto through_a_file = [&](size_t max) {
    std::FILE* out = std::tmpfile();
    EXPECT_TRUE(write_bounded_file(path_.c_str(), max, ::fileno(out)));
    std::string bytes;
    std::rewind(out);
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, out)) > 0;) bytes.append(buf, n);
    std::fclose(out);
    return parse_written_bounded_file(bytes, max);
  };
  auto same = [&](size_t max) {
    BoundedFile a = read_bounded_file(path_, max), b = through_a_file(max);
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.text, b.text);
    EXPECT_EQ(a.size, b.size);
    EXPECT_EQ(a.problem, b.problem);
  };
  same(10);  // missing
  write("0123456789abcdef");
  same(100);
  same(10);  // its last 10 bytes
  EXPECT_EQ(through_a_file(10).text, "6789abcdef");
  ::unlink(path_.c_str());
  ASSERT_EQ(::mkfifo(path_.c_str(), 0600), 0);
  same(10);
  ::unlink(path_.c_str());
  ASSERT_EQ(::symlink("/dev/zero", path_.c_str()), 0);
  same(10);
  EXPECT_EQ(through_a_file(10).problem, "is a symbolic link");
}

TEST(BoundedFile, WhatAReaderLeftUnfinishedIsRefused) {
  auto cut = parse_written_bounded_file("{\"message\": \"half", 100);
  EXPECT_EQ(cut.status, BoundedFile::Status::kRefused);
  EXPECT_NE(cut.problem.find("its reader ended before it finished"), std::string::npos);
}

TEST_F(ErrorFileTest, TheReaderDeliversOnTheLoop) {
  write(R"({"message": "E: read off the loop", "timestamp": 1})");
  asio::io_context io;
  auto clock = make_asio_loop_clock(io);
  ErrorFileReader reader(io, *clock, std::chrono::seconds(10));
  std::optional<ErrorFileContent> got;
  bool called = false;
  reader.read(path_, [&](std::optional<ErrorFileContent> c) {
    called = true;
    got = std::move(c);
  });
  EXPECT_FALSE(called);                     // never from inside read()
  EXPECT_EQ(reader.children().size(), 1u);  // its reading process, not a stray to kill
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((!called || !reader.children().empty()) && std::chrono::steady_clock::now() < deadline)
    io.run_one_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(called);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->message, "E: read off the loop");
  EXPECT_TRUE(reader.children().empty());  // reaped
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

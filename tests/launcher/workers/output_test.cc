// Workers' output: lines, tails, redraws, the filtered log, and a pump routing a pipe's bytes to
// the console (with torchrun's prefix), the log file, the tail and the filtered log.
#include "workers/output.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cohort/error.h"
#include "loop/console.h"

namespace cohort::launch {
namespace {

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

TEST(TailBuffer, KeepsAboutMaxBytesButAlwaysTheLastLine) {
  TailBuffer t(100, 10);
  EXPECT_TRUE(t.empty());
  t.push("aaaa");
  t.push("bbbb");
  t.push("cccc");  // 12 bytes: the first line goes
  EXPECT_EQ(t.text(), "bbbb\ncccc");
  t.push(std::string(25, 'x'));  // one line longer than the bound: cut to it, and kept alone
  EXPECT_EQ(t.text(), std::string(10, 'x'));
  EXPECT_FALSE(t.empty());
}

TEST(LastRedraw, WhatATerminalWouldShow) {
  EXPECT_EQ(last_redraw("plain"), "plain");
  EXPECT_EQ(last_redraw("10%\r50%\r100%"), "100%");
  EXPECT_EQ(last_redraw("10%\r50%\r"), "50%");
  EXPECT_EQ(last_redraw("\r\r"), "");
}

TEST(FilteredLog, KeepsMatchingLinesWithTheirPrefixOnce) {
  const std::string path = std::filesystem::temp_directory_path() /
                           ("cohort_filtered_" + std::to_string(::getpid()) + ".log");
  {
    FilteredLog log(path, {"loss", "NaN"});
    log.offer("[default0]:", "step 1 loss 0.5");
    log.offer("[default1]:", "nothing here");
    log.offer("[default1]:", "loss is NaN");  // two needles: one line
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "[default0]:step 1 loss 0.5\n[default1]:loss is NaN\n");
  std::filesystem::remove(path);
  EXPECT_THROW(FilteredLog("/nonexistent-dir/filtered.log", {"x"}), IoError);
}

// Reads a whole descriptor from its start.
std::string read_all(int fd) {
  std::string text;
  char buf[4096];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof(buf), at);
    if (n <= 0) return text;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

class StreamPumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe2(fds_, O_CLOEXEC), 0);
    ASSERT_NE(console_file_, nullptr);
    ASSERT_NE(log_file_, nullptr);
  }
  void TearDown() override {
    if (fds_[1] >= 0) ::close(fds_[1]);
    std::fclose(console_file_);
    std::fclose(log_file_);
  }
  void write_and_close(std::string_view bytes) {
    write_fully(fds_[1], bytes);
    ::close(fds_[1]);
    fds_[1] = -1;
  }

  asio::io_context io_;
  int fds_[2] = {-1, -1};
  std::FILE* console_file_ = std::tmpfile();
  std::FILE* log_file_ = std::tmpfile();
  ConsoleStream console_{io_, ::fileno(console_file_)};
};

TEST_F(StreamPumpTest, EveryRouteGetsItsCopyAndEofIsCalledOnce) {
  PumpRoute route;
  route.console = &console_;
  route.prefix = "[default1]:";
  route.file_fd = ::dup(::fileno(log_file_));  // owned by the pump
  route.keep_tail = true;
  const std::string filtered_path = std::filesystem::temp_directory_path() /
                                    ("cohort_pump_filtered_" + std::to_string(::getpid()));
  route.filtered = std::make_shared<FilteredLog>(filtered_path, std::vector<std::string>{"err"});
  route.filtered_prefix = "[default1]:";
  int eofs = 0;
  auto pump = StreamPump::start(io_, fds_[0], route, [&] { ++eofs; });
  const std::string bytes = "one\r\ntwo 10%\r50%\rerr: three\nno newline";
  write_and_close(bytes);
  io_.run();

  EXPECT_EQ(eofs, 1);
  EXPECT_TRUE(pump->at_eof());
  // The file gets every byte as it came; the console a prefix at each line and each redraw.
  EXPECT_EQ(read_all(::fileno(log_file_)), bytes);
  EXPECT_EQ(read_all(::fileno(console_file_)),
            "[default1]:one\r\n[default1]:two 10%\r[default1]:50%\r[default1]:err: three\n"
            "[default1]:no newline");
  // The tail keeps what a terminal showed of each line, the last one without its newline.
  EXPECT_EQ(pump->tail().text(), "one\nerr: three\nno newline");
  std::ifstream in(filtered_path);
  std::stringstream filtered;
  filtered << in.rdbuf();
  EXPECT_EQ(filtered.str(), "[default1]:two 10%\r50%\rerr: three\n");
  std::filesystem::remove(filtered_path);
}

TEST_F(StreamPumpTest, WithoutAPrefixTheConsoleGetsTheBytesAsTheyAre) {
  PumpRoute route;
  route.console = &console_;
  auto pump = StreamPump::start(io_, fds_[0], route, [] {});
  write_and_close("a\rb\nc");
  io_.run();
  EXPECT_EQ(read_all(::fileno(console_file_)), "a\rb\nc");
  EXPECT_TRUE(pump->tail().empty());  // keep_tail off
}

TEST_F(StreamPumpTest, AStoppedPumpNeverCallsBack) {
  PumpRoute route;
  route.console = &console_;
  bool called = false;
  auto pump = StreamPump::start(io_, fds_[0], route, [&] { called = true; });
  write_and_close("late\n");  // before stop(): its reader still open, so no SIGPIPE
  pump->stop();
  io_.run();
  EXPECT_FALSE(called);
  EXPECT_FALSE(pump->at_eof());
  EXPECT_EQ(read_all(::fileno(console_file_)), "");
}

TEST(TailBuffer, LeavesOutFaulthandlersListOfExtensionModules) {
  TailBuffer t(30, 8192);
  t.push("Fatal Python error: Aborted");
  t.push("  File \"train.py\", line 3 in <module>");
  t.push("");
  t.push("Extension modules: numpy.core._multiarray_umath, torch._C, torch._C._fft (total: 3)");
  EXPECT_EQ(t.text(), "Fatal Python error: Aborted\n  File \"train.py\", line 3 in <module>\n");
}

}  // namespace
}  // namespace cohort::launch

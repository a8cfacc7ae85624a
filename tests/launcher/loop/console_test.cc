// ConsoleStream: cohortrun's console never blocks the loop. On a pipe nobody reads, writes queue up
// to the bound and are dropped (counted) past it, and one line says so once the console drains; a
// console whose reader went away is closed; the descriptor the workers share stays blocking.
#include "loop/console.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/logger.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class ConsolePipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);  // as cohortrun does
    ASSERT_EQ(::pipe2(fds_, O_CLOEXEC), 0);
    // A small pipe, so that filling it takes one page.
    pipe_size_ = ::fcntl(fds_[1], F_SETPIPE_SZ, 4096);
    ASSERT_GT(pipe_size_, 0);
  }
  void TearDown() override {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  // Reads what is in the pipe now, without blocking.
  std::string read_available() {
    std::string text;
    char buf[4096];
    ::fcntl(fds_[0], F_SETFL, O_NONBLOCK);
    for (ssize_t n; (n = ::read(fds_[0], buf, sizeof buf)) > 0;)
      text.append(buf, static_cast<size_t>(n));
    return text;
  }

  asio::io_context io_;
  int fds_[2] = {-1, -1};
  int pipe_size_ = 0;
};

TEST_F(ConsolePipeTest, AnUnreadConsoleQueuesThenDropsAndSaysSoOnceItDrains) {
  ConsoleStream console(io_, fds_[1], /*max_queued=*/8192);
  EXPECT_FALSE(console.is_terminal());
  const std::string fill(static_cast<size_t>(pipe_size_), 'a');
  console.write(fill);  // fits in the pipe
  const std::string queued(8190, 'q');
  console.write(queued);              // the pipe is full: queued
  console.write("lost 1\nlost 2\n");  // past the bound: dropped
  EXPECT_EQ(console.dropped_bytes(), 14u);
  EXPECT_FALSE(console.closed());
  // The workers' descriptor (the original) was not made non-blocking.
  EXPECT_EQ(::fcntl(fds_[1], F_GETFL) & O_NONBLOCK, 0);

  std::string got;
  const std::string warning =
      "cohortrun: 2 line(s) of output were dropped here because this console was not read fast "
      "enough; --redirects 3 (with --log-dir) keeps every line in files\n";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.size() < fill.size() + queued.size() + warning.size() &&
         std::chrono::steady_clock::now() < deadline) {
    got += read_available();
    io_.restart();
    io_.run_for(2ms);
  }
  EXPECT_EQ(got, fill + queued + warning);
}

TEST_F(ConsolePipeTest, AConsoleWhoseReaderWentAwayIsClosedAndTheJobCarriesOn) {
  ConsoleStream console(io_, fds_[1]);
  ::close(fds_[0]);
  fds_[0] = -1;
  console.write("nobody reads this\n");
  EXPECT_TRUE(console.closed());
  console.write("nor this\n");
  EXPECT_EQ(console.dropped_bytes(), 27u);
  console.write_blocking("summary\n", 1s);  // returns at once
}

TEST_F(ConsolePipeTest, WriteBlockingWaitsAtMostItsTimeout) {
  ConsoleStream console(io_, fds_[1]);
  console.write(std::string(static_cast<size_t>(pipe_size_), 'a'));
  const auto start = std::chrono::steady_clock::now();
  console.write_blocking("summary\n", 0ms);  // the pipe is full and nobody reads: gives up
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(read_available().size(), static_cast<size_t>(pipe_size_));
  console.write_blocking("", 10s);  // room again: what was queued goes now
  EXPECT_EQ(read_available(), "summary\n");
}

TEST(Console, ARegularFileIsWrittenDirectlyAndLogLinesGoThroughTheSink) {
  asio::io_context io;
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    ConsoleStream console(io, ::fileno(f));
    console.write("one\n");
    spdlog::logger log("test", console_log_sink(console));
    log.set_pattern("%l: %v");
    log.warn("two");
    log.flush();
  }
  std::string text(64, '\0');
  text.resize(static_cast<size_t>(::pread(::fileno(f), text.data(), text.size(), 0)));
  EXPECT_EQ(text, "one\nwarning: two\n");
  std::fclose(f);
}

TEST(Console, ADescriptorThatIsNotOpenIsAClosedConsole) {
  asio::io_context io;
  const int fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ::close(fd);  // now a number with nothing behind it
  ConsoleStream console(io, fd);
  EXPECT_TRUE(console.closed());
  console.write("x");
  EXPECT_EQ(console.dropped_bytes(), 1u);
}

}  // namespace
}  // namespace cohort::launch

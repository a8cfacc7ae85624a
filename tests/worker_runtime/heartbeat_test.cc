#include "cohort/heartbeat.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace cohort {
namespace {

using namespace std::chrono_literals;

struct Pipe {
  int fds[2] = {-1, -1};
  Pipe() { EXPECT_EQ(::pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0); }
  ~Pipe() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
  }
  int drain() {
    char buf[4096];
    int total = 0;
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof(buf))) > 0) total += static_cast<int>(n);
    return total;
  }
};

TEST(Heartbeat, WritesOneByteAtMostEveryInterval) {
  Pipe p;
  HeartbeatWriter w(p.fds[1], 100ms);
  const auto t0 = HeartbeatWriter::Clock::time_point(1000s);
  EXPECT_TRUE(w.beat(t0));
  EXPECT_FALSE(w.beat(t0 + 50ms));
  EXPECT_FALSE(w.beat(t0 + 99ms));
  EXPECT_TRUE(w.beat(t0 + 100ms));
  EXPECT_TRUE(w.beat(t0 + 250ms));
  EXPECT_EQ(p.drain(), 3);
}

TEST(Heartbeat, FullPipeAndClosedReaderAreIgnored) {
  Pipe p;
  HeartbeatWriter w(p.fds[1], 0ns);
  // Fill the pipe: further beats hit EAGAIN and are dropped silently.
  char junk[65536] = {};
  while (::write(p.fds[1], junk, sizeof(junk)) > 0) {
  }
  auto t = HeartbeatWriter::Clock::time_point(1s);
  EXPECT_FALSE(w.beat(t += 1s));
  // The launcher went away: EPIPE, and no SIGPIPE kills us.
  ::close(p.fds[0]);
  p.fds[0] = -1;
  EXPECT_FALSE(w.beat(t += 1s));
  sigset_t pending;
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&pending, SIGPIPE));
}

TEST(Heartbeat, DisabledWithoutFd) {
  HeartbeatWriter w(-1);
  EXPECT_FALSE(w.beat());
  EXPECT_EQ(heartbeat_fd_from_env({}), std::nullopt);
  EXPECT_EQ(heartbeat_fd_from_env({{"COHORT_HEARTBEAT_FD", "7"}}), 7);
  EXPECT_EQ(heartbeat_fd_from_env({{"COHORT_HEARTBEAT_FD", "x"}}), std::nullopt);
  heartbeat();  // no COHORT_HEARTBEAT_FD in the test environment: a no-op
}

}  // namespace
}  // namespace cohort

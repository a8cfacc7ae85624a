// PosixSpawner on real processes: what a worker inherits (its streams, a pseudo-terminal, its
// CPU and memory binding) and how it ends.
#include "workers/process_spawner.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <string>

namespace cohort::launch {
namespace {

// Everything the stream says until EOF (or 10 s).
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;  // EOF, or EIO on a pseudo-terminal whose slave closed
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

SpawnRequest shell(const std::string& script) {
  SpawnRequest r;
  r.argv = {"/bin/sh", "-c", script};
  r.env = {"PATH=/usr/bin:/bin"};
  r.out = StreamMode::kPipe;
  r.err = StreamMode::kPipe;
  r.heartbeat = false;
  return r;
}

int finish(PosixSpawner& s, const SpawnedProcess& p) {
  for (int fd : {p.stdout_fd, p.stderr_fd, p.pidfd})
    if (fd >= 0) ::close(fd);
  return s.reap(p.pid);
}

TEST(PosixSpawner, BindsTheWorkersCpusAndMemory) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  int first = 0;
  while (!CPU_ISSET(first, &mine)) ++first;
  PosixSpawner s;
  SpawnRequest r =
      shell("grep Cpus_allowed_list /proc/self/status; grep -c ' bind:0' /proc/self/numa_maps");
  r.cpus = {first};
  r.mem_nodes = {0};
  SpawnedProcess p = s.spawn(r);
  const std::string out = read_all(p.stdout_fd);
  finish(s, p);
  EXPECT_NE(out.find("Cpus_allowed_list:\t" + std::to_string(first) + "\n"), std::string::npos)
      << out;
  // Every mapping of the process follows the memory policy set before exec.
  EXPECT_EQ(out.find("\n0\n"), std::string::npos) << out;
}

TEST(PosixSpawner, APseudoTerminalIsATerminalForTheWorker) {
  PosixSpawner s;
  SpawnRequest r = shell("[ -t 1 ] && echo out-tty; [ -t 2 ] && echo err-tty >&2; printf done");
  r.out = StreamMode::kPty;
  r.err = StreamMode::kPty;
  SpawnedProcess p = s.spawn(r);
  const std::string out = read_all(p.stdout_fd), err = read_all(p.stderr_fd);
  EXPECT_EQ(finish(s, p), 0);
  EXPECT_EQ(out, "out-tty\ndone");  // "\n", not "\r\n": output processing is off
  EXPECT_EQ(err, "err-tty\n");
}

TEST(PosixSpawner, APipeIsNot) {
  PosixSpawner s;
  SpawnedProcess p = s.spawn(shell("[ -t 1 ] || echo not-a-tty"));
  EXPECT_EQ(read_all(p.stdout_fd), "not-a-tty\n");
  finish(s, p);
}

}  // namespace
}  // namespace cohort::launch

// The Python worker module's answer to a hang probe (python/_cohort_worker/probe.py) against the
// C++ parser cohortrun reads it with (cohort/base/hang_probe.h): a real Python process, asked on
// its control socket while its main thread sleeps in a known function.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "cohort/base/hang_probe.h"
#include "cohort/base/heartbeat_line.h"
#include "cohort/base/worker_env_names.h"

extern char** environ;

namespace cohort::hang_probe {
namespace {

// Reads one line from `fd` within `timeout`; "" on timeout or end of file.
std::string read_line(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string line;
  char c;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return {};
    if (::read(fd, &c, 1) != 1) return {};
    if (c == '\n') return line;
    line.push_back(c);
  }
}

TEST(PythonProbe, WhatThePythonModuleAnswersTheLauncherReads) {
  int pipe_fds[2], sock[2];
  ASSERT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 3);  // dup2 clears close-on-exec
  posix_spawn_file_actions_adddup2(&actions, sock[1], 4);
  std::vector<std::string> env_text = {
      std::string(worker_env::kHeartbeatFd) + "=3",
      std::string(worker_env::kControlFd) + "=4",
      "PYTHONPATH=" COHORT_SOURCE_DIR "/python",
      "PATH=/usr/bin:/bin",
  };
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  // A file, so that the answer can show the source line. No threading import: the helper thread
  // must still tell the main thread.
  char script[] = "/tmp/cohort_probe_XXXXXX.py";
  const int sfd = ::mkstemps(script, 3);
  ASSERT_GE(sfd, 0);
  const std::string code =
      "import time, _cohort_worker\n"
      "_cohort_worker.start()\n"
      "def waiting_for_the_probe():\n"
      "    time.sleep(60)\n"
      "waiting_for_the_probe()\n";
  ASSERT_EQ(::write(sfd, code.data(), code.size()), static_cast<ssize_t>(code.size()));
  ::close(sfd);
  std::string python = COHORT_PYTHON;
  char* argv[] = {python.data(), script, nullptr};
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, python.c_str(), &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  ::close(sock[1]);

  // Its hello names the probe; then it answers, from its helper thread.
  std::string hello = read_line(pipe_fds[0], std::chrono::seconds(30));
  heartbeat_pipe::HeartbeatParser p;
  p.feed(hello + "\n");
  ASSERT_TRUE(p.hello().has_value()) << hello;
  EXPECT_EQ(p.hello()->pid, pid);
  EXPECT_TRUE(p.hello()->has(heartbeat_pipe::kProbeFeature)) << hello;
  // Asked before its main thread reached the sleep, it may answer from elsewhere: ask until
  // the sleep is where it is (each question gets its own answer, in turn).
  ProbeAnswer a;
  for (int64_t id = 1; id <= 100; ++id) {
    const std::string q = encode_request(id);
    ASSERT_EQ(::write(sock[0], q.data(), q.size()), static_cast<ssize_t>(q.size()));
    const std::string line = read_line(sock[0], std::chrono::seconds(10));
    ASSERT_FALSE(line.empty()) << "no answer to probe " << id;
    a = parse_answer(line);
    ASSERT_EQ(a.id, id);
    if (!a.threads.empty() && !a.threads[0].frames.empty() &&
        a.threads[0].frames.back().function == "waiting_for_the_probe")
      break;
    ::usleep(20000);
  }
  EXPECT_EQ(a.pid, pid);
  EXPECT_GT(a.time, 1.7e9);
  ASSERT_FALSE(a.threads.empty());
  EXPECT_TRUE(a.threads[0].main);
  EXPECT_EQ(a.threads[0].name, "MainThread");
  ASSERT_FALSE(a.threads[0].frames.empty());
  EXPECT_EQ(a.threads[0].frames.back().function, "waiting_for_the_probe");
  EXPECT_EQ(a.threads[0].frames.back().source, "time.sleep(60)");
  EXPECT_EQ(a.threads[0].frames.back().line, 4);
  EXPECT_TRUE(a.errors.empty());
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(pipe_fds[0]);
  ::close(sock[0]);
  ::unlink(script);
}

}  // namespace
}  // namespace cohort::hang_probe

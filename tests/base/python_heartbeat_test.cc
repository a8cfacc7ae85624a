// The Python module's heartbeat writer (python/cohort/_heartbeat.py) against the C++ parser that
// cohortrun reads it with (cohort/base/heartbeat_line.h): the two sides of one contract, each
// written once in its own language.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cohort/base/heartbeat_line.h"
#include "cohort/base/worker_env_names.h"

extern char** environ;

namespace cohort::heartbeat_pipe {
namespace {

// Runs `code` in COHORT_PYTHON with python/ on its path and the heartbeat pipe's write end named
// by COHORT_HEARTBEAT_FD; returns what it wrote on the pipe, and its pid in `pid_out`.
std::string run_python_writer(const std::string& code, pid_t* pid_out = nullptr) {
  int fds[2];
  EXPECT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);  // dup2 clears close-on-exec
  std::vector<std::string> env_text = {
      std::string(worker_env::kHeartbeatFd) + "=3",
      "PYTHONPATH=" COHORT_SOURCE_DIR "/python",
      "PATH=/usr/bin:/bin",
  };
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string python = COHORT_PYTHON;
  std::string dash_c = "-c";
  std::string script = code;
  char* argv[] = {python.data(), dash_c.data(), script.data(), nullptr};
  pid_t pid = -1;
  EXPECT_EQ(posix_spawn(&pid, python.c_str(), &actions, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "python exited " << status;
  if (pid_out) *pid_out = pid;
  return out;
}

TEST(PythonHeartbeat, WhatThePythonModuleWritesTheLauncherReads) {
  pid_t pid = -1;
  const std::string bytes = run_python_writer(
      // What cohortrun's sitecustomize does first: the worker takes its descriptors, says hello.
      "import _cohort_worker\n"
      "_cohort_worker.start()\n"
      "from _cohort_worker import heartbeat as h\n"
      "h.beat()\n"
      "h.report_step(1234567, 0.0125, 2048.5, 0.003)\n",
      &pid);
  HeartbeatParser p;
  EXPECT_TRUE(p.feed(bytes)) << bytes;
  EXPECT_EQ(p.malformed(), 0u) << bytes;
  ASSERT_TRUE(p.last_step().has_value()) << bytes;
  EXPECT_EQ(p.last_step()->step, 1234567);
  EXPECT_DOUBLE_EQ(p.last_step()->step_s, 0.0125);
  EXPECT_NEAR(p.last_step()->items_per_s, 2048.5, 1e-9);
  EXPECT_DOUBLE_EQ(p.last_step()->comm_s, 0.003);
  // Byte for byte what the C++ writer makes of the same report.
  EXPECT_NE(bytes.find(encode_step_report({1234567, 0.0125, 2048.5, 0.003})), std::string::npos)
      << bytes;
  // Its hello: this process, no control socket here so no probe; written first, byte for byte.
  ASSERT_TRUE(p.hello().has_value()) << bytes;
  EXPECT_EQ(p.hello()->pid, pid);
  EXPECT_TRUE(p.hello()->features.empty()) << bytes;
  EXPECT_EQ(bytes.rfind(encode_hello(Hello{kHelloVersion, pid, {}}), 0), 0u) << bytes;
}

TEST(PythonHeartbeat, TheOldImportPathStillBeats) {
  const std::string bytes = run_python_writer(
      "from cohort import _heartbeat as h\n"
      "h.beat()\n");
  HeartbeatParser p;
  EXPECT_TRUE(p.feed(bytes)) << bytes;
  EXPECT_TRUE(p.hello().has_value()) << bytes;  // `import cohort` starts the worker module
}

}  // namespace
}  // namespace cohort::heartbeat_pipe

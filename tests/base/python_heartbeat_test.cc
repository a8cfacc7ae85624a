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
  EXPECT_TRUE(p.beaten_by_hand()) << bytes;
}

// What cohortrun's sitecustomize does first (the worker takes its descriptors and says hello),
// then the module's writer at hand as `h`.
constexpr const char* kStartedWorker =
    "import time\n"
    "import _cohort_worker\n"
    "_cohort_worker.start()\n"
    "from _cohort_worker import heartbeat as h\n";

TEST(PythonHeartbeat, TheModulesOwnBeatsAreToldFromTheScripts) {
  // The optimizer hook's beats and step reports (auto_beat, add_step) are the module's own; a
  // beat by hand right after one still goes out, as one by hand, and so does a report averaged
  // with a step reported by hand.
  const std::string own =
      run_python_writer(std::string(kStartedWorker) +
                        "h.auto_beat()\n"
                        "h.add_step(time.monotonic() + 1, 5, 0.01, 0.0, 0.002)\n");
  HeartbeatParser module;
  EXPECT_TRUE(module.feed(own)) << own;
  EXPECT_EQ(module.malformed(), 0u) << own;
  ASSERT_TRUE(module.last_step().has_value()) << own;
  EXPECT_EQ(module.last_step()->step, 5);
  EXPECT_FALSE(module.beaten_by_hand()) << own;

  const std::string hand_after_hook = run_python_writer(std::string(kStartedWorker) +
                                                        "h.auto_beat()\n"
                                                        "_cohort_worker.beat()\n");
  HeartbeatParser beat;
  EXPECT_TRUE(beat.feed(hand_after_hook)) << hand_after_hook;
  EXPECT_TRUE(beat.beaten_by_hand()) << hand_after_hook;

  // The hook's report goes out as the module's; a step by hand within the report interval is
  // averaged into the next report, which is then the script's.
  const std::string mixed_report = run_python_writer(std::string(kStartedWorker) +
                                                     "t = time.monotonic()\n"
                                                     "h.add_step(t + 1, 5, 0.01, 0.0, 0.0)\n"
                                                     "_cohort_worker.report_step(6, 0.01)\n"
                                                     "h.add_step(t + 2, 7, 0.01, 0.0, 0.0)\n");
  EXPECT_NE(mixed_report.find("\nA 5 "), std::string::npos) << mixed_report;
  EXPECT_EQ(mixed_report.find(" 6 "), std::string::npos) << mixed_report;
  EXPECT_NE(mixed_report.find("\nS 7 "), std::string::npos) << mixed_report;
  HeartbeatParser report;
  EXPECT_TRUE(report.feed(mixed_report)) << mixed_report;
  ASSERT_TRUE(report.last_step().has_value()) << mixed_report;
  EXPECT_EQ(report.last_step()->step, 7);
  EXPECT_TRUE(report.beaten_by_hand()) << mixed_report;
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

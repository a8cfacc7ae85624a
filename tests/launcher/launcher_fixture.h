// Test helper: runs the real cohortrun binary on scripted workers and inspects what they left.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../common/free_port.h"
#include "../common/proc_text.h"
#include "../common/subprocess.h"
#include "../common/torch_python.h"

namespace cohort::testing {

struct RunResult {
  int status = -1;  // wait status; -1 if cohortrun did not finish in time
  std::string out, err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

// Polls until `pred` holds or the timeout passes.
template <typename Pred>
bool wait_for(Pred pred, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    ::usleep(2000);
  }
  return pred();
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort_launcher_test_XXXXXX";
    dir_ = ::mkdtemp(templ);
  }
  void TearDown() override {
    std::error_code ec;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ec);
  }

  // cohortrun with `args`; the worker command follows in `worker` (argv).
  std::vector<std::string> cohortrun(std::vector<std::string> args,
                                     std::vector<std::string> worker) {
    std::vector<std::string> argv{COHORTRUN_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), worker.begin(), worker.end());
    return argv;
  }
  std::vector<std::string> test_worker(std::vector<std::string> args) {
    std::vector<std::string> argv{"--no-python", TEST_WORKER_BIN, "--out", dir_};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  RunResult run(const std::vector<std::string>& argv, std::vector<std::string> env = {},
                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
    env.push_back("PYTHON_EXEC=" + torch_python());
    Subprocess p(argv, env);
    p.close_stdin();
    RunResult r;
    auto status = p.wait(timeout);
    r.out = p.read_all_stdout(std::chrono::milliseconds(2000));
    r.err = p.read_all_stderr(std::chrono::milliseconds(2000));
    r.status = status ? *status : -1;
    return r;
  }

  // "<rank>.attempt<a>.<what>" written by the test worker.
  std::string worker_file(int rank, int attempt, const std::string& what) const {
    return dir_ + "/" + std::to_string(rank) + ".attempt" + std::to_string(attempt) + "." + what;
  }
  bool exists(const std::string& path) const { return std::filesystem::exists(path); }

  std::map<std::string, std::string> worker_env(int rank, int attempt) const {
    std::map<std::string, std::string> env;
    std::ifstream f(worker_file(rank, attempt, "env"));
    std::string line;
    while (std::getline(f, line)) {
      auto eq = line.find('=');
      if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
    }
    return env;
  }

  // Every pid a worker recorded (itself and its children).
  std::vector<pid_t> worker_pids(int rank, int attempt) const {
    std::vector<pid_t> pids;
    std::ifstream f(worker_file(rank, attempt, "pid"));
    pid_t p;
    while (f >> p) pids.push_back(p);
    return pids;
  }

  std::string dir_;
};

inline size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace cohort::testing

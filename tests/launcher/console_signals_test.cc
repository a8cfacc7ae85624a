// The console as under torchrun (workers keep the terminal; partial lines pass at once) and
// signals in every phase of a job (store connect, rendezvous, worker start, the run, the stop):
// cohortrun is gone within the workers' grace plus one second. Real processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "launcher_fixture.h"

namespace cohort::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// cohortrun with its stdout and stderr on a pseudo-terminal (a user's terminal). The test reads
// the terminal's master side until cohortrun exits.
class OnATerminal {
 public:
  OnATerminal(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    master_ = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master_ < 0 || ::grantpt(master_) != 0 || ::unlockpt(master_) != 0)
      throw std::runtime_error("no pseudo-terminal");
    const std::string slave_name = ::ptsname(master_);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setsid();
      int slave = ::open(slave_name.c_str(), O_RDWR);
      ::dup2(slave, 1);
      ::dup2(slave, 2);
      for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      ::_exit(127);
    }
  }
  ~OnATerminal() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(master_);
  }
  // Exit status once cohortrun ends (reading its terminal meanwhile), or -1 after 60 s.
  int wait() {
    const auto deadline = Clock::now() + 60s;
    while (Clock::now() < deadline) {
      drain(50);
      int status;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        drain(50);
        return status;
      }
    }
    return -1;
  }
  const std::string& output() const { return output_; }

 private:
  void drain(int timeout_ms) {
    pollfd p{master_, POLLIN, 0};
    while (::poll(&p, 1, timeout_ms) > 0) {
      char buf[4096];
      ssize_t n = ::read(master_, buf, sizeof buf);
      if (n <= 0) return;
      output_.append(buf, static_cast<size_t>(n));
      timeout_ms = 0;
    }
  }
  int master_ = -1;
  pid_t pid_ = -1;
  std::string output_;
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST_F(LauncherTest, WorkersKeepTheTerminalAsUnderTorchrun) {
  for (const auto& flags : {std::vector<std::string>{}, std::vector<std::string>{"-t", "3"}}) {
    std::vector<std::string> args{"--nproc-per-node", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    OnATerminal t(cohortrun(args, test_worker({"--report-tty", "--lines", "2"})), {});
    int st = t.wait();
    ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << t.output();
    EXPECT_EQ(read_file(worker_file(1, 0, "tty")), "out=1 err=1\n") << flags.size();
    EXPECT_NE(t.output().find("err line 1"), std::string::npos) << t.output();
  }
  // Off a terminal, the streams are pipes, as they would be without cohortrun.
  auto r = run(cohortrun({"--nproc-per-node", "1"}, test_worker({"--report-tty"})));
  ASSERT_EQ(r.exit_code(), 0) << r.err;
  EXPECT_EQ(read_file(worker_file(0, 0, "tty")), "out=0 err=0\n");
}

TEST_F(LauncherTest, APartialLineReachesTheConsoleAtOnce) {
  Subprocess p(cohortrun({"--nproc-per-node", "1", "--term-timeout", "1"},
                         test_worker({"--partial", "epoch 1: 42%", "--sleep", "30"})));
  std::string err;
  const auto deadline = Clock::now() + 20s;
  while (err.find("epoch 1: 42%") == std::string::npos && Clock::now() < deadline)
    err += p.read_some_stderr(100ms);
  EXPECT_NE(err.find("epoch 1: 42%"), std::string::npos) << err;
  p.signal(SIGTERM);
  ASSERT_TRUE(p.wait(10s));
}

// Sends `sig` once `ready` holds and expects cohortrun to be gone within `bound` (the workers'
// grace plus one second), with 128+sig.
void expect_prompt_stop(Subprocess& p, const std::function<bool()>& ready, int sig,
                        std::chrono::milliseconds bound) {
  ASSERT_TRUE(wait_for(ready, 30s));
  const auto sent = Clock::now();
  p.signal(sig);
  auto st = p.wait(bound + 5s);
  ASSERT_TRUE(st) << "cohortrun did not stop";
  EXPECT_LT(Clock::now() - sent, bound);
  EXPECT_EQ(WEXITSTATUS(*st), 128 + sig) << p.read_all_stderr(1s);
}

TEST_F(LauncherTest, SignalWhileConnectingToTheStore) {
  // Nobody listens on the endpoint: the agent retries for the join timeout (10 minutes).
  const std::string endpoint = "127.0.0.1:" + std::to_string(free_port());
  Subprocess p(
      cohortrun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                 "--rdzv-conf", "is_host=0", "--local-addr", "127.0.0.1", "--term-timeout", "1"},
                test_worker({})));
  auto start = Clock::now();
  expect_prompt_stop(
      p, [&] { return Clock::now() - start > 500ms; }, SIGTERM, 2000ms);
}

TEST_F(LauncherTest, SignalWhileWaitingForTheOtherNodes) {
  const std::string port = std::to_string(free_port());
  Subprocess p(
      cohortrun({"--nnodes", "2", "--node-rank", "0", "--master-port", port, "--term-timeout", "1"},
                test_worker({})));
  auto start = Clock::now();
  expect_prompt_stop(
      p, [&] { return Clock::now() - start > 500ms; }, SIGINT, 2000ms);
  EXPECT_NE(p.read_all_stderr(1s).find("SIGINT received"), std::string::npos);
}

TEST_F(LauncherTest, SignalWhileTheWorkersStart) {
  Subprocess p(
      cohortrun({"--nproc-per-node", "8", "--term-timeout", "1"}, test_worker({"--sleep", "30"})));
  // As soon as the first worker exists: the others may not yet.
  expect_prompt_stop(
      p, [&] { return exists(worker_file(0, 0, "pid")); }, SIGTERM, 2000ms);
}

TEST_F(LauncherTest, SignalWhileRunningGivesTheWorkersTheirGrace) {
  Subprocess p(cohortrun({"--nproc-per-node", "2", "--term-timeout", "2"},
                         test_worker({"--trap-term", "--sleep", "30"})));
  expect_prompt_stop(
      p, [&] { return exists(worker_file(0, 0, "pid")) && exists(worker_file(1, 0, "pid")); },
      SIGTERM, 3000ms);
  EXPECT_TRUE(exists(dir_ + "/0.term"));  // the workers' own handlers ran
  EXPECT_TRUE(exists(dir_ + "/1.term"));
}

TEST_F(LauncherTest, SignalWhileStoppingEndsWithinTheGracePlusOneSecond) {
  Subprocess p(cohortrun({"--nproc-per-node", "2", "--shutdown-timeout", "2"},
                         test_worker({"--ignore-term", "--sleep", "60"})));
  // Workers that ignore SIGTERM: cohortrun waits the grace, then SIGKILLs them.
  expect_prompt_stop(
      p, [&] { return exists(worker_file(0, 0, "pid")) && exists(worker_file(1, 0, "pid")); },
      SIGTERM, 3000ms);
}

}  // namespace
}  // namespace cohort::testing

// ForkServer on a real Python (python/cohort/_forkserver.py) and real processes, with small
// pre-import lists so that no test waits for torch: the worker it forks is this process's child
// with the descriptors and command it asked for; a server that cannot serve says why.
// (fork_server_torch_test.cc runs the same through cohortrun with PyTorch.)
#include "workers/fork_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "workers/proc_file.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

const std::string kServerFile = COHORT_SOURCE_DIR "/python/cohort/_forkserver.py";
// Any Python 3 does (nothing here imports torch): Debian's, whatever is first on PATH.
#define COHORT_TORCH_PYTHON_FOR_TEST "/usr/bin/python3"

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

class ForkServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // This process plays cohortrun: the forked workers become its children.
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), 0);
    char templ[] = "/tmp/cohort_fork_server_test_XXXXXX";
    dir_ = ::mkdtemp(templ);
    script_ = dir_ + "/job.py";
    write(script_,
          "import os, sys\n"
          "print('argv', sys.argv[1:], 'mode', os.environ.get('COHORT_TEST_MODE'), flush=True)\n"
          "fd = int(os.environ['COHORT_HEARTBEAT_FD'])\n"
          "os.write(fd, b'beat')\n"
          "print('group', os.getpgid(0) == os.getpid(), 'torchless', 'torch' not in sys.modules)\n"
          "sys.exit(int(os.environ.get('COHORT_TEST_EXIT', '0')))\n");
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  SpawnRequest worker(std::vector<std::string> env = {}) {
    SpawnRequest r;
    r.argv = {COHORT_TORCH_PYTHON_FOR_TEST, "-u", script_, "first", "second"};
    r.env = {"PATH=/usr/bin:/bin", "PYTHONPATH=" + dir_};
    r.env.insert(r.env.end(), env.begin(), env.end());
    r.out = StreamMode::kPipe;
    r.err = StreamMode::kPipe;
    r.heartbeat = true;
    return r;
  }

  std::unique_ptr<ForkServer> start(const SpawnRequest& w, const std::string& preload) {
    ForkServerSpec spec;
    spec.server_file = kServerFile;
    spec.worker = w;
    spec.preload = preload;
    spec.log_file = dir_ + "/server.log";
    return std::make_unique<ForkServer>(io_, spawner_, spec, [] {});
  }

  // Runs the loop until the server is no longer starting (or 60 s).
  void settle(ForkServer& s) {
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    while (s.state() == ForkServer::State::kStarting && std::chrono::steady_clock::now() < deadline)
      io_.run_for(10ms);
    io_.restart();
  }

  std::optional<SpawnedProcess> fork(ForkServer& s, const SpawnRequest& r, std::string* why) {
    if (!s.send(r, why)) return std::nullopt;
    return s.collect(why);
  }

  asio::io_context io_;
  PosixSpawner spawner_;
  std::string dir_, script_;
};

TEST_F(ForkServerTest, CommandRunsTheWorkersEntryPointWithRoomForItsCommandLine) {
  const std::vector<std::string> script{"py", "-u", "train.py", std::string(300, 'a')};
  auto cmd = ForkServer::command("/x/_forkserver.py", script, 7);
  ASSERT_EQ(cmd.size(), 6u);
  EXPECT_EQ(cmd[0], "py");
  EXPECT_EQ(cmd[2], "/x/_forkserver.py");
  EXPECT_EQ(cmd[3], "--channel=7");
  EXPECT_EQ(cmd[4], "--script=train.py");
  size_t len = 0, worker_len = 0;
  for (const auto& a : cmd) len += a.size() + 1;
  for (const auto& a : script) worker_len += a.size() + 1;
  EXPECT_EQ(len, worker_len);
  auto mod = ForkServer::command("/x/_forkserver.py", {"py", "-u", "-m", "pkg.train"}, 7);
  ASSERT_GE(mod.size(), 5u);
  EXPECT_EQ(mod[4], "--module=pkg.train");
  EXPECT_TRUE(ForkServer::command("/x/s.py", {"py", "script.py"}, 7).empty());  // no -u
  EXPECT_TRUE(ForkServer::command("/x/s.py", {"py", "-u", "-c", "code"}, 7).empty());
  EXPECT_TRUE(ForkServer::command("/x/s.py", {"py", "-u", "-m"}, 7).empty());
}

TEST_F(ForkServerTest, ForksAWorkerThatIsThisProcesssChildWithItsOwnStreams) {
  auto server = start(worker(), "");
  settle(*server);
  ASSERT_EQ(server->state(), ForkServer::State::kReady) << server->reason();
  for (int exit_code : {0, 5}) {
    std::string why;
    auto p = fork(
        *server,
        worker({"COHORT_TEST_MODE=forked", "COHORT_TEST_EXIT=" + std::to_string(exit_code)}), &why);
    ASSERT_TRUE(p) << why;
    const std::vector<std::string> stat = proc_stat_fields(p->pid);
    ASSERT_GE(stat.size(), 3u);
    EXPECT_EQ(std::atoi(stat[1].c_str()), ::getpid()) << "not this process's child";
    EXPECT_EQ(std::atoi(stat[2].c_str()), p->pid) << "not the leader of its group";
    const std::string out = read_all(p->stdout_fd);
    EXPECT_NE(out.find("argv ['first', 'second'] mode forked"), std::string::npos) << out;
    EXPECT_NE(out.find("group True torchless True"), std::string::npos) << out;
    EXPECT_EQ(read_all(p->heartbeat_fd), "beat");
    const int status = spawner_.reap(p->pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == exit_code)
        << status << read_all(p->stderr_fd);
    for (int fd : {p->stdout_fd, p->stderr_fd, p->heartbeat_fd, p->control_fd, p->pidfd})
      if (fd >= 0) ::close(fd);
  }
}

TEST_F(ForkServerTest, AServerThatCannotStartIsGoneAndSaysWhy) {
  SpawnRequest w = worker();
  w.argv[0] = dir_ + "/no-such-python";
  auto server = start(w, "");
  settle(*server);
  EXPECT_EQ(server->state(), ForkServer::State::kGone);
  EXPECT_NE(server->reason().find("no-such-python"), std::string::npos) << server->reason();
  std::string why;
  EXPECT_FALSE(server->send(worker(), &why));
}

TEST_F(ForkServerTest, AServerWithAThreadRefusesAndSaysWhy) {
  write(dir_ + "/threaded.py",
        "import threading, time\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n");
  auto server = start(worker(), "threaded");
  settle(*server);
  EXPECT_EQ(server->state(), ForkServer::State::kRefused);
  EXPECT_NE(server->reason().find("thread"), std::string::npos) << server->reason();
}

TEST_F(ForkServerTest, AChangedPreImportedModuleMakesTheServerStale) {
  write(dir_ + "/marked.py", "VALUE = 1\n");
  auto server = start(worker(), "marked");
  settle(*server);
  ASSERT_EQ(server->state(), ForkServer::State::kReady) << server->reason();
  write(dir_ + "/marked.py", "VALUE = 2  # changed\n");
  std::string why;
  EXPECT_FALSE(fork(*server, worker(), &why));
  EXPECT_NE(why.find("marked.py"), std::string::npos) << why;
  EXPECT_EQ(server->state(), ForkServer::State::kRefused);
}

TEST_F(ForkServerTest, AWorkerWhoseEnvironmentDiffersBeyondTheAttemptsVariablesIsRefused) {
  auto server = start(worker({"OMP_NUM_THREADS=2"}), "");
  settle(*server);
  ASSERT_EQ(server->state(), ForkServer::State::kReady) << server->reason();
  std::string why;
  EXPECT_FALSE(server->send(worker({"OMP_NUM_THREADS=3"}), &why));
  EXPECT_NE(why.find("OMP_NUM_THREADS"), std::string::npos) << why;
  EXPECT_EQ(server->state(), ForkServer::State::kRefused);
}

TEST_F(ForkServerTest, TheServerDiesWithItsOwner) {
  auto server = start(worker(), "");
  settle(*server);
  const pid_t pid = server->pid();
  ASSERT_GT(pid, 0);
  server.reset();
  EXPECT_NE(::kill(pid, 0), 0) << "the server outlived its ForkServer";
}

}  // namespace
}  // namespace cohort::launch

// PosixSpawner on real processes: what a worker inherits (its streams, a pseudo-terminal, its
// CPU and memory binding, no other descriptor) and how it ends; the workers' cgroup.
#include "workers/process_spawner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "workers/worker_cgroup.h"

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
  for (int fd : {p.stdout_fd, p.stderr_fd, p.heartbeat_fd, p.control_fd, p.pidfd})
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

// "Z" for a zombie, "" when the process is gone, else its state letter.
std::string state_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = all.rfind(')');
  return paren == std::string::npos || paren + 2 >= all.size() ? "" : all.substr(paren + 2, 1);
}

TEST(PosixSpawner, AWorkerInheritsNoOtherDescriptor) {
  // Opened without O_CLOEXEC, as a library or whoever started cohortrun may have done.
  const int leaky = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(leaky, 3);
  const int kept = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  PosixSpawner s;
  SpawnRequest r = shell("exec sleep 30");  // sleep opens nothing: its table is what it got
  r.heartbeat = true;
  r.inherit_fds = {kept};
  SpawnedProcess p = s.spawn(r);
  const std::string exe = "/proc/" + std::to_string(p.pid) + "/exe";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  char target[256] = {};
  while (std::chrono::steady_clock::now() < deadline) {
    const ssize_t n = ::readlink(exe.c_str(), target, sizeof target - 1);
    // Exec'd, and asleep: before it sleeps, the dynamic loader may still hold a library open.
    if (n > 0 && std::string(target, static_cast<size_t>(n)).ends_with("/sleep") &&
        state_of(p.pid) == "S")
      break;
    ::usleep(1000);
  }
  std::vector<int> above_stdio;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(p.pid) + "/fd")) {
    const int fd = std::stoi(e.path().filename().string());
    if (fd > 2) above_stdio.push_back(fd);
  }
  ::kill(p.pid, SIGKILL);
  finish(s, p);
  ::close(leaky);
  ::close(kept);
  // The heartbeat pipe, the control socket and the descriptor the request names; never `leaky`.
  EXPECT_EQ(above_stdio.size(), 3u);
  EXPECT_EQ(std::count(above_stdio.begin(), above_stdio.end(), leaky), 0);
  EXPECT_EQ(std::count(above_stdio.begin(), above_stdio.end(), kept), 1);
}

// The pids in a cgroup's cgroup.procs.
std::vector<pid_t> members(const std::string& cgroup) {
  std::ifstream in(cgroup + "/cgroup.procs");
  std::vector<pid_t> pids;
  for (pid_t p; in >> p;) pids.push_back(p);
  return pids;
}

TEST(WorkerCgroup, HoldsWhatLeavesTheGroupAndClearsItsEnvironmentAndKillsItAll) {
  std::string why;
  auto cgroup = WorkerCgroup::create("test-" + std::to_string(::getpid()), &why);
  if (!cgroup) GTEST_SKIP() << "no cgroup here: " << why;
  const std::string path = cgroup->path();
  PosixSpawner s;
  // A child that leaves the worker's process group and session and clears its environment.
  SpawnRequest r = shell("env -i setsid sleep 300 & echo $!; exec sleep 300");
  r.cgroup_procs_fd = cgroup->procs_fd();
  SpawnedProcess p = s.spawn(r);
  std::string line;
  char c;
  while (::read(p.stdout_fd, &c, 1) == 1 && c != '\n') line += c;
  const pid_t escaped = std::stoi(line);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  // Until the child has left (env, then setsid, then exec sleep).
  while ((members(path).size() < 2 || ::getsid(escaped) != escaped) &&
         std::chrono::steady_clock::now() < deadline)
    ::usleep(2000);
  auto in_it = members(path);
  EXPECT_EQ(std::count(in_it.begin(), in_it.end(), p.pid), 1);
  EXPECT_EQ(std::count(in_it.begin(), in_it.end(), escaped), 1);
  EXPECT_NE(::getpgid(escaped), p.pid);  // out of the worker's group: killpg would miss it
  EXPECT_EQ(cgroup->kill_and_wait(std::chrono::seconds(5)), 2);
  EXPECT_FALSE(cgroup->populated());
  const int status = finish(s, p);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const std::string state = state_of(escaped);  // gone, or a zombie until init reaps it
  EXPECT_TRUE(state.empty() || state == "Z") << state;
  cgroup.reset();
  EXPECT_NE(::access(path.c_str(), F_OK), 0);  // the directory went with it
}

}  // namespace
}  // namespace cohort::launch

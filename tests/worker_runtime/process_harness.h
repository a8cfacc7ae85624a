// Spawning and reaping real worker processes for the multi-process tests: posix_spawn with a given
// environment, stdout/stderr captured in files, waits bounded by deadlines (pidfd + poll).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace cohort::test {

// A temporary directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cohort-rt-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  std::string out, err;  // capture files
  int status = -1;       // waitpid status once reaped
  bool reaped = false;

  std::string stdout_text() const { return read_file(out); }
  std::string stderr_text() const { return read_file(err); }
  bool exited_with(int code) const {
    return reaped && WIFEXITED(status) && WEXITSTATUS(status) == code;
  }
  bool killed_by(int sig) const { return reaped && WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

// Spawns argv with the current environment plus `env` (overriding), output into dir/<name>.out|err.
inline Child spawn(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env, const std::string& dir,
                   const std::string& name) {
  std::map<std::string, std::string> full;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) full[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) full[k] = v;
  std::vector<std::string> envs;
  for (const auto& [k, v] : full) envs.push_back(k + "=" + v);
  std::vector<char*> envp, args;
  for (auto& s : envs) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_copy = argv;
  for (auto& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  Child c;
  c.out = dir + "/" + name + ".out";
  c.err = dir + "/" + name + ".err";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int rc = posix_spawn(&c.pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) {
    c.pid = -1;
    return c;
  }
  c.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, c.pid, 0));
  return c;
}

// Waits for `c` to exit until `deadline`; true iff it did (then it is reaped).
inline bool wait_child(Child& c, std::chrono::steady_clock::time_point deadline) {
  if (c.reaped) return true;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return false;
    pollfd p{c.pidfd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000))) > 0) break;
  }
  ::waitpid(c.pid, &c.status, 0);
  ::close(c.pidfd);
  c.reaped = true;
  return true;
}

// Kills and reaps whatever is still running (test cleanup on failure paths).
inline void kill_all(std::vector<Child>& children) {
  for (auto& c : children) {
    if (!c.reaped && c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, &c.status, 0);
      ::close(c.pidfd);
      c.reaped = true;
    }
  }
}

// Lists /dev/shm entries whose names contain `needle`.
inline std::vector<std::string> shm_entries(const std::string& needle) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string n = e.path().filename().string();
    if (n.find(needle) != std::string::npos) out.push_back(n);
  }
  return out;
}

}  // namespace cohort::test

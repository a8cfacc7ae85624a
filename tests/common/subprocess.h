// Test helper: a child process with its stdin/stdout/stderr as pipes, killed (with its process
// group) when the handle goes away. Reads take deadlines.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace cohort::testing {

class Subprocess {
 public:
  // Starts argv[0] (searched in PATH) in a process group of its own. `env` entries "K=V" are
  // added to (or replace in) the current environment.
  explicit Subprocess(const std::vector<std::string>& argv,
                      const std::vector<std::string>& env = {}, bool merge_stderr = false) {
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
      throw std::runtime_error("pipe failed");
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      bool replaced = false;
      for (const auto& add : env)
        if (kv.substr(0, kv.find('=') + 1) == add.substr(0, add.find('=') + 1)) replaced = true;
      if (!replaced) envs.push_back(kv);
    }
    for (const auto& add : env) envs.push_back(add);
    std::vector<char*> cargv, cenv;
    for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
    cenv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::dup2(merge_stderr ? out[1] : err[1], 2);
      ::execvpe(cargv[0], cargv.data(), cenv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    stdin_ = in[1];
    stdout_ = out[0];
    stderr_ = err[0];
  }
  Subprocess(const Subprocess&) = delete;
  ~Subprocess() {
    if (!exited_) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int fd : {stdin_, stdout_, stderr_})
      if (fd >= 0) ::close(fd);
  }

  pid_t pid() const { return pid_; }

  // Closes the test's end of the child's stdout (a console that went away).
  void close_stdout() {
    if (stdout_ >= 0) ::close(stdout_);
    stdout_ = -1;
  }
  void close_stdin() {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
  }

  // The next line of stdout (without '\n'), or nullopt at EOF or after the timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto nl = out_buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = out_buf_.substr(0, nl);
        out_buf_.erase(0, nl + 1);
        return line;
      }
      if (!read_some(stdout_, &out_buf_, deadline)) return std::nullopt;
    }
  }

  // Everything on stdout until EOF (or the timeout), after any lines already read.
  std::string read_all_stdout(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (read_some(stdout_, &out_buf_, deadline)) {
    }
    std::string s = std::move(out_buf_);
    out_buf_.clear();
    return s;
  }
  // What stderr has within the timeout (one read; "" when nothing came).
  std::string read_some_stderr(std::chrono::milliseconds timeout) {
    std::string s;
    read_some(stderr_, &s, std::chrono::steady_clock::now() + timeout);
    return s;
  }
  std::string read_all_stderr(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::string s;
    while (read_some(stderr_, &s, deadline)) {
    }
    return s;
  }

  // Waits for exit; returns the wait status, or nullopt after the timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      int status;
      pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        status_ = status;
        return status;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      ::usleep(2000);
    }
  }

  void signal(int sig) { ::kill(pid_, sig); }

 private:
  static bool read_some(int fd, std::string* into, std::chrono::steady_clock::time_point deadline) {
    for (;;) {
      auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(left.count()));
      if (rc <= 0) return false;
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n <= 0) return false;
      into->append(buf, static_cast<size_t>(n));
      return true;
    }
  }

  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1, stderr_ = -1;
  std::string out_buf_;
  bool exited_ = false;
  int status_ = 0;
};

}  // namespace cohort::testing

// Test helper: a ProcessSpawner whose "processes" are descriptors the test controls. Each spawn
// makes an eventfd for the pidfd (readable once the test ends the process), real pipes for the
// streams it asks for (the test writes their other ends), a heartbeat pipe and a control socket
// pair (the test reads the questions and writes the answers); signals are
// recorded, and SIGKILL (or, when asked, SIGTERM) ends the process as a real one would. No
// process is ever started.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "workers/process_spawner.h"

namespace cohort::launch::testing {

class FakeSpawner final : public ProcessSpawner {
 public:
  struct Proc {
    pid_t pid = 0;
    SpawnRequest request;
    int exit_fd = -1;  // the eventfd behind the pidfd (the group owns the descriptor)
    int out_w = -1, err_w = -1, hb_w = -1;
    int control = -1;  // the worker's end of the control socket
    bool exited = false;
    int status = 0;
    std::vector<int> signals;  // in order
    std::string env(const std::string& key) const {
      for (const auto& e : request.env)
        if (e.rfind(key + "=", 0) == 0) return e.substr(key.size() + 1);
      return {};
    }
  };

  ~FakeSpawner() override {
    for (auto& p : procs_) close_streams(p);
  }

  // When true, SIGTERM, SIGINT, SIGHUP and SIGQUIT end a process with that signal (a worker
  // without handlers).
  bool exit_on_term = true;
  // When set, the next spawn throws it (a program that cannot be started).
  std::string fail_next_spawn;

  SpawnedProcess spawn(const SpawnRequest& request) override {
    if (!fail_next_spawn.empty()) {
      std::string why = std::move(fail_next_spawn);
      fail_next_spawn.clear();
      throw std::runtime_error(why);
    }
    Proc p;
    p.pid = next_pid_++;
    p.request = request;
    SpawnedProcess s;
    s.pid = p.pid;
    s.pidfd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    p.exit_fd = s.pidfd;
    auto pipe_for = [](StreamMode m, int* read_end, int* write_end) {
      if (m == StreamMode::kInherit) return;
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
      *read_end = fds[0];
      *write_end = fds[1];
    };
    pipe_for(request.out, &s.stdout_fd, &p.out_w);
    pipe_for(request.err, &s.stderr_fd, &p.err_w);
    if (request.heartbeat) pipe_for(StreamMode::kPipe, &s.heartbeat_fd, &p.hb_w);
    if (request.control) {
      int fds[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
        throw std::runtime_error("socketpair");
      ::fcntl(fds[0], F_SETFL, ::fcntl(fds[0], F_GETFL) | O_NONBLOCK);
      s.control_fd = fds[0];
      p.control = fds[1];
    }
    procs_.push_back(std::move(p));
    return s;
  }

  int reap(pid_t pid) override {
    Proc& p = by_pid(pid);
    if (!p.exited) throw std::logic_error("reap of a fake process that has not exited");
    return p.status;
  }

  std::optional<int> reap_if_exited(pid_t pid) override {
    Proc& p = by_pid(pid);
    if (!p.exited) return std::nullopt;
    return p.status;
  }

  void kill_group(pid_t pgid, int sig) override {
    Proc* p = find(pgid);
    if (p == nullptr || p->exited) return;
    p->signals.push_back(sig);
    const bool stop = sig == SIGTERM || sig == SIGINT || sig == SIGHUP || sig == SIGQUIT;
    if (sig == SIGKILL || (stop && exit_on_term) || (sig == SIGABRT && exit_on_abort)) end(*p, sig);
  }

  void kill_process(pid_t pid, int sig) override { kill_group(pid, sig); }

  // When true, a stack-dump request (SIGABRT) ends the process, as Python's faulthandler does.
  bool exit_on_abort = true;

  // The test's side.
  size_t count() const { return procs_.size(); }
  Proc& proc(size_t i) { return procs_.at(i); }
  void exit_with(size_t i, int code) { finish(procs_.at(i), W_EXITCODE(code, 0)); }
  void die_of(size_t i, int sig) { end(procs_.at(i), sig); }
  void write_stderr(size_t i, const std::string& text) { put(procs_.at(i).err_w, text); }
  void write_stdout(size_t i, const std::string& text) { put(procs_.at(i).out_w, text); }
  void beat(size_t i) { put(procs_.at(i).hb_w, "b"); }
  void write_heartbeat(size_t i, const std::string& bytes) { put(procs_.at(i).hb_w, bytes); }
  // What cohortrun asked worker i on its control socket since the last call ("" when nothing).
  std::string questions(size_t i) {
    std::string text;
    char buf[256];
    ssize_t n;
    while ((n = ::recv(procs_.at(i).control, buf, sizeof buf, MSG_DONTWAIT)) > 0)
      text.append(buf, static_cast<size_t>(n));
    return text;
  }
  void write_control(size_t i, const std::string& bytes) { put(procs_.at(i).control, bytes); }
  size_t running() const {
    size_t n = 0;
    for (const auto& p : procs_) n += !p.exited;
    return n;
  }

 private:
  static void put(int fd, const std::string& text) {
    if (fd < 0) throw std::logic_error("no such stream");
    if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      throw std::runtime_error("write to a fake stream");
  }
  static void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  static void close_streams(Proc& p) {
    close_fd(p.out_w);
    close_fd(p.err_w);
    close_fd(p.hb_w);
    close_fd(p.control);
  }
  void end(Proc& p, int sig) { finish(p, sig); }  // a wait status "killed by `sig`"
  void finish(Proc& p, int status) {
    if (p.exited) return;
    p.exited = true;
    p.status = status;
    close_streams(p);  // a process that ends closes its descriptors
    uint64_t one = 1;
    (void)!::write(p.exit_fd, &one, sizeof(one));
  }
  Proc* find(pid_t pid) {
    for (auto& p : procs_)
      if (p.pid == pid) return &p;
    return nullptr;
  }
  Proc& by_pid(pid_t pid) {
    Proc* p = find(pid);
    if (p == nullptr) throw std::logic_error("unknown fake pid");
    return *p;
  }

  std::vector<Proc> procs_;  // std::vector: tests hold indices, not references
  pid_t next_pid_ = 100000;
};

}  // namespace cohort::launch::testing

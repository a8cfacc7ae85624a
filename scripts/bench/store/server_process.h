// A store server the benchmark starts as a child process: cohortd, or PyTorch 1.13's TCPStore
// server hosted by a small Python program.
//
// Both are started on 127.0.0.1 with a free port; the child prints its address (cohortd) or port
// (Python) as its first stdout line, which start() waits for. Children get PR_SET_PDEATHSIG, so a
// killed benchmark leaves no server behind. Not thread-safe; one owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "net.h"

namespace cohort::bench {

class ServerProcess {
 public:
  // Starts `cohortd_path --host 127.0.0.1 --port 0 <extra_args>` as `name`, bound to CPU `cpu`
  // unless it is -1. Throws cohort::Error if it does not print its address within `timeout`.
  static std::unique_ptr<ServerProcess> start_cohortd(
      const std::string& cohortd_path, int cpu, std::chrono::milliseconds timeout,
      const std::string& name = "cohortd", const std::vector<std::string>& extra_args = {});
  // Starts TCPStore("127.0.0.1", 0, None, is_master=True) under `python`, its fd limit raised to
  // the hard limit; the program exits when its stdin closes. Throws like start_cohortd().
  static std::unique_ptr<ServerProcess> start_pytorch(const std::string& python, int cpu,
                                                      std::chrono::milliseconds timeout);

  // Use start_cohortd() / start_pytorch(); the key keeps other callers out.
  class Key {
    friend class ServerProcess;
    Key() = default;
  };
  ServerProcess(Key, std::string name, pid_t pid, Fd stdin_w, Fd stdout_r);
  ~ServerProcess();  // stop()
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& name() const { return name_; }
  const Endpoint& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }
  // What the child is (e.g. "torch 1.13.0a0"), when it said.
  const std::string& version() const { return version_; }

  // Asks the child to exit (SIGTERM for cohortd, closed stdin for Python), waits up to 5 s, then
  // kills it. Returns a note when it had to be killed or exited badly, else "".
  std::string stop();

 private:
  void read_banner(std::chrono::milliseconds timeout);

  std::string name_;
  pid_t pid_ = -1;
  Fd stdin_w_;
  Fd stdout_r_;
  Endpoint endpoint_;
  std::string version_;
};

}  // namespace cohort::bench

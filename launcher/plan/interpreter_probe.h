// InterpreterProbe: which Python the workers run, and which PyTorch it finds, asked of that
// interpreter itself once at start, beside the workers.
//
// A virtual environment made with --system-site-packages sees the system's PyTorch, not that of
// the environment whose python made it; a python3 first on PATH may be another one than the
// user thinks. The probe finds PyTorch without importing it (importlib's find_spec and its
// version.py: a tenth of a second, where `import torch` takes seconds), so that cohortrun can
// log it at start and name it in a failure summary.
//
// Thread safety: construct and destroy on one thread; the accessors from any.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace cohort::launch {

struct InterpreterInfo {
  std::string executable;      // sys.executable
  std::string python_version;  // "3.11.2"
  std::string torch_version;   // torch.__version__ as its version.py says; "" when none
  std::string torch_dir;       // the site-packages folder it comes from
};

// "Python 3.11.2, torch 2.15.0 from /venv/lib/python3.11/site-packages" ("..., no torch").
std::string describe_python(const InterpreterInfo& info);

// Runs `interpreter` (looked up on the PATH of `env`, "KEY=VALUE" entries) with the probe and
// parses what it prints; nullopt when it cannot be run, fails, or takes longer than `timeout`
// (it is killed then). Blocks.
std::optional<InterpreterInfo> probe_interpreter(const std::string& interpreter,
                                                 const std::vector<std::string>& env,
                                                 std::chrono::milliseconds timeout);

// The probe on a thread of its own ("cohort-probe"), joined in the destructor.
class InterpreterProbe {
 public:
  // Starts probing; `on_done` (may be empty) runs on the probe's thread with what it found.
  InterpreterProbe(std::string interpreter, std::vector<std::string> env,
                   std::function<void(const std::optional<InterpreterInfo>&)> on_done);
  ~InterpreterProbe();
  InterpreterProbe(const InterpreterProbe&) = delete;
  InterpreterProbe& operator=(const InterpreterProbe&) = delete;

  // The probe's process while it runs (-1 before it starts or once reaped): a child of this
  // process that is not a stray to kill (descendants.h).
  pid_t pid() const;
  // What the probe found, once it has finished (nullopt before, or when it failed).
  std::optional<InterpreterInfo> result() const;
  // Waits up to `timeout` for the probe to finish, then returns result().
  std::optional<InterpreterInfo> wait(std::chrono::milliseconds timeout) const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  pid_t pid_ = -1;
  std::optional<InterpreterInfo> result_;
  std::thread thread_;
};

}  // namespace cohort::launch

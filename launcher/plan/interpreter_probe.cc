#include "plan/interpreter_probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#include <utility>

#include "cohort/base/deadline.h"

namespace cohort::launch {
namespace {

// Prints sys.executable, the Python version, torch's version and where torch is, a line each.
constexpr const char* kProbe = R"(import importlib.util, os, sys
spec = importlib.util.find_spec("torch")
version, where = "", ""
if spec is not None and spec.origin:
    where = os.path.dirname(os.path.dirname(spec.origin))
    ns = {}
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            exec(f.read(), ns)
        version = str(ns.get("__version__", "?"))
    except Exception:
        version = "?"
print(sys.executable, sys.version.split()[0], version, where, sep="\n")
)";

constexpr size_t kMaxOutput = 64 * 1024;

}  // namespace

std::string describe_python(const InterpreterInfo& info) {
  std::string s = "Python " + info.python_version + ", ";
  if (info.torch_version.empty()) return s + "no torch";
  return s + "torch " + info.torch_version + " from " + info.torch_dir;
}

namespace {

// Starts the probe with its stdout on a pipe; the pid and the pipe's read end, or {-1, -1}.
std::pair<pid_t, int> spawn_probe(const std::string& interpreter,
                                  const std::vector<std::string>& env) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {-1, -1};
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, out[1], 1);
  posix_spawn_file_actions_addopen(&files, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addclosefrom_np(&files, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> argv{const_cast<char*>(interpreter.c_str()), const_cast<char*>("-c"),
                          const_cast<char*>(kProbe), nullptr};
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  // posix_spawnp looks `interpreter` up on cohortrun's PATH, as the workers' execvpe does.
  pid_t pid = -1;
  const int err =
      ::posix_spawnp(&pid, interpreter.c_str(), &files, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  if (err != 0) {
    ::close(out[0]);
    return {-1, -1};
  }
  return {pid, out[0]};
}

// Reads what the probe prints (within `timeout`; it is killed after), reaps it and parses it.
std::optional<InterpreterInfo> finish_probe(pid_t pid, int out, std::chrono::milliseconds timeout) {
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (;;) {
    const int left_ms = poll_ms_left(deadline);
    if (left_ms == 0) {
      timed_out = true;
      break;
    }
    pollfd p{out, POLLIN, 0};
    const int ready = ::poll(&p, 1, left_ms);
    if (ready < 0 && errno != EINTR) break;
    // Nothing to read yet (the time is up, or a signal): never a read that blocks, which would
    // wait as long as a hung interpreter does.
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    if (text.size() < kMaxOutput) text.append(buf, static_cast<size_t>(n));
  }
  ::close(out);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  std::istringstream lines(text);
  InterpreterInfo info;
  if (!std::getline(lines, info.executable) || !std::getline(lines, info.python_version))
    return std::nullopt;
  std::getline(lines, info.torch_version);
  std::getline(lines, info.torch_dir);
  return info;
}

constexpr std::chrono::seconds kProbeTimeout{10};

}  // namespace

std::optional<InterpreterInfo> probe_interpreter(const std::string& interpreter,
                                                 const std::vector<std::string>& env,
                                                 std::chrono::milliseconds timeout) {
  auto [pid, out] = spawn_probe(interpreter, env);
  if (pid < 0) return std::nullopt;
  return finish_probe(pid, out, timeout);
}

InterpreterProbe::InterpreterProbe(
    std::string interpreter, std::vector<std::string> env,
    std::function<void(const std::optional<InterpreterInfo>&)> on_done) {
  // Spawned here, so that its pid is known before this returns (pid()); read on the thread.
  // Not a structured binding: C++17 lambdas cannot capture those (clang refuses).
  const auto spawned = spawn_probe(interpreter, env);
  const auto pid = spawned.first;
  const auto out = spawned.second;
  pid_ = pid;
  thread_ = std::thread([this, pid, out, on_done = std::move(on_done)] {
    pthread_setname_np(pthread_self(), "cohort-probe");
    std::optional<InterpreterInfo> info;
    if (pid >= 0) info = finish_probe(pid, out, kProbeTimeout);
    {
      std::lock_guard lock(mu_);
      result_ = info;
      done_ = true;
      pid_ = -1;
    }
    done_cv_.notify_all();
    if (on_done) on_done(info);
  });
}

InterpreterProbe::~InterpreterProbe() {
  thread_.join();
}

pid_t InterpreterProbe::pid() const {
  std::lock_guard lock(mu_);
  return pid_;
}

std::optional<InterpreterInfo> InterpreterProbe::result() const {
  std::lock_guard lock(mu_);
  return result_;
}

std::optional<InterpreterInfo> InterpreterProbe::wait(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  done_cv_.wait_for(lock, timeout, [this] { return done_; });
  return result_;
}

}  // namespace cohort::launch

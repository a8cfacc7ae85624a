#include "server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <vector>

#include "cohort/error.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The PyTorch side. Its first line is the port, its second the torch version; then it blocks on
// stdin so the store lives until the benchmark closes the pipe.
constexpr const char* kTorchServer = R"PY(
import datetime, resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
import torch
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=300))
print(store.port, flush=True)
print("torch " + torch.__version__, flush=True)
sys.stdin.read()
)PY";

// fork + exec with pipes on stdin and stdout; stderr is inherited so server warnings stay visible.
pid_t spawn(const std::vector<std::string>& argv, int cpu, Fd* stdin_w, Fd* stdout_r) {
  int in[2], out[2];
  if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
    throw Error("pipe: " + errno_text(errno));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw Error("fork: " + errno_text(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    if (cpu >= 0) {
      // Every thread the server starts inherits this.
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu, &set);
      ::sched_setaffinity(0, sizeof(set), &set);
    }
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  *stdin_w = Fd(in[1]);
  *stdout_r = Fd(out[0]);
  return pid;
}

// One line from the child's stdout, or throws at the deadline or end of stream.
std::string read_line(int fd, Clock::time_point deadline, const std::string& who) {
  std::string line;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    int n = ::poll(&p, 1, left.count() > 0 ? static_cast<int>(left.count()) : 0);
    if (n == 0) throw Error(who + " did not print its address in time");
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("poll: " + errno_text(errno));
    }
    char c;
    ssize_t r = ::read(fd, &c, 1);
    if (r == 0) throw Error(who + " exited before printing its address");
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error("read: " + errno_text(errno));
    }
    if (c == '\n') return line;
    line.push_back(c);
  }
}

}  // namespace

ServerProcess::ServerProcess(Key, std::string name, pid_t pid, Fd stdin_w, Fd stdout_r)
    : name_(std::move(name)),
      pid_(pid),
      stdin_w_(std::move(stdin_w)),
      stdout_r_(std::move(stdout_r)) {}

ServerProcess::~ServerProcess() {
  stop();
}

std::unique_ptr<ServerProcess> ServerProcess::start_cohortd(
    const std::string& cohortd_path, int cpu, std::chrono::milliseconds timeout,
    const std::string& name, const std::vector<std::string>& extra_args) {
  if (::access(cohortd_path.c_str(), X_OK) != 0) {
    throw Error("cohortd not found at " + cohortd_path + " (build it, or pass --cohortd)");
  }
  Fd in, out;
  // The storms connect every rank from 127.0.0.1.
  std::vector<std::string> argv = {
      cohortd_path, "--host", "127.0.0.1", "--port", "0", "--max-connections-per-address", "0"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  pid_t pid = spawn(argv, cpu, &in, &out);
  auto p = std::make_unique<ServerProcess>(Key(), name, pid, std::move(in), std::move(out));
  p->read_banner(timeout);
  return p;
}

std::unique_ptr<ServerProcess> ServerProcess::start_pytorch(const std::string& python, int cpu,
                                                            std::chrono::milliseconds timeout) {
  if (::access(python.c_str(), X_OK) != 0) {
    throw Error("python not found at " + python + " (pass --python)");
  }
  Fd in, out;
  pid_t pid = spawn({python, "-c", kTorchServer}, cpu, &in, &out);
  auto p = std::make_unique<ServerProcess>(Key(), "pytorch", pid, std::move(in), std::move(out));
  p->read_banner(timeout);
  return p;
}

void ServerProcess::read_banner(std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  std::string line = read_line(stdout_r_.get(), deadline, name_);
  // cohortd prints "127.0.0.1:PORT"; the Python side prints only the port.
  std::string port = line.substr(line.rfind(':') == std::string::npos ? 0 : line.rfind(':') + 1);
  endpoint_ = resolve_endpoint("127.0.0.1:" + port);
  if (name_ == "pytorch") version_ = read_line(stdout_r_.get(), deadline, name_);
}

std::string ServerProcess::stop() {
  if (pid_ < 0) return {};
  if (name_ == "pytorch") {
    stdin_w_.reset();  // sys.stdin.read() returns and the store shuts down
  } else {
    ::kill(pid_, SIGTERM);
  }
  std::string note;
  int status = 0;
  // Wait on a pidfd rather than polling waitpid with sleeps.
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));
  pollfd p{pidfd.get(), POLLIN, 0};
  if (pidfd.valid() && ::poll(&p, 1, 5000) == 0) {
    ::kill(pid_, SIGKILL);
    note = name_ + " did not exit within 5 s and was killed";
  }
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  if (note.empty() && WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    note = name_ + " exited with status " + std::to_string(WEXITSTATUS(status));
  } else if (note.empty() && WIFSIGNALED(status)) {
    note = name_ + " died of signal " + std::to_string(WTERMSIG(status));
  }
  pid_ = -1;
  stdin_w_.reset();
  stdout_r_.reset();
  return note;
}

}  // namespace cohort::bench

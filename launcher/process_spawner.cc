#include "process_spawner.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace cohort::launch {
namespace {

void make_pipe(int fds[2]) {
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe2");
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// After fork, in the child: only async-signal-safe calls until exec.
[[noreturn]] void child(const SpawnRequest& req, char* const* argv, char* const* envp, pid_t parent,
                        int out_w, int err_w, int hb_w) {
  // Signals are blocked (the parent forked with all of them blocked): reset cohortrun's handlers
  // first, so that a stop signal arriving now takes its default effect once unblocked, instead of
  // running cohortrun's handler in the child.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::signal(sig, SIG_DFL);
  }
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before PDEATHSIG was set
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (out_w >= 0) ::dup2(out_w, STDOUT_FILENO);
  if (err_w >= 0) ::dup2(err_w, STDERR_FILENO);
  if (hb_w >= 0) ::fcntl(hb_w, F_SETFD, 0);  // keep the heartbeat pipe across exec
  ::execvpe(argv[0], argv, envp);
  int e = errno;
  const char* msg1 = "cohortrun: cannot execute '";
  const char* msg2 = "': ";
  const char* why = ::strerror(e);  // not strictly async-signal-safe; harmless here
  ::write(STDERR_FILENO, msg1, ::strlen(msg1));
  ::write(STDERR_FILENO, argv[0], ::strlen(argv[0]));
  ::write(STDERR_FILENO, msg2, ::strlen(msg2));
  ::write(STDERR_FILENO, why, ::strlen(why));
  ::write(STDERR_FILENO, "\n", 1);
  (void)req;
  ::_exit(127);
}

}  // namespace

SpawnedProcess PosixSpawner::spawn(const SpawnRequest& req) {
  int out[2] = {-1, -1}, err[2] = {-1, -1}, hb[2] = {-1, -1};
  SpawnedProcess p;
  try {
    if (req.pipe_stdout) make_pipe(out);
    if (req.pipe_stderr) make_pipe(err);
    if (req.heartbeat) {
      make_pipe(hb);
      // The worker must never block on a beat: a full pipe just drops it.
      ::fcntl(hb[1], F_SETFL, ::fcntl(hb[1], F_GETFL) | O_NONBLOCK);
    }
  } catch (...) {
    for (int* fds : {out, err, hb}) {
      close_fd(fds[0]);
      close_fd(fds[1]);
    }
    throw;
  }
  // Everything the child needs is built before fork: no allocation after it.
  std::vector<std::string> env = req.env;
  if (hb[1] >= 0) env.push_back("COHORT_HEARTBEAT_FD=" + std::to_string(hb[1]));
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  pid_t parent = ::getpid();
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    int e = errno;
    for (int* fds : {out, err, hb}) {
      close_fd(fds[0]);
      close_fd(fds[1]);
    }
    throw std::system_error(e, std::generic_category(), "fork");
  }
  if (pid == 0) child(req, argv.data(), envp.data(), parent, out[1], err[1], hb[1]);

  ::setpgid(pid, pid);  // also from the parent, so the group exists before we ever signal it
  close_fd(out[1]);
  close_fd(err[1]);
  close_fd(hb[1]);
  p.pid = pid;
  p.pidfd = pidfd_open(pid);
  if (p.pidfd < 0) {
    int e = errno;
    ::kill(pid, SIGKILL);
    throw std::system_error(e, std::generic_category(),
                            "pidfd_open (cohortrun needs Linux 5.3 or later)");
  }
  ::fcntl(p.pidfd, F_SETFD, FD_CLOEXEC);
  p.stdout_fd = out[0];
  p.stderr_fd = err[0];
  p.heartbeat_fd = hb[0];
  return p;
}

}  // namespace cohort::launch

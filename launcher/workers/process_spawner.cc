#include "workers/process_spawner.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cohort/error.h"
#include "workers/child_descriptors.h"

namespace cohort::launch {
namespace {

[[noreturn]] void fail(const char* call) {
  int e = errno;
  throw IoError(std::string(call) + ": " + std::strerror(e), e);
}

int pidfd_open(pid_t pid) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
}

// What binds a worker to CPUs and memory nodes, prepared before the child starts.
struct Binding {
  bool cpus = false;
  cpu_set_t cpu_set;
  bool memory = false;
  unsigned long node_mask[16] = {};  // 1024 nodes
};

// Everything the child needs, built before it starts: it allocates nothing.
struct ChildArgs {
  char* const* argv;
  char* const* envp;
  pid_t parent;
  int out_w, err_w, hb_w, control_w;
  const int* inherit;
  size_t n_inherit;
  const Binding* bind;
  int cgroup_procs;  // -1: none
  int fd_limit;      // one above the highest descriptor there can be (RLIMIT_NOFILE)
};

// Marks every descriptor from `first` on close-on-exec: whatever cohortrun (or a library in it,
// or whoever started cohortrun) opened without O_CLOEXEC, or opened on another thread while this
// child was being cloned, ends at exec. close_range(CLOSE_RANGE_CLOEXEC) is Linux 5.11; before
// it, each possible descriptor is marked in turn (bounded by the descriptor limit).
void cloexec_from(int first, int limit) {
  constexpr unsigned kCloseRangeCloexec = 1u << 2;  // CLOSE_RANGE_CLOEXEC (linux/close_range.h)
  if (::syscall(SYS_close_range, first, ~0u, kCloseRangeCloexec) == 0) return;
  for (int fd = first; fd < limit; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
}

void write_str(const char* s) {
  (void)!::write(STDERR_FILENO, s, ::strlen(s));
}

// The child, from clone() to exec. It shares cohortrun's memory (CLONE_VM; cohortrun's thread
// waits, CLONE_VFORK) on a stack of its own: only system calls, no allocation, no locks, no
// library state (errno aside, which nobody reads meanwhile), exactly as posix_spawn's child.
int child(void* raw) {
  const ChildArgs& a = *static_cast<const ChildArgs*>(raw);
  // Signals are blocked (the parent blocked them all before clone): reset cohortrun's handlers
  // and ignored signals (SIGPIPE) first, so that a signal arriving now takes its default effect
  // once unblocked, and the worker starts with the dispositions a shell would give it. (The
  // handler table is the child's own: no CLONE_SIGHAND.)
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, NSIG / 8);
  }
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != a.parent) ::_exit(127);  // the parent died before PDEATHSIG was set
  // Into the workers' cgroup (worker_cgroup.h) before anything of the worker runs: "0" moves the
  // writer itself. Failing that, the worker still runs; its process group remains.
  if (a.cgroup_procs >= 0) (void)!::write(a.cgroup_procs, "0", 1);
  sigset_t none;
  ::sigemptyset(&none);
  ::syscall(SYS_rt_sigprocmask, SIG_SETMASK, &none, nullptr, NSIG / 8);
  if (a.out_w >= 0) ::dup2(a.out_w, STDOUT_FILENO);
  if (a.err_w >= 0) ::dup2(a.err_w, STDERR_FILENO);
  // The worker keeps its stdio, its heartbeat pipe, its control socket and what the request
  // names; nothing else (as torchrun's workers, which Python's subprocess starts with close_fds).
  cloexec_from(STDERR_FILENO + 1, a.fd_limit);
  if (a.hb_w >= 0) ::fcntl(a.hb_w, F_SETFD, 0);            // keep the heartbeat pipe across exec
  if (a.control_w >= 0) ::fcntl(a.control_w, F_SETFD, 0);  // and the control socket
  for (size_t i = 0; i < a.n_inherit; ++i) ::fcntl(a.inherit[i], F_SETFD, 0);
  if (a.bind->cpus) ::sched_setaffinity(0, sizeof(a.bind->cpu_set), &a.bind->cpu_set);
  if (a.bind->memory) {
    constexpr int kMpolBind = 2;  // MPOL_BIND (linux/mempolicy.h)
    ::syscall(SYS_set_mempolicy, kMpolBind, a.bind->node_mask, sizeof(a.bind->node_mask) * 8);
  }
  ::execvpe(a.argv[0], a.argv, a.envp);
  const int e = errno;
  write_str("cohortrun: cannot execute '");
  write_str(a.argv[0]);
  write_str("': ");
  const char* why = ::strerrordesc_np(e);  // a constant string: no allocation, no locale
  write_str(why != nullptr ? why : "unknown error");
  write_str("\n");
  ::_exit(127);
}

// The child's stack: a private mapping, given back once the child has exec'd or exited.
class ChildStack {
 public:
  ChildStack() {
    base_ = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK,
                   -1, 0);
    if (base_ == MAP_FAILED) fail("mmap (child stack)");
  }
  ~ChildStack() { ::munmap(base_, kBytes); }
  ChildStack(const ChildStack&) = delete;
  ChildStack& operator=(const ChildStack&) = delete;
  void* top() const { return static_cast<char*>(base_) + kBytes; }

 private:
  // execvpe builds each PATH candidate on the stack (PATH_MAX + NAME_MAX); 256 KiB is ample.
  static constexpr size_t kBytes = 256 * 1024;
  void* base_;
};

// ThreadSanitizer cannot follow a clone() that shares the address space (its runtime aborts
// in ForkAfter), so its builds start the child with a plain fork(): same child, slower start.
#if defined(__SANITIZE_THREAD__)
#define COHORT_SPAWN_WITH_FORK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COHORT_SPAWN_WITH_FORK 1
#endif
#endif

pid_t start_child(ChildArgs* args, const ChildStack& stack) {
#ifdef COHORT_SPAWN_WITH_FORK
  (void)stack;
  pid_t pid = ::fork();
  if (pid == 0) child(args);  // never returns
  return pid;
#else
  return ::clone(child, stack.top(), CLONE_VM | CLONE_VFORK | SIGCHLD, args);
#endif
}

}  // namespace

SpawnedProcess PosixSpawner::spawn(const SpawnRequest& req) {
  ChildDescriptors fds(req);
  // Everything the child needs is built before it starts: it allocates nothing.
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : fds.env()) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  Binding bind;
  CPU_ZERO(&bind.cpu_set);
  for (int cpu : req.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) continue;
    CPU_SET(cpu, &bind.cpu_set);
    bind.cpus = true;
  }
  for (int node : req.mem_nodes) {
    constexpr int kBits = 8 * sizeof(unsigned long);
    if (node < 0 || node >= 16 * kBits) continue;
    bind.node_mask[node / kBits] |= 1ul << (node % kBits);
    bind.memory = true;
  }

  rlimit files{};
  const int fd_limit = ::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < (1u << 20)
                           ? static_cast<int>(files.rlim_cur)
                           : 1 << 20;
  ChildArgs args{argv.data(),
                 envp.data(),
                 ::getpid(),
                 fds.out_write(),
                 fds.err_write(),
                 fds.heartbeat_write(),
                 fds.control_write(),
                 req.inherit_fds.data(),
                 req.inherit_fds.size(),
                 &bind,
                 req.cgroup_procs_fd,
                 fd_limit};
  ChildStack stack;
  // clone(CLONE_VM | CLONE_VFORK) rather than fork(): the child borrows cohortrun's memory until
  // it execs, so nothing of cohortrun's address space is copied per worker, nor torn down when
  // the worker is reaped (posix_spawn's method; what it lacks is setpgid, PR_SET_PDEATHSIG and
  // the CPU and memory binding, hence a child of our own).
  sigset_t all, old;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = start_child(&args, stack);
  const int clone_errno = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pid < 0) {
    errno = clone_errno;
    fail("clone");
  }

  ::setpgid(pid, pid);  // also from the parent, so the group exists before we ever signal it
  const int pidfd = pidfd_open(pid);
  if (pidfd < 0) {
    int e = errno;
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    throw IoError(
        std::string("pidfd_open: ") + std::strerror(e) + " (cohortrun needs Linux 5.3 or later)",
        e);
  }
  ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
  return fds.finish(pid, pidfd);
}

int PosixSpawner::reap(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return 0;  // already reaped (cannot happen: we reap each worker once)
  }
  return status;
}

std::optional<int> PosixSpawner::reap_if_exited(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == pid) return status;
  return std::nullopt;
}

void PosixSpawner::kill_group(pid_t pgid, int sig) {
  if (pgid > 0) ::kill(-pgid, sig);
}

void PosixSpawner::kill_process(pid_t pid, int sig) {
  if (pid > 0) ::kill(pid, sig);
}

}  // namespace cohort::launch

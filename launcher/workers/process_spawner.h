// ProcessSpawner: starts worker processes. An interface in the spirit of LevelDB's Env, so the
// launcher's wiring can be exercised with injected failures; PosixSpawner is the real one.
//
// Every worker gets a process group of its own (stopping it stops its whole tree), the parent-
// death signal SIGKILL (it dies with cohortrun even when cohortrun is SIGKILLed), default signal
// dispositions and an empty signal mask. It inherits only its stdio, its heartbeat pipe, its
// control socket and the descriptors its request names: every other one is made close-on-exec in
// the child before exec, whoever opened it and however.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace cohort::launch {

// How a worker's standard output or error is connected.
enum class StreamMode {
  kInherit,  // cohortrun's own descriptor (the terminal, a file, a pipe)
  kPipe,     // a pipe cohortrun reads
  kPty,      // a pseudo-terminal cohortrun reads: isatty() holds for the worker (needs a
             // terminal on cohortrun's side to make sense; see console.h)
};

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  std::vector<std::string> env;   // "KEY=VALUE"; the whole environment of the worker
  StreamMode out = StreamMode::kInherit;
  StreamMode err = StreamMode::kPipe;
  bool heartbeat = true;  // a pipe whose write end the worker finds in COHORT_HEARTBEAT_FD
  // A socket pair whose other end the worker finds in COHORT_CONTROL_FD: cohortrun's hang probes
  // (cohort/base/hang_probe.h).
  bool control = true;
  // Descriptors the worker inherits at the same numbers (close-on-exec cleared), e.g. a token
  // file descriptor. The caller keeps ownership.
  std::vector<int> inherit_fds;
  // --numa-binding: the CPUs the worker may run on and the NUMA nodes its memory comes from
  // (empty: unchanged).
  std::vector<int> cpus;
  std::vector<int> mem_nodes;
  // cgroup.procs of the workers' cgroup (worker_cgroup.h), open for writing: the child moves
  // itself in before exec. -1: none. The caller keeps ownership.
  int cgroup_procs_fd = -1;
};

struct SpawnedProcess {
  pid_t pid = -1;
  int pidfd = -1;      // readable once the process exits
  int stdout_fd = -1;  // read ends, when piped
  int stderr_fd = -1;
  int heartbeat_fd = -1;
  int control_fd = -1;  // cohortrun's end of the control socket (non-blocking)
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  // Starts the process; the caller owns the returned descriptors. Throws IoError naming the
  // failed call. A program that cannot be executed is reported by the child: it prints why on
  // its stderr and exits with 127, as a shell does.
  virtual SpawnedProcess spawn(const SpawnRequest& request) = 0;
  // Collects the exit status of `pid` (waitpid). REQUIRES: its pidfd became readable.
  virtual int reap(pid_t pid) = 0;
  // The exit status of `pid` when it has exited (and is now reaped), else nullopt; never blocks.
  virtual std::optional<int> reap_if_exited(pid_t pid) = 0;
  // Sends `sig` to the process group `pgid` (each worker leads its own); errors are ignored (the
  // group may be gone).
  virtual void kill_group(pid_t pgid, int sig) = 0;
  // Sends `sig` to process `pid` alone (a stack-dump request to a worker's main process).
  virtual void kill_process(pid_t pid, int sig) = 0;
};

class PosixSpawner final : public ProcessSpawner {
 public:
  SpawnedProcess spawn(const SpawnRequest& request) override;
  int reap(pid_t pid) override;
  std::optional<int> reap_if_exited(pid_t pid) override;
  void kill_group(pid_t pgid, int sig) override;
  void kill_process(pid_t pid, int sig) override;
};

}  // namespace cohort::launch

// ProcessSpawner: starts worker processes. An interface in the spirit of LevelDB's Env, so the
// launcher's wiring can be exercised with injected failures; PosixSpawner is the real one.
//
// Every worker gets a process group of its own (stopping it stops its whole tree), the parent-
// death signal SIGKILL (it dies with cohortrun even when cohortrun is SIGKILLed), default signal
// dispositions and an empty signal mask. Descriptors cohortrun opens are close-on-exec, so a
// worker inherits only its stdio and its heartbeat pipe.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cohort::launch {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is looked up on PATH
  std::vector<std::string> env;   // "KEY=VALUE"; the whole environment of the worker
  bool pipe_stdout = false;       // else the worker writes to cohortrun's stdout directly
  bool pipe_stderr = true;
  bool heartbeat = true;  // a pipe whose write end the worker finds in COHORT_HEARTBEAT_FD
};

struct SpawnedProcess {
  pid_t pid = -1;
  int pidfd = -1;      // readable once the process exits
  int stdout_fd = -1;  // read ends, when piped
  int stderr_fd = -1;
  int heartbeat_fd = -1;
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  // Starts the process; the caller owns the returned descriptors. Throws std::system_error.
  // A program that cannot be executed is reported by the child: it prints why on its stderr and
  // exits with 127, as a shell does.
  virtual SpawnedProcess spawn(const SpawnRequest& request) = 0;
};

class PosixSpawner final : public ProcessSpawner {
 public:
  SpawnedProcess spawn(const SpawnRequest& request) override;
};

}  // namespace cohort::launch

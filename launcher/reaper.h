// Reaper: the second line of defence against orphaned workers.
//
// Workers die with cohortrun through their parent-death signal, but a worker's own children do
// not. The reaper is a small process forked at start-up (before any thread exists) that learns
// every worker's process group through a pipe. When the pipe closes without a goodbye, cohortrun
// is gone (even by SIGKILL): the reaper SIGKILLs every group it still knows, then exits. It
// ignores the terminal's signals, so a Ctrl-C that reaches the whole foreground group does not
// take it down before it has done its job.
#pragma once

#include <sys/types.h>

namespace cohort::launch {

class Reaper {
 public:
  // Forks the reaper. REQUIRES: no other thread exists yet. On failure the reaper is simply
  // absent (the parent-death signal remains).
  Reaper();
  ~Reaper();  // says goodbye: the reaper exits without killing anything
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  void watch(pid_t pgid);
  void forget(pid_t pgid);
  bool active() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
};

// Kills (SIGKILL) processes left by earlier cohortrun agents that died without cleaning up:
// those whose COHORT_AGENT_ID names an agent that no longer exists. Returns how many.
int sweep_orphans();

// "<pid>:<start time>" of this process, the value of COHORT_AGENT_ID for its workers.
const char* agent_id();

}  // namespace cohort::launch

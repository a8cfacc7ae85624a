// The lines of defence against workers and their descendants outliving cohortrun.
//
// 1. Every worker leads a process group of its own, killed whole when it exits or is stopped,
//    and has the parent-death signal SIGKILL (process_spawner.h).
// 2. cohortrun is the child subreaper of its descendants: those that escape their group come
//    back to it and die with the group (descendants.h).
// 3. Where cohortrun may make one (root, or a delegated cgroup v2 subtree), every worker runs in
//    a cgroup of this agent's (worker_cgroup.h), which holds whatever they start, however it left
//    its process group or cleared its environment; cgroup.kill ends all of it.
// 4. The Reaper, a small process forked at start-up, outlives a cohortrun killed by SIGKILL: when
//    its pipe to cohortrun closes without a goodbye, it kills the workers' cgroup when there is
//    one, every worker group it was told about, then every process that still carries this
//    agent's COHORT_AGENT_ID, until none is left. It leads a session of its own, so a SIGKILL of
//    cohortrun's whole process group (`timeout -s KILL`, `kill -9 -PGID`) does not reach it, and
//    it ignores the terminal's signals.
// 5. When even the reaper died, the next cohortrun's sweep_orphans() finds what was left: each
//    agent leaves a lease file while it runs (naming its workers' cgroup, when it has one),
//    removed when it (or its reaper) has cleaned up, so a lease whose agent is dead proves an
//    unclean death; then that agent's cgroup is killed, and the processes carrying that agent's
//    id, in this pid namespace, started after it. Nothing it cannot prove is its own: an agent
//    that exited normally left no lease, and jobs in other pid namespaces (containers) have ids
//    the sweep does not claim.
#pragma once

#include <sys/types.h>

#include <string>

namespace cohort::launch {

class Reaper {
 public:
  // Forks the reaper and writes this agent's lease. REQUIRES: no other thread exists yet. On
  // failure the reaper is simply absent (the other lines remain).
  Reaper();
  ~Reaper();  // says goodbye: the reaper exits without killing anything; the lease goes
  Reaper(const Reaper&) = delete;
  Reaper& operator=(const Reaper&) = delete;

  void watch(pid_t pgid);
  void forget(pid_t pgid);
  // The workers' cgroup (worker_cgroup.h), killed first on an unclean death; also recorded in
  // the lease for sweep_orphans().
  void watch_cgroup(const std::string& path);
  bool active() const { return fd_ >= 0; }
  pid_t pid() const { return pid_; }

 private:
  int fd_ = -1;
  pid_t pid_ = -1;
  std::string lease_;
};

// "<pid>:<start time>:<pid namespace>" of this process: the value of COHORT_AGENT_ID for its
// workers, unique on this machine.
const std::string& agent_id();

// Kills (SIGKILL) what agents that died uncleanly left behind (see the file comment). Returns
// how many processes.
int sweep_orphans();

// Where leases live: $COHORT_LEASE_DIR, else /tmp/cohort-agents-<uid> (tests point it elsewhere).
std::string lease_dir();

}  // namespace cohort::launch

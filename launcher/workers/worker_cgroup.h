// WorkerCgroup: a cgroup v2 of this agent's own, holding every worker and whatever they start.
//
// A process group ends where a descendant calls setsid(), and the agent id in the environment
// ends where one clears its environment (env -i, sudo, su -); a cgroup holds all of them, and
// cgroup.kill (Linux 5.14) ends all of them at once, as systemd and Slurm end a service or a job.
// cohortrun makes one where it may: below its own cgroup, which it may write as root or in a
// subtree delegated to its user (systemd's Delegate=yes, Slurm's cgroup/v2 plugin). Elsewhere
// there is none, and the reaper (reaper.h) is the line of defence.
//
// Thread safety: none; the agent's loop thread only. The child side (`procs_fd`) is only written
// to by a spawned child between clone() and exec().
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace cohort::launch {

class WorkerCgroup {
 public:
  // Makes <this process's cgroup>/cohortrun-<name>. nullptr when this process may not (no
  // cgroup v2, no cgroup.kill, no permission), with the reason in *why.
  static std::unique_ptr<WorkerCgroup> create(const std::string& name, std::string* why);
  // Kills what is left in it, waits for that (up to 1 s) and removes the directory.
  ~WorkerCgroup();
  WorkerCgroup(const WorkerCgroup&) = delete;
  WorkerCgroup& operator=(const WorkerCgroup&) = delete;

  // Its directory, e.g. /sys/fs/cgroup/user.slice/.../cohortrun-1234-5678-4026531836.
  const std::string& path() const { return path_; }
  // Its cgroup.procs, open for writing (close-on-exec): a child writes "0" to it to move itself in.
  int procs_fd() const { return procs_fd_; }
  // SIGKILLs every process in it (cgroup.kill) and waits up to `wait` until they are gone.
  // Returns how many there were.
  int kill_and_wait(std::chrono::milliseconds wait) const;
  // Whether any process is in it (cgroup.events: populated).
  bool populated() const;

 private:
  WorkerCgroup(std::string path, int procs_fd) : path_(std::move(path)), procs_fd_(procs_fd) {}
  std::string path_;
  int procs_fd_ = -1;
};

// Kills every process in the cgroup at `path` and removes it once empty (waiting up to
// `wait_ms`); for the reaper and the start-up sweep, which know a dead agent's cgroup by its path.
// Returns false when the cgroup is still populated (or could not be killed).
bool kill_cgroup(const std::string& path, int wait_ms);

}  // namespace cohort::launch

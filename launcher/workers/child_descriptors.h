// ChildDescriptors: what a worker is handed besides its command, made before it starts, whichever
// way it starts (PosixSpawner's clone and exec, or a fork server's fork, fork_server.h): its
// stdout and stderr as the request asks (cohortrun's own, a pipe or a pseudo-terminal), its
// heartbeat pipe, its control socket (hang probes, cohort/base/hang_probe.h), and the environment
// that names them (COHORT_HEARTBEAT_FD, COHORT_CONTROL_FD).
//
// cohortrun keeps the read ends; the worker's ends are closed here once the worker has them
// (finish()), or when this goes away unfinished (the start failed).
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include "workers/process_spawner.h"

namespace cohort::launch {

class ChildDescriptors {
 public:
  // Makes the pipes and terminals `request` asks for. Throws IoError naming the failed call.
  explicit ChildDescriptors(const SpawnRequest& request);
  ~ChildDescriptors();
  ChildDescriptors(const ChildDescriptors&) = delete;
  ChildDescriptors& operator=(const ChildDescriptors&) = delete;

  // The worker's whole environment: the request's, COHORT_HEARTBEAT_FD when it has a pipe and
  // COHORT_CONTROL_FD when it has a control socket.
  const std::vector<std::string>& env() const { return env_; }
  // The worker's ends (-1: none; stdout and stderr -1 also when cohortrun's own are inherited).
  int out_write() const { return out_.write; }
  int err_write() const { return err_.write; }
  int heartbeat_write() const { return hb_.write; }
  int control_write() const { return control_.write; }
  // Every descriptor the worker has, as (descriptor here, number in the worker): stdin, stdout
  // and stderr (cohortrun's own where inherited), the heartbeat pipe, the control socket and the
  // request's inherit_fds at their own numbers.
  std::vector<std::pair<int, int>> mapping() const;
  // The worker `pid` has its ends: closes them here and hands cohortrun's over.
  SpawnedProcess finish(pid_t pid, int pidfd);

 private:
  // The two ends of a stream: read by cohortrun (for the control socket: written too), and the
  // worker's.
  struct Ends {
    int read = -1;
    int write = -1;
  };
  static void close_ends(Ends* e);

  Ends out_, err_, hb_, control_;
  std::vector<int> inherit_;
  std::vector<std::string> env_;
};

}  // namespace cohort::launch

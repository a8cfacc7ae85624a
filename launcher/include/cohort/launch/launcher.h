// cohort::launch::Launcher: cohortrun's node agent.
//
// run() resolves the configuration (workers per node, run id, log directory), starts the store on
// node 0 (or the endpoint's agent), rendezvouses with the other nodes, starts the workers,
// forwards their output and signals, reacts to every exit the moment it happens, restarts the
// group across all nodes while --max-restarts allows, and prints torchrun's failure summary with
// the root cause.
//
// Returns the job's exit status: 0 when every worker of every node succeeded; 1 when the job
// failed (as torchrun); 128+N when cohortrun stopped the job because it received signal N.
// Throws UsageError when the configuration cannot work (cohortrun's main() exits 2), other
// cohort::Error kinds when the node cannot start (a port in use: exit 1).
//
// Thread safety: run() once, from the thread that constructed the Launcher. It forks a reaper
// first, so construct and run it before starting any other thread.
#pragma once

#include <map>
#include <string>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

class Launcher {
 public:
  Launcher(LaunchConfig config, std::map<std::string, std::string> env);
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run();

 private:
  LaunchConfig config_;
  std::map<std::string, std::string> env_;
};

}  // namespace cohort::launch

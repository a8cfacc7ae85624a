// cohort::launch::Launcher: cohortrun's node agent, wired together.
//
// run() resolves the configuration (workers per node, run id, log directory), starts the store on
// node 0, rendezvouses with the other nodes, starts the workers, forwards their output and
// signals, reacts to every exit the moment it happens, restarts the group across all nodes while
// --max-restarts allows, and prints torchrun's failure summary with the root cause.
//
// Exit status: 0 when every worker of every node succeeded; 1 when the job failed (as torchrun);
// 128+N when cohortrun stopped the job because it received signal N; 2 for a usage error.
//
// Thread safety: run() once, from the thread that constructed the Launcher. It forks a reaper
// first, so construct and run it before starting any other thread.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "cohort/launch/launch_config.h"

namespace cohort::launch {

class Launcher {
 public:
  Launcher(LaunchConfig config, std::map<std::string, std::string> env);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  int run();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::launch

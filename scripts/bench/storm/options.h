// storm_bench's command line.
#pragma once

#include <string>
#include <vector>

#include "cohort/rdzv/codec.h"

namespace cohort::bench {

struct StormBenchOptions {
  std::vector<int> ranks = {10000, 19000, 100000};
  int ranks_per_node = 8;
  // cohortd (as built), cohortd-1q (cohortd with one accept queue: how it listened before
  // --accept-queues), pytorch (PyTorch 2.x's libuv TCPStore server; direct path only).
  std::vector<std::string> servers = {"cohortd", "cohortd-1q", "pytorch"};
  std::vector<std::string> paths = {"direct", "relay"};
  // Direct storms above this many ranks are skipped: the store holds one descriptor per rank, and
  // a process here may hold 20,000.
  int direct_max = 19000;
  int processes = 0;  // generator processes; 0: as few as the descriptor limit allows, at least 2
  int repeat = 1;     // runs per cell; the median total is reported
  double timeout_s = 60;
  int somaxconn = 0;  // > 0: set net.core.somaxconn in the benchmark's network namespace
  bool netns = true;
  rdzv::Dialect dialect = rdzv::Dialect::kCurrent;
  std::string cohortd;  // default: the cohortd next to storm_bench
  std::string python;   // PyTorch 2.x's Python, for the pytorch server
};

// Returns -1 to go on, else an exit status (0 after --help, 2 after a usage error).
int parse_storm_options(int argc, char** argv, StormBenchOptions* out);

}  // namespace cohort::bench

// One multi-process storm: plans the generator processes, forks them, starts them together and
// collects what they measured, with the store process's connections, memory and CPU around it.
#pragma once

#include <sys/types.h>

#include <string>

#include "generator.h"

namespace cohort::bench {

struct StormSpec {
  StormPath path = StormPath::kDirect;
  rdzv::Dialect dialect = rdzv::Dialect::kCurrent;
  int ranks = 0, ranks_per_node = 8;
  int processes = 0;  // 0: as few as the descriptor limit allows, at least 2
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  pid_t store_pid = -1;  // for its connection count, memory and CPU (-1: not read)
  double timeout_s = 60;
  std::string key_prefix;
};

struct StormOutcome {
  std::string status = "ok";  // ok, timeout, error
  std::string error;
  int ranks = 0, nodes = 0, processes = 0;
  int connected = 0, released = 0;
  double setup_s = -1;    // forking, linking every relay (not part of the storm)
  double connect_s = -1;  // go to the last rank connected
  double total_s = -1;    // go to the last rank released
  double max_connect_ms = -1;
  long store_connections = -1;  // TCP connections the store held at the end (every rank's, or every
                                // relay's link)
  long store_rss_before_kb = -1, store_rss_ready_kb = -1, store_rss_after_kb = -1;
  double store_cpu_s = -1;  // user + system CPU the store used from go to the last release
};

StormOutcome run_storm_processes(const StormSpec& spec);

}  // namespace cohort::bench

// store_bench's driver: starts the servers, runs every ops cell and storm on each (servers
// alternate within a cell, so drifting background load hits both alike), stops them, and
// returns the figures for report.h to print. Progress goes to stderr.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "load.h"
#include "options.h"
#include "storm.h"

namespace cohort::bench {

struct ServerInfo {
  std::string name;     // "cohortd", "pytorch" or "target"
  std::string address;  // host:port
  std::string version;  // e.g. "torch 1.13.0a0", when known
  std::string notes;    // anything odd: did not stop cleanly, unresponsive after a storm
};

// One ops/s cell; results[k] belongs to servers[k].
struct OpsCell {
  int clients = 0;
  KeyMode mode = KeyMode::kDistinct;
  std::vector<OpsResult> results;
};

// One storm size; results[k] belongs to servers[k].
struct StormCell {
  int ranks = 0;
  std::vector<StormResult> results;
};

struct BenchReport {
  BenchOptions options;
  std::vector<ServerInfo> servers;
  std::vector<OpsCell> ops;
  std::vector<StormCell> storms;
  int cpus = 0;
  std::array<double, 3> load_before{}, load_after{};  // /proc/loadavg
  long fd_limit = 0;
  bool pinned = false;  // servers on CPU 0, generator on the rest
};

// Runs everything `options` asks for. Throws cohort::Error when a server cannot be started;
// failures inside a cell are reported in that cell instead.
BenchReport run_bench(const BenchOptions& options);

}  // namespace cohort::bench

// store_bench's command line: which cells to run, against which servers, for how long.
#pragma once

#include <string>
#include <vector>

#include "cohort/rdzv/codec.h"
#include "load.h"

namespace cohort::bench {

struct BenchOptions {
  std::vector<int> clients = {1, 2, 4, 8};
  std::vector<KeyMode> key_modes = {KeyMode::kDistinct, KeyMode::kShared};
  std::vector<int> storms = {1000, 10000};
  // Started by the benchmark: cohortd, pytorch, and cohortd-scraped (cohortd with --metrics-addr,
  // its /metrics fetched every scrape_interval_s while it is measured).
  std::vector<std::string> servers = {"cohortd", "pytorch"};
  double scrape_interval_s = 1.0;
  std::string target;  // "host:port" of a running server; replaces `servers` when set
  rdzv::Dialect dialect = rdzv::Dialect::kLegacy;
  double duration_s = 2.0;
  double warmup_s = 0.5;
  int threads = 1;
  int repeat = 1;  // runs per cell and server; the median is reported
  // Servers on CPU 0, the generator on the others (with at least two CPUs). Off by default: on
  // a shared machine a pinned process cannot move away from other load (p99 reached 4 ms), and
  // cross-CPU wake-ups made one-client round trips three times dearer on this VM.
  bool pin = false;
  size_t value_bytes = 64;
  double storm_timeout_s = 60;
  std::string cohortd;  // default: the cohortd next to this binary
  std::string python;   // default: COHORT_TORCH_PYTHON (/usr/bin/python3)
};

// Parses argv into *out. Returns -1 to go on, else an exit status (0 after --help, 2 after a usage
// error, with the message printed).
int parse_options(int argc, char** argv, BenchOptions* out);

}  // namespace cohort::bench

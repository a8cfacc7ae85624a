// cohortctl's command line and its `status` command: reads the jobs of a store (job_status.h) and
// prints them (status_view.h), once or, with --watch, redrawn every --interval seconds on a cleared
// terminal until SIGINT or SIGTERM. cohortctl_main.cc only calls these.
#pragma once

#include <chrono>
#include <string>

namespace cohort::launch {

struct CtlConfig {
  std::string store;       // HOST:PORT
  std::string token_file;  // --token-file, else COHORT_STORE_TOKEN_FILE; "" for none
  std::string job;         // --job: the detail of this run id
  bool json = false;
  bool watch = false;
  double interval_s = 2;
  int count = 0;  // --count (hidden): with --watch, stop after this many refreshes (0: never)
  double connect_timeout_s = 5;
};

// Parses argv. Returns -1 to go on, else the exit status (0 after --help/--version, 2 for a usage
// error, printed).
int parse_ctl_args(int argc, char** argv, CtlConfig* config);

// Runs `cohortctl status`. Returns the exit status: 0, or 1 (the store cannot be reached or read,
// the job is unknown), the reason printed on stderr.
int run_status(const CtlConfig& config);

}  // namespace cohort::launch

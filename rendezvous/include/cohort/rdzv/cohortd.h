// cohortd: the standalone store daemon. run_cohortd() is its whole program, so tests can drive it
// in-process; cohortd_main.cc only calls it.
#pragma once

#include <chrono>
#include <string>

#include "cohort/base/metrics_endpoint.h"
#include "cohort/rdzv/server.h"

namespace cohort::rdzv {

struct CohortdConfig {
  StoreServerOptions server;
  std::string port_file;  // when set, "<port>\n" is written there (atomically) once listening
  // When more than 0: exit once no client has been connected for this long (from the start, or
  // from the last disconnection). What cohortrun uses for a c10d endpoint's store, which serves
  // every job meeting there and must not outlive them all.
  std::chrono::milliseconds exit_when_idle{0};
  std::string log_file;             // empty: log to stderr
  std::string log_format = "text";  // or "json": one object per line
  // --metrics-addr HOST:PORT, or --metrics-port N on 127.0.0.1: where GET /metrics is served.
  std::string metrics_addr;
  int metrics_port = -1;  // -1: no metrics endpoint
};

// Where cohortd serves its metrics: --metrics-addr, else --metrics-port on 127.0.0.1 whatever
// --host is (the metrics say what the store holds and who uses it, token or not; a Prometheus on
// another host is named with --metrics-addr). Throws UsageError for a malformed flag.
MetricsAddress cohortd_metrics_address(const CohortdConfig& config);

// Parses cohortd's command line into *config. Returns -1 to go on, else an exit status (0 after
// --help, 2 after a usage error, with the message printed).
int parse_cohortd_args(int argc, char** argv, CohortdConfig* config);

// Raises RLIMIT_NOFILE's soft limit to the hard limit (thousands of clients need descriptors).
// Returns the new soft limit.
long raise_fd_limit();

// Serves until SIGINT or SIGTERM. Prints the listening address as the first line of stdout.
// SIGPIPE is ignored and log lines never block serving (a log nobody reads loses lines, counted
// in a later line). Returns the exit status.
int run_cohortd(const CohortdConfig& config);

}  // namespace cohort::rdzv

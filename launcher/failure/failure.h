// Worker failures and attempt outcomes: what agents publish in the store and what the failure
// summary prints.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace cohort::launch {

struct WorkerFailure {
  int node_rank = 0;
  int local_rank = 0;
  int global_rank = 0;
  std::string host;
  int pid = 0;
  int exit_code = 0;     // torchrun's convention: -N when killed by signal N
  double timestamp = 0;  // wall clock, seconds since the epoch; orders failures
  std::string reason;    // "exited with code 3", "killed by SIGSEGV", "hung: no heartbeat for 5 s"
  std::string error_file;  // the worker's error file when it wrote one, else ""
  std::string message;     // from the error file, else the reason
  std::string traceback;   // from the error file, else the tail of the worker's stderr
  // What NVML said about the worker's GPU when it failed (an Xid, ECC errors, a thermal
  // throttle; GpuMonitor::failure_note), filled on the worker's own node; "" when nothing.
  std::string gpu;
  // A hang's culprit (observe/hang_watch.h): the ranks that waited for it, one line each ("rank 0
  // (n1, pid 4242): waits in all_reduce ..."); they are not failures themselves.
  std::vector<std::string> waiting;
  // The error file as read (at most kMaxErrorFileBytes), on the worker's own node only: never
  // published, for the error file cohortrun writes for its own launcher.
  std::string error_file_text;
};

// How a round ended, decided once in the store by the first node to report.
struct Outcome {
  enum Kind {
    kSucceeded,  // every worker of every node exited 0
    kFailed,     // a worker or a node failed: restart while restarts <= --max-restarts
    kAborted,    // a node was told to stop (a signal): no restart
    kRescale,    // membership changes (a node waits to join): restart without spending one
  };
  Kind kind = kSucceeded;
  int node_rank = 0;   // the node that decided it
  int restarts = 0;    // the job's restart count once this outcome is applied
  std::string detail;  // why, in words ("SIGTERM received on node 1", "node b lost: ...")
  std::optional<WorkerFailure> first_failure;  // kFailed: the deciding node's earliest failure
  // Wall clock (seconds since the epoch) when the deciding node published it; 0: unknown (a
  // record of an older cohortrun). round_ops::publish_outcome fills it.
  double decided_at = 0;
};

// Where a failure happened: the worker (or node) it is about.
struct FailureSite {
  int node_rank = 0;
  int local_rank = 0;
  int global_rank = 0;
  std::string host;
  int pid = 0;
};

// The one way to build a failure record: `reason` is also its message until an error file
// says more. `timestamp` 0 means now.
WorkerFailure make_failure(const FailureSite& site, int exit_code, std::string reason,
                           double timestamp = 0);

// A wait status in torchrun's terms: the exit code (-N for signal N) and the reason in words
// ("exited with code 3", "killed by SIGSEGV (signal 11)"). `failed` is false for exit code 0.
struct ExitDescription {
  bool failed = false;
  int exit_code = 0;
  std::string reason;
};
ExitDescription describe_exit(int wait_status);

// Seconds since the epoch (failures are ordered across nodes by it).
double wall_clock_now();

std::string to_json(const WorkerFailure& f);
std::string to_json(const std::vector<WorkerFailure>& fs);
std::string to_json(const Outcome& o);
// These throw ProtocolError naming what is malformed.
WorkerFailure failure_from_json(const std::string& text);
std::vector<WorkerFailure> failures_from_json(const std::string& text);
Outcome outcome_from_json(const std::string& text);

// "SIGSEGV" for 11; "SIG<n>" for unknown numbers.
std::string signal_name(int sig);
// Parses "SIGTERM", "TERM" or "15"; returns 0 when unknown.
int signal_number(const std::string& name);

}  // namespace cohort::launch

// NodeStatus: what one node agent says about itself while its job runs, published in the store
// under "cohort/<run_id>/status/<node_rank>" (keys::status) every keep-alive tick, and read by
// `cohortctl status` and by the straggler check of node rank 0's agent.
//
// The JSON is a contract between versions of cohortrun and cohortctl: fields are only added;
// a reader ignores fields it does not know and takes a missing one as unknown.
//
//   {"node_rank": 0, "host": "n1", "round": 2, "state": "running", "restarts": 1,
//    "max_restarts": 3, "nnodes": 2, "updated": 1764790000.25,
//    "workers": [{"rank": 0, "local_rank": 0, "pid": 4242, "state": "running",
//                 "heartbeat_age_s": 0.1, "step": 120, "step_s": 0.052, "items_per_s": 2461.5,
//                 "comm_share": 0.31, "cpu_s": 12.5, "rss_bytes": 104857600, "gpu": ""}],
//    "stragglers": [{"rank": 3, "host": "n2", "ratio": 2.4, "reason": "GPU 1: thermal ..."}],
//    "hang": {...}}   (observe/hang_status.h: the last hang probe this node judged)
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "observe/hang_status.h"

namespace cohort::launch {

struct WorkerStatus {
  int rank = 0;
  int local_rank = 0;
  int pid = 0;
  std::string state;  // "starting", "running", "exited", "failed"
  // Seconds since the worker's last heartbeat (a PyTorch worker without the cohort module never
  // beats: unknown).
  std::optional<double> heartbeat_age_s;
  // From libcohort's step reports (cohort::report_step): unknown for workers that make none.
  std::optional<long long> step;
  std::optional<double> step_s;       // the last step's wall time
  std::optional<double> items_per_s;  // samples or tokens per second, as the worker counts them
  std::optional<double> comm_share;   // share of the step spent in communication, 0..1
  std::optional<double> cpu_s;        // user + system CPU seconds, from /proc
  std::optional<long long> rss_bytes;
  std::string gpu;  // its GPU's notable condition ("thermal throttle at 91 C"; "" when none)
};

struct Straggler {
  int rank = 0;
  std::string host;
  double ratio = 0;    // its step time over the median of all ranks'
  std::string reason;  // what NVML says about its GPU ("" when nothing)
};

struct NodeStatus {
  int node_rank = 0;
  std::string host;
  int round = 0;
  std::string state;  // "rendezvous", "running", "stopping", "succeeded", "failed"
  int restarts = 0;
  int max_restarts = 0;
  int nnodes = 1;
  double updated = 0;  // Unix time, seconds
  std::vector<WorkerStatus> workers;
  std::vector<Straggler> stragglers;  // node rank 0's record only
  std::optional<HangStatus> hang;     // the last hang probe this node judged
};

std::string to_json(const NodeStatus& s);
// Throws ProtocolError naming what is malformed.
NodeStatus node_status_from_json(const std::string& text);

}  // namespace cohort::launch

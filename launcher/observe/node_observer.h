// NodeObserver: what a node agent tells the world about its job while it runs.
//
// Every second it reads the agent's state and its workers (heartbeats and libcohort's step
// reports through the WorkerGroup, CPU and RSS from /proc, the GPU's condition through NVML) into
// a NodeStatus (node_status.h). It publishes that record in the store (keys::status; every
// second, every 5 s on etcd), where `cohortctl status` reads it; node rank 0's observer also
// reads every node's record and runs the straggler check (straggler_check.h): a rank that stays
// slow is named in one log line, with its host, its ratio and what NVML says about its GPU, and
// in rank 0's record and metrics.
// With --metrics-port or --metrics-addr it serves the same, and the GPU metrics, in Prometheus'
// text format.
//
// Publishing goes through a store connection and thread of its own
// (JobRendezvous::publish_status), only while the workers run, and never more than one at a
// time: a slow store delays the records, never the agent.
//
// Thread safety: the loop's thread only.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/metrics_endpoint.h"
#include "loop/loop_clock.h"
#include "observe/node_status.h"
#include "observe/straggler_check.h"
#include "workers/worker_group.h"

namespace asio {
class io_context;
}
namespace spdlog {
class logger;
}

namespace cohort::launch {

class GpuMonitor;
class JobRendezvous;

// What the agent says about itself at a tick.
struct AgentView {
  std::string phase;     // NodeStatus::state
  bool running = false;  // workers run: publish and judge
  int round = 0;
  int restarts = 0;
  int max_restarts = 0;
  int node_rank = 0;
  int nnodes = 1;
  int base_rank = 0;
  const WorkerGroup* group = nullptr;  // this round's, or null
  JobRendezvous* rdzv = nullptr;       // null: nothing is published
  const HangStatus* hang = nullptr;    // the last hang probe this node judged, or null
};

struct NodeObserverOptions {
  std::string run_id;
  std::string host;
  MetricsAddress metrics;  // disabled: no endpoint
  double straggler_factor = 1.5;
  std::chrono::milliseconds straggler_window{30000};
  std::chrono::milliseconds interval{1000};  // reads of the workers (and the metrics' freshness)
  // How often the status record is written. Every second on cohortd (a write in memory); less
  // often on etcd, where each write is a Raft round and an fsync, for every node of the job.
  std::chrono::milliseconds publish_interval{1000};
  // Called at every tick (the hang watch looks for other nodes' probes then).
  std::function<void()> on_tick;
};

class NodeObserver {
 public:
  // `io`, `clock`, `gpu` (may be null) and whatever `view` refers to must outlive the observer.
  // Throws IoError when the metrics endpoint cannot listen.
  NodeObserver(asio::io_context& io, LoopClock& clock, NodeObserverOptions options, GpuMonitor* gpu,
               std::shared_ptr<spdlog::logger> log, std::function<AgentView()> view);
  ~NodeObserver();
  NodeObserver(const NodeObserver&) = delete;
  NodeObserver& operator=(const NodeObserver&) = delete;

  // A new round starts: stragglers are judged afresh.
  void new_round() { stragglers_.reset(); }

  // The metrics text now (what GET /metrics answers).
  std::string metrics_text();

 private:
  void tick();
  NodeStatus read_status(const AgentView& v);
  void publish(const AgentView& v, const NodeStatus& status);
  // Node rank 0: judges the ranks of every node's record.
  void judge(const std::vector<NodeStatus>& nodes);

  LoopClock& clock_;
  NodeObserverOptions options_;
  GpuMonitor* gpu_;
  std::shared_ptr<spdlog::logger> log_;
  std::function<AgentView()> view_;
  std::unique_ptr<LoopTimer> timer_;
  std::unique_ptr<MetricsEndpoint> endpoint_;
  StragglerCheck stragglers_;
  std::vector<Straggler> current_stragglers_;
  std::optional<NodeStatus> last_;
  bool publishing_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_publish_;
  std::shared_ptr<int> alive_ = std::make_shared<int>(0);  // store callbacks check it
};

}  // namespace cohort::launch

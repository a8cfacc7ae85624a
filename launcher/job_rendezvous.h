// JobRendezvous: everything the node agent does through the store, behind one object: hosting the
// store (static: node 0 on the master port; elastic: whichever agent can bind the endpoint, unless
// a standalone cohortd already serves it), joining rounds (StaticProtocol or DynamicProtocol),
// publishing and watching each round's outcome, keep-alives and lost-node detection (elastic), the
// per-round store that workers use (elastic: hosted by node rank 0), and the exit barrier.
//
// All methods run on the launcher's loop thread; blocking store calls go through a StoreBridge.
#pragma once

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/launch/launch_config.h"
#include "cohort/rdzv/server.h"
#include "dynamic_rendezvous.h"
#include "failure.h"
#include "static_rendezvous.h"
#include "store_bridge.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class JobRendezvous {
 public:
  // Resolves how this node takes part. Throws std::runtime_error / std::invalid_argument with a
  // message for the user (bad endpoint, no route, a loopback address in a multi-node job, a
  // master port in use).
  JobRendezvous(asio::io_context& io, const LaunchConfig& config, std::string run_id,
                std::shared_ptr<spdlog::logger> log);
  ~JobRendezvous();

  bool elastic() const { return elastic_; }
  // Where workers find their store for a round: MASTER_ADDR and MASTER_PORT.
  std::pair<std::string, int> master_for(const RankAssignment& a) const;

  using Done = StoreBridge::Done;
  void join(int after_round, NodeInfo self,
            std::function<void(std::exception_ptr, RankAssignment)> done);
  void watch_outcome(int round, std::function<void(Outcome)> on_outcome,
                     std::function<void(std::string)> on_error);
  void publish_failure(int round, int node_rank, int restart_count,
                       std::vector<WorkerFailure> failures, Done done);
  void publish_success(int round, int node_rank, int nnodes, Done done);
  void publish_abort(int round, int node_rank, std::string detail, Done done);
  void collect_failures(int round, int nnodes,
                        std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done);
  // Counts this node out; the agent that hosts the rendezvous store waits for the others.
  void exit_barrier(int round, int nnodes, std::chrono::milliseconds timeout, Done done);

  // Elastic: beats every keep-alive interval and checks the round's other nodes; a lost node
  // ends `a.round` as failed (restarts + 1). When this node itself cannot reach the store for a
  // whole keep-alive period, `on_store_lost` runs (it is cut off: its workers must stop).
  // No-op for the static rendezvous.
  void start_keep_alive(const RankAssignment& a, std::function<void(std::string)> on_store_lost);
  void stop_keep_alive();

  const std::string& node_id() const { return node_id_; }
  const std::string& advertised_address() const { return advertised_; }

 private:
  void keep_alive_tick();
  // Applies --auth-token-file and --allow-unauthenticated-from to a store we host.
  void secure(rdzv::StoreServerOptions* so) const;

  const LaunchConfig& config_;
  std::string run_id_;
  std::shared_ptr<spdlog::logger> log_;
  bool elastic_ = false;
  DynamicConfig dynamic_;
  std::unique_ptr<RendezvousProtocol> protocol_;
  std::unique_ptr<rdzv::StoreServerThread> hosted_;  // the rendezvous store, when we host it
  bool hosts_store_ = false;
  std::string master_addr_;  // static: workers' store
  int master_port_ = 0;
  std::string advertised_;
  std::string node_id_;
  std::unique_ptr<StoreBridge> bridge_;

  std::mutex worker_store_mu_;  // the worker store is made on the bridge's thread
  std::unique_ptr<rdzv::StoreServerThread> worker_store_;  // elastic, node rank 0

  asio::steady_timer keep_alive_timer_;
  std::shared_ptr<LivenessMonitor> liveness_;  // used on the bridge's thread
  RankAssignment alive_round_;
  bool keep_alive_on_ = false;
  bool lost_reported_ = false;
  bool beat_in_flight_ = false;
  std::chrono::steady_clock::time_point last_beat_ok_;
  std::function<void(std::string)> on_store_lost_;
};

}  // namespace cohort::launch

// ElasticJob: MIN:MAX nodes meeting through a c10d endpoint (a standalone cohortd, or the store an
// agent hosts on that endpoint) or through etcd, in rounds that re-form as nodes fail, vanish or
// arrive (DynamicProtocol); keep-alives and lost-node detection while a round runs
// (LivenessMonitor); and a store of their own for each round's workers, hosted by node rank 0
// (rdzv/round_stores.h).
//
// Hosting the endpoint: when it names this machine and nobody serves it yet, this agent starts the
// rendezvous store there (torchrun's c10d behaviour; rdzv-conf is_host overrides the guess), as a
// cohortd process that every job meeting at the endpoint shares and that outlives this agent
// (endpoint_store.h); a standalone cohortd already on the port wins. Port 0 ("localhost:0",
// torchrun's recipe for stacked one-node jobs) hosts on a free port; only a one-node job can use
// it, since no other node could learn the port.
#pragma once

#include "cohort/rdzv/tcp_store.h"
#include "plan/rdzv_conf.h"
#include "rdzv/dynamic_protocol.h"
#include "rdzv/endpoint_store.h"
#include "rdzv/job_rendezvous.h"
#include "rdzv/liveness_monitor.h"
#include "rdzv/store_host.h"

namespace cohort::launch {

enum class ElasticStore { kCohort, kEtcd };

// How long an endpoint's cohortd stays once its last client has left.
inline constexpr std::chrono::milliseconds kEndpointStoreLinger{std::chrono::seconds(30)};

struct ElasticJobSettings {
  ElasticStore store = ElasticStore::kCohort;
  int min_nodes = 1;
  int max_nodes = 1;
  std::string endpoint;    // host:port (2379 for etcd, 29400 otherwise, when the port is absent)
  std::string local_addr;  // --local-addr: what this node advertises ("" = the route's address)
  RdzvConf conf;
  // While the store cannot be reached, the round's workers keep running this long (at least the
  // keep-alive timeout); peers are not judged meanwhile, nor for one keep-alive timeout after.
  std::chrono::milliseconds store_loss_grace{std::chrono::seconds(60)};
  StoreSecurity security;
  // Tests: every store connection comes from here; no store is hosted (workers get port 0).
  StoreBridge::StoreFactory store_override;
  std::string advertised_override;  // tests: the address this node advertises
};

class ElasticJob final : public JobRendezvous {
 public:
  // Throws UsageError for an endpoint that cannot work (no endpoint, port 0 with several nodes,
  // a loopback address advertised to other nodes), IoError when there is no route to it.
  ElasticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
             ElasticJobSettings settings, std::shared_ptr<spdlog::logger> log);
  ~ElasticJob() override;

  HostPort worker_store(const RankAssignment& a) const override;
  void join(int after_round, NodeInfo self,
            std::function<void(std::exception_ptr, RankAssignment)> done) override;
  void start_keep_alive(const RankAssignment& a,
                        std::function<void(std::string)> on_store_lost) override;
  void stop_keep_alive() override;
  bool hosts_store() const override { return hosted_ != nullptr; }
  pid_t store_process() const override { return endpoint_store_ ? endpoint_store_->pid() : -1; }

  const std::string& node_id() const { return node_id_; }

  // What is settled before the store bridge exists (elastic_job.cc).
  struct Setup;

 private:
  ElasticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
             ElasticJobSettings settings, std::shared_ptr<spdlog::logger> log, Setup setup);
  void keep_alive_tick();
  void report_lost(const std::string& node_id, int round);
  // The node that takes the rendezvous store over when the one that started it is lost: the
  // running round's node of lowest rank other than the starter; nullptr when the store is not
  // one a node of this round started (a standalone cohortd, etcd) or nobody is left.
  const NodeInfo* store_successor() const;
  // Moves the store to store_successor() (which starts a cohortd there) and ends the round.
  void move_store(std::chrono::milliseconds silent);

  ElasticJobSettings settings_;
  std::unique_ptr<EndpointStore> endpoint_store_;    // the endpoint's cohortd, when we started it
  std::unique_ptr<rdzv::StoreServerThread> hosted_;  // the rendezvous store, when we host it
  TcpStoreOptions client_;  // how the rendezvous store is reached now (it can move)
  std::string advertised_;
  std::string node_id_;
  DynamicProtocol protocol_;

  // Each round's workers' store, hosted while this node is node rank 0 (null: tests that host
  // nothing); the bridge's thread opens them.
  std::unique_ptr<RoundStores> round_stores_;

  std::unique_ptr<LoopTimer> keep_alive_timer_;
  std::shared_ptr<LivenessMonitor> liveness_;  // used on the bridge's thread
  RankAssignment alive_round_;
  bool keep_alive_on_ = false;
  bool lost_reported_ = false;
  bool beat_in_flight_ = false;
  bool store_unreachable_ = false;  // the last keep-alive failed: peers are judged afresh after
  Clock::time_point last_beat_ok_;
  std::function<void(std::string)> on_store_lost_;
};

}  // namespace cohort::launch

// StaticJob: torchrun's static rendezvous. A fixed number of nodes, each told its node rank;
// node 0 hosts the rendezvous store on the master address and port. Each round's workers get a
// store of their own (MASTER_ADDR is the master address, MASTER_PORT that round's port), which
// node 0 also hosts (rdzv/round_stores.h); unlike torchrun's static rendezvous, where the workers
// share the agents' store on the master port across rounds.
#pragma once

#include "rdzv/job_rendezvous.h"
#include "rdzv/rendezvous_protocol.h"
#include "rdzv/store_host.h"

namespace cohort::launch {

struct StaticJobSettings {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0: a free port (one-node jobs only)
  std::chrono::milliseconds timeout{std::chrono::seconds(900)};  // joining a round
  StoreSecurity security;
  // Tests: every store connection comes from here and no store is hosted.
  StoreBridge::StoreFactory store_override;
};

class StaticJob final : public JobRendezvous {
 public:
  // Node 0 starts hosting at once. Throws cohort::Error naming the address when the master port
  // cannot be bound.
  StaticJob(asio::io_context& io, LoopClock& clock, std::string run_id, StaticJobSettings settings,
            std::shared_ptr<spdlog::logger> log);
  ~StaticJob() override;

  HostPort worker_store(const RankAssignment& a) const override;
  void join(int after_round, NodeInfo self,
            std::function<void(std::exception_ptr, RankAssignment)> done) override;
  bool hosts_store() const override { return hosts_for_others_; }

  // Node 0's store and how it is reached (by the workers, and by this agent).
  struct Hosting {
    std::unique_ptr<rdzv::StoreServerThread> server;
    HostPort workers;
    HostPort self;
    std::string listen;  // where node 0's stores listen
  };

 private:
  static StoreBridge::StoreFactory factory(const StaticJobSettings& s, const HostPort& dial);
  StaticJob(asio::io_context& io, LoopClock& clock, std::string run_id, StaticJobSettings settings,
            std::shared_ptr<spdlog::logger> log, Hosting hosting);

  StaticJobSettings settings_;
  std::unique_ptr<rdzv::StoreServerThread> hosted_;  // node 0's store
  HostPort master_;                                  // the master store, as every node dials it
  std::unique_ptr<RoundStores> round_stores_;        // node 0: each round's workers' store
  bool hosts_for_others_ = false;
  StaticProtocol protocol_;
};

}  // namespace cohort::launch

// StaticJob: torchrun's static rendezvous. A fixed number of nodes, each told its node rank;
// node 0 hosts the store on the master address and port, and that store is also every round's
// workers' store (MASTER_ADDR:MASTER_PORT).
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

  HostPort worker_store(const RankAssignment&) const override { return master_; }
  void join(int after_round, NodeInfo self,
            std::function<void(std::exception_ptr, RankAssignment)> done) override;
  bool hosts_store() const override { return hosts_for_others_; }

  // Node 0's store and how it is reached (by the workers, and by this agent).
  struct Hosting {
    std::unique_ptr<rdzv::StoreServerThread> server;
    HostPort workers;
    HostPort self;
  };

 private:
  static StoreBridge::StoreFactory factory(const StaticJobSettings& s, const HostPort& dial);
  StaticJob(asio::io_context& io, LoopClock& clock, std::string run_id, StaticJobSettings settings,
            std::shared_ptr<spdlog::logger> log, Hosting hosting);

  StaticJobSettings settings_;
  std::unique_ptr<rdzv::StoreServerThread> hosted_;  // node 0's store
  HostPort master_;                                  // the store, as workers dial it
  bool hosts_for_others_ = false;
  StaticProtocol protocol_;
};

}  // namespace cohort::launch

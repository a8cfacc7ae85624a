#include "rdzv/static_job.h"

#include <spdlog/spdlog.h>

#include "cohort/rdzv/tcp_store.h"

namespace cohort::launch {
namespace {

// Node 0 hosts the store: on a loopback master address (one node) it listens there only, else on
// every interface.
StaticJob::Hosting host_if_node0(const StaticJobSettings& s) {
  StaticJob::Hosting h;
  h.workers = HostPort{strip_brackets(s.master_addr), s.master_port};
  h.self = h.workers;
  if (s.node_rank != 0 || s.store_override) return h;
  const bool v6 = h.workers.host.find(':') != std::string::npos;
  const std::string listen =
      s.nnodes == 1 ? listen_address_for(h.workers.host) : (v6 ? "::" : "0.0.0.0");
  h.server = host_store(listen, s.master_port, s.security);
  h.listen = listen;
  h.workers.port = h.self.port = h.server->port();
  h.self.host = local_dial_address(listen);
  return h;
}

}  // namespace

StoreBridge::StoreFactory StaticJob::factory(const StaticJobSettings& s, const HostPort& dial) {
  if (s.store_override) return s.store_override;
  TcpStoreOptions client;
  client.host = dial.host;
  client.port = dial.port;
  client.connect_timeout = s.timeout;
  client.timeout = std::max<std::chrono::milliseconds>(s.timeout, std::chrono::seconds(60));
  client.auth_token = s.security.token;
  // Our stores (cohortd, or an agent's) run tagged writes once: safe to retry across a restart.
  client.dialect = StoreDialect::kCurrent;
  client.tagged_writes = true;
  const bool remote = s.node_rank != 0;
  return [client, remote](const std::atomic<bool>* abandon) -> std::unique_ptr<Store> {
    if (remote) check_reachable(client.host, client.port, "--master-addr");
    TcpStoreOptions o = client;
    o.abandon = abandon;
    return std::make_unique<TcpStore>(o);
  };
}

StaticJob::StaticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
                     StaticJobSettings settings, std::shared_ptr<spdlog::logger> log)
    : StaticJob(io, clock, std::move(run_id), settings, std::move(log), host_if_node0(settings)) {}

StaticJob::StaticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
                     StaticJobSettings settings, std::shared_ptr<spdlog::logger> log,
                     Hosting hosting)
    : JobRendezvous(io, clock, std::move(run_id), factory(settings, hosting.self), std::move(log)),
      settings_(std::move(settings)),
      hosted_(std::move(hosting.server)),
      master_(hosting.workers),
      round_stores_(hosted_ != nullptr
                        ? std::make_unique<RoundStores>(hosting.listen, settings_.security)
                        : nullptr),
      hosts_for_others_(hosted_ != nullptr && settings_.nnodes > 1),
      protocol_(settings_.nnodes, settings_.timeout) {
  if (hosted_) log_->info("store listening on {} (run id '{}')", hosted_->address(), run_id_);
}

StaticJob::~StaticJob() {
  stop_bridge();  // its thread may still run protocol_.join()
}

void StaticJob::join(int after_round, NodeInfo self,
                     std::function<void(std::exception_ptr, RankAssignment)> done) {
  join_through(&protocol_, round_stores_.get(), after_round, std::move(self), std::move(done));
}

HostPort StaticJob::worker_store(const RankAssignment& a) const {
  // Node 0's store of this round, on the master address; without one (tests that host nothing),
  // the master store itself.
  const int port = a.nodes.empty() ? 0 : a.nodes.front().store_port;
  return port != 0 ? HostPort{master_.host, port} : master_;
}

}  // namespace cohort::launch

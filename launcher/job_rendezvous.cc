#include "job_rendezvous.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <sstream>

#include "cohort/base/net.h"
#include "cohort/base/random.h"
#include "cohort/rdzv/etcd_store.h"
#include "cohort/rdzv/tcp_store.h"
#include "round_ops.h"

namespace cohort::launch {
namespace {

bool conf_flag(const std::string& conf, const std::string& key, bool* value) {
  auto at = conf.find(key + "=");
  if (at == std::string::npos || (at > 0 && conf[at - 1] != ',')) return false;
  std::string v = conf.substr(at + key.size() + 1, conf.find(',', at) - at - key.size() - 1);
  *value = v == "1" || v == "true" || v == "True" || v == "yes";
  return true;
}

}  // namespace

JobRendezvous::JobRendezvous(asio::io_context& io, const LaunchConfig& c, std::string run_id,
                             std::shared_ptr<spdlog::logger> log)
    : config_(c), run_id_(std::move(run_id)), log_(std::move(log)), keep_alive_timer_(io) {
  const std::string& b = c.rdzv_backend;
  elastic_ = b == "c10d" || b == "cohort" || b == "etcd";
  const bool etcd = b == "etcd";
  TcpStoreOptions client;
  if (!elastic_) {
    // Static: node 0 hosts the store on the master port; it is also the workers' store.
    client.connect_timeout = c.rdzv_timeout;
    client.timeout = std::max<std::chrono::milliseconds>(c.rdzv_timeout, std::chrono::seconds(60));
    const int nnodes = c.max_nodes;
    if (c.node_rank == 0) {
      rdzv::StoreServerOptions so;
      // One node on a loopback address: listen there only. Several nodes: every interface.
      if (nnodes == 1 && is_loopback_host(c.master_addr)) {
        so.host = c.master_addr == "localhost" ? "127.0.0.1" : c.master_addr;
      } else {
        so.host = c.master_addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
      }
      secure(&so);
      bool pick_free = nnodes == 1 && (!c.master_port_given || c.standalone);
      so.port = static_cast<uint16_t>(pick_free ? 0 : c.master_port);
      hosted_ = std::make_unique<rdzv::StoreServerThread>(so);
      hosts_store_ = nnodes > 1;
      master_port_ = hosted_->port();
      client.host = so.host == "0.0.0.0" ? "127.0.0.1" : (so.host == "::" ? "::1" : so.host);
      log_->info("store listening on {} (run id '{}')", hosted_->address(), run_id_);
    } else {
      master_port_ = c.master_port;
      client.host = c.master_addr;
    }
    master_addr_ = c.master_addr;
    client.port = master_port_;
    protocol_ = std::make_unique<StaticProtocol>(nnodes, c.rdzv_timeout);
  } else {
    if (std::string err = parse_rdzv_conf(c.rdzv_conf, &dynamic_); !err.empty())
      throw std::invalid_argument(err);
    dynamic_.min_nodes = c.min_nodes;
    dynamic_.max_nodes = c.max_nodes;
    if (c.rdzv_endpoint.empty()) {
      throw std::invalid_argument("--rdzv-backend " + b +
                                  " needs --rdzv-endpoint host:port (a "
                                  "cohortd, or the address of one of the nodes)");
    }
    HostPort ep = parse_host_port(c.rdzv_endpoint, etcd ? 2379 : 29400);
    // Host the store when the endpoint is ours and nobody serves it yet (a standalone cohortd,
    // or another agent on this machine, already holds the port). etcd is never ours to host.
    bool host = false;
    if (!conf_flag(c.rdzv_conf, "is_host", &host)) host = !etcd && is_local_host(ep.host);
    if (host) {
      rdzv::StoreServerOptions so;
      so.host = is_loopback_host(ep.host)
                    ? (ep.host == "localhost" ? "127.0.0.1" : ep.host)
                    : (ep.host.find(':') != std::string::npos ? "::" : "0.0.0.0");
      so.port = static_cast<uint16_t>(ep.port);
      secure(&so);
      try {
        hosted_ = std::make_unique<rdzv::StoreServerThread>(so);
        hosts_store_ = true;
        log_->info("hosting the rendezvous store on {}", hosted_->address());
      } catch (const std::exception& e) {
        log_->info("not hosting the rendezvous store ({}); joining it as a client", e.what());
      }
    }
    // The address others reach us by: --local-addr, else the one the route to the endpoint uses.
    advertised_ = c.local_addr;
    if (advertised_.empty()) advertised_ = local_address_towards(ep.host, ep.port);
    if (c.max_nodes > 1 && is_loopback_host(advertised_) && !is_loopback_host(ep.host)) {
      throw std::invalid_argument(
          "this node would advertise " + advertised_ +
          " to the other nodes of a multi-node job, "
          "which they cannot reach; pass --local-addr with an address on the network of " +
          ep.to_string());
    }
    node_id_ = advertised_ + ":" + std::to_string(::getpid()) + ":" + random_tag(4);
    client.host = ep.host;
    client.port = ep.port;
    client.connect_timeout = dynamic_.join_timeout;
    // Store calls outside the (explicitly timed) rendezvous waits must fail fast: a node cut off
    // from the store finds out within one keep-alive period and stops its workers.
    client.timeout = std::max<std::chrono::milliseconds>(
        dynamic_.keep_alive_interval * dynamic_.keep_alive_max_attempt, std::chrono::seconds(2));
    protocol_ = std::make_unique<DynamicProtocol>(dynamic_);
    liveness_ = std::make_shared<LivenessMonitor>(
        node_id_, dynamic_.keep_alive_interval * dynamic_.keep_alive_max_attempt);
  }
  client.auth_token = c.auth_token;
  // Our stores (cohortd, or an agent's) run tagged writes once: safe to retry across a restart.
  client.dialect = StoreDialect::kCurrent;
  client.tagged_writes = true;
  StoreBridge::StoreFactory factory;
  if (b == "etcd") {
    factory = [client](const std::atomic<bool>* abandon) -> std::unique_ptr<Store> {
      EtcdStoreOptions o;
      o.host = client.host;
      o.port = client.port;
      o.prefix = "/";
      o.timeout = client.timeout;
      o.connect_timeout = client.connect_timeout;
      o.abandon = abandon;
      return std::make_unique<EtcdStore>(o);
    };
  } else {
    factory = [client](const std::atomic<bool>* abandon) -> std::unique_ptr<Store> {
      TcpStoreOptions o = client;
      o.abandon = abandon;
      return std::make_unique<TcpStore>(o);
    };
  }
  bridge_ = std::make_unique<StoreBridge>(io.get_executor(), factory, keys::run_prefix(run_id_));
}

void JobRendezvous::secure(rdzv::StoreServerOptions* so) const {
  so->auth_token = config_.auth_token;
  so->allow_unauthenticated = auth::parse_cidrs(config_.allow_unauthenticated_from);
}

JobRendezvous::~JobRendezvous() {
  keep_alive_timer_.cancel();
  bridge_.reset();
  std::lock_guard lock(worker_store_mu_);
  worker_store_.reset();
}

std::pair<std::string, int> JobRendezvous::master_for(const RankAssignment& a) const {
  if (!elastic_) return {master_addr_, master_port_};
  const NodeInfo& n0 = a.nodes.at(0);
  return {n0.addr, n0.store_port};
}

void JobRendezvous::join(int after_round, NodeInfo self,
                         std::function<void(std::exception_ptr, RankAssignment)> done) {
  self.id = node_id_;
  self.addr = advertised_;
  RendezvousProtocol* protocol = protocol_.get();
  bool elastic = elastic_;
  auto on_rank_known = [this, elastic](int node_rank, NodeInfo* me) {
    if (!elastic || node_rank != 0) return;
    // Node rank 0 serves this round's workers a fresh store: no key of an earlier round lingers.
    rdzv::StoreServerOptions so;
    so.host = me->addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
    so.port = 0;
    secure(&so);
    auto server = std::make_unique<rdzv::StoreServerThread>(so);
    me->store_port = server->port();
    std::lock_guard lock(worker_store_mu_);
    worker_store_ = std::move(server);
  };
  bridge_->call<RankAssignment>(
      [protocol, after_round, self, on_rank_known](Store& s) {
        return protocol->join(s, after_round, self, on_rank_known);
      },
      std::move(done));
}

void JobRendezvous::watch_outcome(int round, std::function<void(Outcome)> on_outcome,
                                  std::function<void(std::string)> on_error) {
  bridge_->watch_outcome(round, std::move(on_outcome), std::move(on_error));
}

void JobRendezvous::publish_failure(int round, int node_rank, int restart_count,
                                    std::vector<WorkerFailure> failures, Done done) {
  bridge_->run(
      [=](Store& s) { round_ops::publish_failure(s, round, node_rank, restart_count, failures); },
      std::move(done));
}

void JobRendezvous::publish_success(int round, int node_rank, int nnodes, Done done) {
  bridge_->run([=](Store& s) { round_ops::publish_success(s, round, node_rank, nnodes); },
               std::move(done));
}

void JobRendezvous::publish_abort(int round, int node_rank, std::string detail, Done done) {
  bridge_->run(
      [=](Store& s) {
        Outcome o;
        o.kind = Outcome::kAborted;
        o.node_rank = node_rank;
        o.detail = detail + " on node " + std::to_string(node_rank);
        o.restarts = round_ops::restarts_after(s, round - 1);
        round_ops::publish_outcome(s, std::max(round, 0), o);
      },
      std::move(done));
}

void JobRendezvous::collect_failures(
    int round, int nnodes,
    std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done) {
  bridge_->call<std::vector<WorkerFailure>>(
      [=](Store& s) { return round_ops::collect_failures(s, round, nnodes); }, std::move(done));
}

void JobRendezvous::exit_barrier(int round, int nnodes, std::chrono::milliseconds timeout,
                                 Done done) {
  bool wait = hosts_store_ && nnodes > 1;
  bridge_->run([=](Store& s) { round_ops::exit_barrier(s, round, nnodes, wait, timeout); },
               std::move(done));
}

void JobRendezvous::start_keep_alive(const RankAssignment& a,
                                     std::function<void(std::string)> on_store_lost) {
  if (!elastic_) return;
  alive_round_ = a;
  keep_alive_on_ = true;
  lost_reported_ = false;
  beat_in_flight_ = false;
  last_beat_ok_ = std::chrono::steady_clock::now();
  on_store_lost_ = std::move(on_store_lost);
  auto liveness = liveness_;
  bridge_->run([liveness](Store&) { liveness->reset(); }, [](std::exception_ptr) {});
  keep_alive_tick();
}

void JobRendezvous::stop_keep_alive() {
  keep_alive_on_ = false;
  keep_alive_timer_.cancel();
}

void JobRendezvous::keep_alive_tick() {
  if (!keep_alive_on_) return;
  keep_alive_timer_.expires_after(dynamic_.keep_alive_interval);
  keep_alive_timer_.async_wait([this](std::error_code ec) {
    if (!ec) keep_alive_tick();
  });
  // Cut off from the store for a whole keep-alive period (a failing or hanging call): the other
  // nodes are dropping this one now, so its workers must stop. Judged here, on the loop, so that a
  // store call stuck in a reconnect cannot delay the verdict.
  auto silent = std::chrono::steady_clock::now() - last_beat_ok_;
  if (silent > dynamic_.keep_alive_interval * dynamic_.keep_alive_max_attempt && on_store_lost_) {
    keep_alive_on_ = false;
    keep_alive_timer_.cancel();
    on_store_lost_(
        "this node has not reached the rendezvous store for " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()) +
        " ms; the other nodes will have dropped it");
    return;
  }
  if (beat_in_flight_) return;
  beat_in_flight_ = true;
  std::vector<std::string> peers;
  for (const auto& n : alive_round_.nodes) peers.push_back(n.id);
  auto liveness = liveness_;
  int round = alive_round_.round;
  bridge_->call<std::vector<std::string>>(
      [liveness, peers](Store& s) { return liveness->tick(s, peers); },
      [this, round](std::exception_ptr err, std::vector<std::string> lost) {
        beat_in_flight_ = false;
        if (!keep_alive_on_ || round != alive_round_.round || err) return;
        last_beat_ok_ = std::chrono::steady_clock::now();
        if (lost.empty() || lost_reported_) return;
        lost_reported_ = true;
        // The lost node's failure, as the failure summary shows it.
        WorkerFailure f;
        for (const auto& n : alive_round_.nodes) {
          if (n.id != lost.front()) continue;
          f.node_rank = n.node_rank;
          f.host = n.host;
          f.pid = n.pid;
          int base = 0;
          for (const auto& m : alive_round_.nodes)
            if (m.node_rank < n.node_rank) base += m.nproc;
          f.global_rank = base;
        }
        f.local_rank = 0;
        f.exit_code = -1;
        f.timestamp =
            std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                .count();
        std::ostringstream secs;
        secs << std::chrono::duration<double>(dynamic_.keep_alive_interval).count() *
                    dynamic_.keep_alive_max_attempt;
        f.reason = "node " + lost.front() + " lost: no keep-alive for " + secs.str() + " s";
        f.message = f.reason;
        log_->warn("{}; ending round {}", f.reason, round);
        int restart_count = alive_round_.restart_count;
        int decider = alive_round_.node_rank;
        bridge_->run(
            [round, restart_count, decider, f](Store& s) {
              Outcome o;
              o.kind = Outcome::kFailed;
              o.node_rank = decider;
              o.restarts = restart_count + 1;
              o.detail = f.reason;
              o.first_failure = f;
              round_ops::publish_outcome(s, round, o);
            },
            [](std::exception_ptr) {});
      });
}

}  // namespace cohort::launch

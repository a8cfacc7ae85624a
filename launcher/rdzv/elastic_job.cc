#include "rdzv/elastic_job.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <atomic>

#include <sstream>

#include "cohort/base/random.h"
#include "cohort/error.h"
#ifdef COHORT_HAVE_ETCD
#include "cohort/rdzv/etcd_store.h"
#endif
#include "cohort/base/duration_text.h"
#include "cohort/rdzv/tcp_store.h"
#include "rdzv/round_ops.h"

namespace cohort::launch {

// What must be known before the base class (and its store bridge) exists.
struct ElasticJob::Setup {
  std::unique_ptr<EndpointStore> endpoint_store;
  std::unique_ptr<rdzv::StoreServerThread> hosted;
  StoreBridge::StoreFactory factory;
  TcpStoreOptions client;  // how the c10d endpoint is reached (host and port included)
  std::string advertised;
  std::string node_id;
};

namespace {

// Connections to the cohortd at client.host:client.port; `what` names it in errors.
StoreBridge::StoreFactory tcp_store_factory(const TcpStoreOptions& client, std::string what) {
  return [client, what](const std::atomic<bool>* abandon) -> std::unique_ptr<Store> {
    check_reachable(client.host, client.port, what);
    TcpStoreOptions o = client;
    o.abandon = abandon;
    return std::make_unique<TcpStore>(o);
  };
}

ElasticJob::Setup make_setup(const ElasticJobSettings& s,
                             const std::shared_ptr<spdlog::logger>& log) {
  ElasticJob::Setup setup;
  const bool etcd = s.store == ElasticStore::kEtcd;
  if (s.endpoint.empty()) {
    throw UsageError(std::string("--rdzv-backend ") + (etcd ? "etcd" : "c10d") +
                     " needs --rdzv-endpoint host:port (a cohortd, or the address of one of the "
                     "nodes)");
  }
  HostPort ep = parse_host_port(s.endpoint, etcd ? 2379 : 29400);
  if (ep.port == 0 && (etcd || s.max_nodes > 1)) {
    throw UsageError("--rdzv-endpoint " + s.endpoint +
                     ": port 0 (a free port) works only for a one-node job, which hosts its own "
                     "store; the other nodes could not learn the port. Give a port number");
  }
  if (s.max_nodes > 1 && is_loopback_host(ep.host) &&
      !(!s.local_addr.empty() && is_loopback_host(s.local_addr))) {
    throw UsageError(
        "--rdzv-endpoint " + s.endpoint + " is a loopback address, but --nnodes " +
        std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes) +
        " lets other nodes join: nodes on other machines would each meet only themselves there "
        "(separate one-node jobs). Give the address the other machines reach the store by; if "
        "every node runs on this machine, say so with --local-addr 127.0.0.1");
  }
  if (!s.store_override) {
    // Host the store when the endpoint is ours and nobody serves it yet (a standalone cohortd, or
    // another agent on this machine, already holds the port). etcd is never ours to host.
    bool host = etcd ? false : s.conf.is_host.value_or(is_local_host(ep.host));
    if (host && ep.port != 0) {
      // A store of its own process, which every job meeting here shares (endpoint_store.h).
      try {
        setup.endpoint_store = EndpointStore::start(listen_address_for(ep.host), ep.port,
                                                    s.security, kEndpointStoreLinger);
        if (!setup.endpoint_store) {
          log->info("{} is served already; joining it as a client", ep.to_string());
        } else {
          log->info(
              "the rendezvous store on {} is cohortd pid {}, shared by every job meeting there; "
              "it exits {} after its last client leaves (log: {})",
              setup.endpoint_store->address(), setup.endpoint_store->pid(),
              in_seconds(kEndpointStoreLinger), setup.endpoint_store->log_path());
        }
        host = false;
      } catch (const IoError& e) {
        log->warn(
            "{}; hosting the rendezvous store inside this agent instead: another job "
            "meeting at {} would lose it when this one ends",
            e.what(), ep.to_string());
      }
    }
    if (host) {
      try {
        setup.hosted = host_store(listen_address_for(ep.host), ep.port, s.security);
        log->info("hosting the rendezvous store on {}", setup.hosted->address());
        if (ep.port == 0) ep.port = setup.hosted->port();
      } catch (const std::exception& e) {
        if (ep.port == 0) throw;
        log->info("not hosting the rendezvous store ({}); joining it as a client", e.what());
      }
    }
  }
  // The address others reach us by: --local-addr, else the one the route to the endpoint uses.
  setup.advertised = !s.advertised_override.empty() ? s.advertised_override : s.local_addr;
  if (setup.advertised.empty()) setup.advertised = local_address_towards(ep.host, ep.port);
  if (s.max_nodes > 1 && is_loopback_host(setup.advertised) && !is_loopback_host(ep.host)) {
    throw UsageError("this node would advertise " + setup.advertised +
                     " to the other nodes of a multi-node job, which they cannot reach; pass "
                     "--local-addr with an address on the network of " +
                     ep.to_string());
  }
  setup.node_id = setup.advertised + ":" + std::to_string(::getpid()) + ":" + random_tag(4);
  if (s.store_override) {
    setup.factory = s.store_override;
    return setup;
  }
  TcpStoreOptions client;
  client.host = ep.host;
  client.port = ep.port;
  client.connect_timeout = s.conf.join_timeout;
  // Store calls outside the (explicitly timed) rendezvous waits must fail fast: a node cut off
  // from the store finds out within one keep-alive period and stops its workers.
  client.timeout =
      std::max<std::chrono::milliseconds>(s.conf.liveness_timeout(), std::chrono::seconds(2));
  client.auth_token = s.security.token;
  client.dialect = StoreDialect::kCurrent;
  client.tagged_writes = true;
  // A torchrun agent's store or a plain PyTorch TCPStore server works too, with plain operations.
  auto said = std::make_shared<std::atomic<bool>>(false);  // once per job, not per connection
  client.on_foreign_server = [log, said](const std::string& why) {
    if (!said->exchange(true)) log->warn("{}", why);
  };
  if (etcd) {
#ifndef COHORT_HAVE_ETCD
    throw UsageError(
        "--rdzv-backend etcd: this cohortrun was built without libcurl, so without the etcd "
        "backend; use --rdzv-backend c10d (a cohortd), or rebuild with libcurl");
#else
    setup.factory = [client](const std::atomic<bool>* abandon) -> std::unique_ptr<Store> {
      EtcdStoreOptions o;
      o.host = client.host;
      o.port = client.port;
      o.prefix = "/";
      o.timeout = client.timeout;
      o.connect_timeout = client.connect_timeout;
      o.abandon = abandon;
      return std::make_unique<EtcdStore>(o);
    };
#endif
  } else {
    setup.factory = tcp_store_factory(client, "--rdzv-endpoint");
  }
  setup.client = client;
  return setup;
}

DynamicSettings dynamic_settings(const ElasticJobSettings& s) {
  DynamicSettings d;
  d.min_nodes = s.min_nodes;
  d.max_nodes = s.max_nodes;
  d.join_timeout = s.conf.join_timeout;
  d.last_call_timeout = s.conf.last_call_timeout;
  d.node_info_timeout = s.conf.node_info_timeout;
  return d;
}

}  // namespace

ElasticJob::ElasticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
                       ElasticJobSettings settings, std::shared_ptr<spdlog::logger> log)
    : ElasticJob(io, clock, std::move(run_id), settings, log, make_setup(settings, log)) {}

ElasticJob::ElasticJob(asio::io_context& io, LoopClock& clock, std::string run_id,
                       ElasticJobSettings settings, std::shared_ptr<spdlog::logger> log,
                       Setup setup)
    : JobRendezvous(io, clock, std::move(run_id), std::move(setup.factory), std::move(log)),
      settings_(std::move(settings)),
      endpoint_store_(std::move(setup.endpoint_store)),
      hosted_(std::move(setup.hosted)),
      client_(std::move(setup.client)),
      advertised_(std::move(setup.advertised)),
      node_id_(std::move(setup.node_id)),
      protocol_(dynamic_settings(settings_), clock.clock()),
      round_stores_(settings_.store_override
                        ? nullptr
                        : std::make_unique<RoundStores>(
                              advertised_.find(':') != std::string::npos ? "::" : "0.0.0.0",
                              settings_.security)),
      keep_alive_timer_(clock.make_timer()),
      liveness_(std::make_shared<LivenessMonitor>(node_id_, settings_.conf.liveness_timeout(),
                                                  settings_.conf.keep_alive_interval,
                                                  clock.clock())) {}

ElasticJob::~ElasticJob() {
  keep_alive_timer_->cancel();
  stop_bridge();  // its threads may run protocol_.join() or use liveness_ and round_stores_
}

HostPort ElasticJob::worker_store(const RankAssignment& a) const {
  const NodeInfo& n0 = a.nodes.at(0);
  return HostPort{n0.addr, n0.store_port};
}

void ElasticJob::join(int after_round, NodeInfo self,
                      std::function<void(std::exception_ptr, RankAssignment)> done) {
  self.id = node_id_;
  self.addr = advertised_;
  self.endpoint_store = endpoint_store_ != nullptr;
  join_through(&protocol_, round_stores_.get(), after_round, std::move(self), std::move(done));
}

void ElasticJob::start_keep_alive(const RankAssignment& a,
                                  std::function<void(std::string)> on_store_lost) {
  alive_round_ = a;
  keep_alive_on_ = true;
  lost_reported_ = false;
  beat_in_flight_ = false;
  store_unreachable_ = false;
  last_beat_ok_ = clock_.now();
  on_store_lost_ = std::move(on_store_lost);
  auto liveness = liveness_;
  bridge().run([liveness](Store&) { liveness->reset(); }, [](std::exception_ptr) {});
  keep_alive_tick();
}

void ElasticJob::stop_keep_alive() {
  keep_alive_on_ = false;
  keep_alive_timer_->cancel();
}

void ElasticJob::keep_alive_tick() {
  if (!keep_alive_on_) return;
  keep_alive_timer_->start(settings_.conf.keep_alive_interval, [this] { keep_alive_tick(); });
  // Cut off from the store (a failing or hanging call): the workers keep running for the grace
  // (a cohortd being restarted comes back), then stop as the other nodes will have dropped this
  // one. Judged here, on the loop, so that a store call stuck in a reconnect cannot delay it.
  const auto silent = clock_.now() - last_beat_ok_;
  // A store that an agent of this round started dies with that agent's machine: once it has been
  // silent as long as a lost node is, the next round meets on a survivor instead.
  if (silent > settings_.conf.liveness_timeout() && store_successor()) {
    move_store(std::chrono::duration_cast<std::chrono::milliseconds>(silent));
    return;
  }
  const auto grace = std::max(settings_.conf.liveness_timeout(), settings_.store_loss_grace);
  if (silent > grace && on_store_lost_) {
    stop_keep_alive();
    on_store_lost_("this node has not reached the rendezvous store for " +
                   in_seconds(std::chrono::duration_cast<std::chrono::milliseconds>(silent)) +
                   " (--store-loss-grace " + in_seconds(settings_.store_loss_grace) +
                   "); the other nodes will have dropped it");
    return;
  }
  if (silent > 2 * settings_.conf.keep_alive_interval && !store_unreachable_) {
    store_unreachable_ = true;
    log_->warn(
        "the rendezvous store has not answered for {}; the workers keep running while it "
        "is retried, for up to {} (--store-loss-grace)",
        in_seconds(std::chrono::duration_cast<std::chrono::milliseconds>(silent)),
        in_seconds(grace));
  }
  if (beat_in_flight_) return;
  beat_in_flight_ = true;
  std::vector<std::string> peers;
  for (const auto& n : alive_round_.nodes) peers.push_back(n.id);
  auto liveness = liveness_;
  const int round = alive_round_.round;
  bridge().call<std::vector<std::string>>(
      [liveness, peers](Store& s) { return liveness->tick(s, peers); },
      [this, round](std::exception_ptr err, std::vector<std::string> lost) {
        beat_in_flight_ = false;
        if (!keep_alive_on_ || round != alive_round_.round || err) return;
        if (store_unreachable_) {
          store_unreachable_ = false;
          log_->warn("the rendezvous store answers again, after {}",
                     in_seconds(std::chrono::duration_cast<std::chrono::milliseconds>(
                         clock_.now() - last_beat_ok_)));
        }
        last_beat_ok_ = clock_.now();
        if (lost.empty() || lost_reported_) return;
        lost_reported_ = true;
        report_lost(lost.front(), round);
      });
}

const NodeInfo* ElasticJob::store_successor() const {
  if (settings_.store != ElasticStore::kCohort || settings_.store_override) return nullptr;
  const NodeInfo* starter = nullptr;
  for (const auto& n : alive_round_.nodes)
    if (n.endpoint_store) starter = &n;
  if (starter == nullptr) return nullptr;  // a standalone cohortd, or another job's agent's
  // The node of lowest rank that did not start it (nodes are in node-rank order).
  for (const auto& n : alive_round_.nodes)
    if (&n != starter) return &n;
  return nullptr;
}

void ElasticJob::move_store(std::chrono::milliseconds silent) {
  stop_keep_alive();
  const NodeInfo* starter = nullptr;
  for (const auto& n : alive_round_.nodes)
    if (n.endpoint_store) starter = &n;
  const NodeInfo& successor = *store_successor();
  const int round = alive_round_.round;
  TcpStoreOptions next = client_;
  next.host = successor.addr;
  const std::string where = format_host_port(next.host, next.port);
  log_->warn(
      "the rendezvous store at {} has not answered for {}: it was started by node {} ({}), "
      "whose machine is taken to be lost; the job moves it to node {} at {} and ends round {}",
      format_host_port(client_.host, client_.port), in_seconds(silent), starter->node_rank,
      starter->host, successor.node_rank, where, round);
  if (successor.id == node_id_) {
    try {
      endpoint_store_ = EndpointStore::start(listen_address_for(next.host), next.port,
                                             settings_.security, kEndpointStoreLinger);
      if (endpoint_store_) {
        log_->info("the rendezvous store is now cohortd pid {} on {} (log: {})",
                   endpoint_store_->pid(), endpoint_store_->address(), endpoint_store_->log_path());
      }
    } catch (const std::exception& e) {
      if (on_store_lost_)
        on_store_lost_(std::string("cannot move the rendezvous store here: ") + e.what());
      return;
    }
  }
  client_ = next;
  JobRendezvous::move_store(tcp_store_factory(client_, "the moved rendezvous store"));
  // The round this node ran ends on the new store as failed, which the outcome watch (moved with
  // the store) delivers: the agent stops its workers and joins the next round there. Every
  // survivor publishes the same; the first one counts.
  Outcome o;
  o.kind = Outcome::kFailed;
  o.node_rank = alive_round_.node_rank;
  o.restarts = alive_round_.restart_count + 1;
  o.detail = "the rendezvous store was lost with node " + std::to_string(starter->node_rank) +
             " (" + starter->host + "); node " + std::to_string(successor.node_rank) +
             " serves it now";
  bridge().run([round, o](Store& s) { round_ops::publish_outcome(s, round, o); },
               [this](std::exception_ptr err) {
                 if (err && on_store_lost_)
                   on_store_lost_("the moved rendezvous store: " + describe(err));
               });
}

void ElasticJob::report_lost(const std::string& node_id, int round) {
  // The lost node's failure, as the failure summary shows it: its node, its first rank.
  FailureSite site;
  int base = 0;
  for (const auto& n : alive_round_.nodes) {
    if (n.id == node_id) {
      site.node_rank = n.node_rank;
      site.host = n.host;
      site.pid = n.pid;
      site.global_rank = base;
      break;
    }
    base += n.nproc;
  }
  WorkerFailure f = make_failure(site, -1,
                                 "node " + node_id + " lost: no keep-alive for " +
                                     in_seconds(settings_.conf.liveness_timeout()));
  log_->warn("{}; ending round {}", f.reason, round);
  const int restart_count = alive_round_.restart_count;
  const int decider = alive_round_.node_rank;
  bridge().run(
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
}

}  // namespace cohort::launch

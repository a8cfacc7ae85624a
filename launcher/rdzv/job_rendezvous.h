// JobRendezvous: everything a node agent does through the store, behind one interface with two
// implementations: StaticJob (static_job.h: a fixed set of node ranks, node 0 hosts the store on
// the master port, as torchrun's static rendezvous) and ElasticJob (elastic_job.h: MIN:MAX nodes
// through a c10d endpoint or etcd, rounds that re-form as nodes come and go, keep-alives).
//
// The base class does the bookkeeping both share, through a StoreBridge (store calls off the
// loop): publishing and watching each round's outcome, failure reports, the exit barrier.
//
// Thread safety: the loop's thread only; callbacks run on the loop.
#pragma once

#include <sys/types.h>

#include <asio/io_context.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/net.h"
#include "failure/failure.h"
#include "loop/loop_clock.h"
#include "rdzv/lobby.h"
#include "rdzv/rendezvous_protocol.h"
#include "rdzv/round_relays.h"
#include "rdzv/round_stores.h"
#include "rdzv/round_types.h"
#include "rdzv/store_bridge.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class JobRendezvous {
 public:
  using Done = std::function<void(std::exception_ptr)>;

  // `io`, `clock` must outlive it. Every key is scoped to the run ("cohort/<run_id>/").
  JobRendezvous(asio::io_context& io, LoopClock& clock, std::string run_id,
                StoreBridge::StoreFactory factory, std::shared_ptr<spdlog::logger> log);
  virtual ~JobRendezvous();
  JobRendezvous(const JobRendezvous&) = delete;
  JobRendezvous& operator=(const JobRendezvous&) = delete;

  // Where a round's workers find their store: MASTER_ADDR and MASTER_PORT.
  virtual HostPort worker_store(const RankAssignment& a) const = 0;
  // Joins the first complete round after `after_round`; done(error, assignment).
  virtual void join(int after_round, NodeInfo self,
                    std::function<void(std::exception_ptr, RankAssignment)> done) = 0;
  // Elastic: beats every keep-alive interval and checks the round's other nodes; a lost node
  // ends `a.round` as failed (restarts + 1). When this node itself cannot reach the store for a
  // whole keep-alive period, `on_store_lost` runs (it is cut off: its workers must stop).
  virtual void start_keep_alive(const RankAssignment& a,
                                std::function<void(std::string)> on_store_lost) {
    (void)a;
    (void)on_store_lost;
  }
  virtual void stop_keep_alive() {}
  // True when this agent hosts the store the other nodes use: it keeps it up (exit barrier)
  // until they have read the outcome.
  virtual bool hosts_store() const = 0;
  // A store process this agent started and must not treat as a stray child (-1: none).
  virtual pid_t store_process() const { return -1; }

  // The outcome of `round`, once decided (replaces the previous watch).
  void watch_outcome(int round, std::function<void(Outcome)> on_outcome,
                     std::function<void(std::string)> on_error);
  void publish_failure(int round, int node_rank, int restart_count,
                       std::vector<WorkerFailure> failures, Done done);
  void publish_success(int round, int node_rank, int nnodes, Done done);
  void publish_abort(int round, int node_rank, std::string detail, Done done);
  void collect_failures(int round, int nnodes,
                        std::function<void(std::exception_ptr, std::vector<WorkerFailure>)> done);
  // Publishes this node's status record (node_status.h); node rank 0 also gets every node's
  // records that exist (its own included), for the straggler check.
  void publish_status(int node_rank, int nnodes, std::string record,
                      std::function<void(std::exception_ptr, std::vector<std::string>)> done);
  // Says in the store's lobby that this node still waits in this run, and hands back one node
  // of each other run waiting at the same store (rdzv/lobby.h). Best effort: a store that cannot
  // append gives an error, and nothing is lost but the hint.
  void announce_waiting(lobby::Waiting self,
                        std::function<void(std::exception_ptr, std::vector<lobby::Waiting>)> done);

  // Hang probes (round_ops.h: start_hang_probe and the rest), on the status records' thread and
  // connection: neither waits behind an elastic agent's membership watch.
  void start_hang_probe(int round, std::function<void(std::exception_ptr, int64_t)> done);
  void latest_hang_probe(int round, std::function<void(std::exception_ptr, int64_t)> done);
  void publish_hang_answers(int round, int64_t probe, int node_rank, std::string record, Done done);
  void hang_answers(
      int round, int64_t probe, int nnodes,
      std::function<void(std::exception_ptr, std::vector<std::optional<std::string>>)> done);
  // Counts this node out; when it hosts the store, waits up to `timeout` for the others.
  void exit_barrier(int round, int nnodes, std::chrono::milliseconds timeout, Done done);
  // Records that this node's workers of `round` started at `started_at` (wall clock, seconds since
  // the epoch): with the previous round's outcome, how long the job took to heal.
  void publish_running(int round, int node_rank, double started_at, Done done);

  // Opens this node's relay to round `a.round`'s workers' store (rdzv/round_relays.h), off the
  // loop, and closes this node's relays of earlier rounds (their workers have stopped: a node
  // joins a round only after its workers of the last one ended). done(relay, why_not): where
  // the round's workers dial, or, when the relay cannot work with that store, nothing and why.
  void open_relay(const RankAssignment& a,
                  std::function<void(std::optional<HostPort> relay, std::string why_not)> done);
  // Where round `round`'s workers dial when this node relays for it.
  std::optional<HostPort> relay_of(int round) const { return relays_.relay_of(round); }

 protected:
  StoreBridge& bridge() { return *bridge_; }
  // The rendezvous store moved (its host was lost and another node serves it now): every later
  // call goes to the store `factory` makes. Calls still blocked on the old one are given up, and
  // their errors are not reported (the round they belonged to is over); the outcome watch moves
  // with the store.
  void move_store(StoreBridge::StoreFactory factory);
  // Interrupts and joins the bridge's threads. Derived classes whose members the store thread
  // touches call it first in their destructors.
  void stop_bridge() { bridge_.reset(); }
  // join() for both rendezvous: `protocol->join` on the store thread. When this node is node rank
  // 0 of the round, it opens the round's workers' store in `round_stores` (null: this agent hosts
  // none) on a port claimed job-wide and publishes the port in its NodeInfo; once the round has
  // formed, the workers' stores of earlier rounds are closed (rdzv/round_stores.h). `protocol` and
  // `round_stores` must outlive the bridge.
  void join_through(RendezvousProtocol* protocol, RoundStores* round_stores, int after_round,
                    NodeInfo self, std::function<void(std::exception_ptr, RankAssignment)> done);
  asio::io_context& io_;
  LoopClock& clock_;
  std::string run_id_;
  std::shared_ptr<spdlog::logger> log_;

 private:
  // Wraps `done` so that an error from a store that has since been replaced is not reported.
  Done unless_moved(Done done);

  // Declared before the bridge: the bridge's threads, which open relays, are joined first.
  RoundRelays relays_;
  std::unique_ptr<StoreBridge> bridge_;
  int store_generation_ = 0;  // move_store() calls so far
  // The outcome watch, to re-arm on a new store.
  int watched_round_ = -1;
  std::function<void(Outcome)> on_outcome_;
  std::function<void(std::string)> on_watch_error_;
};

}  // namespace cohort::launch

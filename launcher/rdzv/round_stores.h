// RoundStores: the store each round's workers are given as MASTER_ADDR:MASTER_PORT. Every round
// has its own, hosted by the agent that is node rank 0 of that round, in every mode (--standalone,
// static, c10d-elastic with an agent's or a standalone cohortd, etcd, Slurm); the agents' own
// rendezvous store is never the workers'.
//
// Why: PyTorch's workers leave keys in the store they are given under names that are the same in
// every attempt: gloo's full-mesh addresses ("default_pg/0//cpu//0/<rank>"), NCCL's unique ids, the
// init/ and barrier counters. PyTorch 2.x adds no per-attempt prefix when the agent serves the
// store (torch/distributed/rendezvous.py, _create_c10d_store; 1.13 added /worker/attempt_<n>), so
// in a store shared by two rounds a restarted rank can read a peer's address of the previous round
// before the peer has written its new one, and connect to a dead process ("Gloo connectFullMesh
// failed ... Connection refused") or hang. torchrun 2.x shares its store across rounds the same way
// (PyTorch issues #135712, #135957).
//
// What makes another round's keys unreachable, not merely unlikely:
//   1. A round's store starts empty: no key of another round is in it to be read.
//   2. It listens on a port that no earlier round of the job listened on, on any node: open() takes
//      only a port that `claim` accepts, and the caller's claim records it job-wide in the
//      rendezvous store (round_ops::claim_worker_port). A worker of an old round that is still
//      alive (a slow SIGTERM, one stuck in the kernel past SIGKILL, an orphan of an agent that was
//      killed) knows only its own round's address, and every connection it makes there (a client
//      that reconnects, PyTorch 1.13's second "callback" connection) reaches that round's store or
//      nothing; never a later round's, whatever port the kernel hands out later.
//   3. The agent closes round r's store (every connection cut, the port released) once round r+1
//      has formed, that is once every node of round r+1 has stopped its workers of round r.
// A relay that forwards a node's worker connections to the round's store keeps this by doing the
// same per round: a listener of its own for each round, on a port claimed the same way, that
// forwards to that round's store only and is closed with it.
//
// Thread safety: thread-safe (the store bridge's thread opens stores, the loop closes them).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "rdzv/store_host.h"

namespace cohort::launch {

class RoundStores {
 public:
  // Stores listen on `listen_host` ("0.0.0.0", "::", or a loopback address for a one-node job),
  // with the job's token and unauthenticated networks.
  RoundStores(std::string listen_host, StoreSecurity security);
  ~RoundStores();
  RoundStores(const RoundStores&) = delete;
  RoundStores& operator=(const RoundStores&) = delete;

  // True when port `port` may serve a new round (recording that it does); false when an earlier
  // round used it.
  using Claim = std::function<bool(int port)>;

  // Opens round `round`'s store (empty) on a free port that no earlier store of this object took
  // and that `claim` accepts, and returns the port.
  // A port `claim` refuses stays bound until one is accepted, so that the kernel never hands it out
  // again meanwhile. Opening a round that is open returns its port. Throws cohort::IoError when no
  // port can be bound, or none is accepted in many tries; whatever `claim` throws passes through.
  int open(int round, const Claim& claim);

  // Closes the store of every round before `round`: connections cut, ports released.
  void close_before(int round);

  // The rounds whose stores are open, oldest first (tests, logs).
  std::vector<int> open_rounds() const;

 private:
  const std::string listen_host_;
  const StoreSecurity security_;
  mutable std::mutex mu_;
  std::map<int, std::unique_ptr<rdzv::StoreServerThread>> stores_;  // guarded by mu_
  std::set<int> used_ports_;  // every port a round's store of this node took; guarded by mu_
};

}  // namespace cohort::launch

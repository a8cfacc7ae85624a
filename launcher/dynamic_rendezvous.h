// The elastic rendezvous: membership decided in the store, MIN:MAX nodes, rounds that end and
// begin as nodes fail, vanish or arrive. Works over any cohort::Store (cohortd, etcd).
//
// Keys (under the run's prefix):
//   rdzv/current                 the current round number
//   rdzv/round/<r>/state         {"version", "status": joining|complete, "participants": [ids]}
//   rdzv/round/<r>/changed/<v>   set after every change of the state to version v (waiters
//                                wait for the next version: WAIT is the store's only wake-up)
//   rdzv/hb/<node id>            a counter each running node increments every keep-alive interval
//   round/<r>/outcome            how round r ended (round_ops.h); a decided outcome ends the round
//
// Joining (DynamicProtocol::join): a node adds itself to the current round while it is joining.
// The round completes as soon as MAX nodes are in, or once MIN are in and the last-call time has
// passed since this node first saw MIN (each node times this on its own clock, so clocks need not
// agree). Node ranks are the positions of the node ids in sorted order. A node arriving while a
// round runs with fewer than MAX nodes ends it as "rescale" (the others restart into the next round
// without spending a restart); if the round is full it waits for the round to end.
//
// Liveness (LivenessMonitor): every running node bumps its counter each interval and watches the
// others'; a counter that has not moved for interval x max_attempts (measured on the observer's
// clock) marks its node lost, and the observer ends the round as failed. On a store with expiring
// keys (etcd) each node instead refreshes a key under a lease of that length (rdzv/alive/<id>);
// a vanished key marks its node lost.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "static_rendezvous.h"

namespace cohort::launch {

struct DynamicConfig {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds close_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds keep_alive_interval{std::chrono::seconds(5)};
  int keep_alive_max_attempt = 3;
  std::chrono::milliseconds node_info_timeout{std::chrono::seconds(60)};
};

// Parses --rdzv-conf "k=v,k=v" over `config` (timeouts in seconds, fractions allowed). Unknown
// keys torchrun has are accepted and ignored (read_timeout, store_type, is_host, timeout);
// returns "" or the message for the user.
std::string parse_rdzv_conf(const std::string& text, DynamicConfig* config);

class DynamicProtocol final : public RendezvousProtocol {
 public:
  explicit DynamicProtocol(DynamicConfig config) : config_(config) {}
  RankAssignment join(Store& store, int after_round, NodeInfo self,
                      const std::function<void(int, NodeInfo*)>& on_rank_known) override;

 private:
  DynamicConfig config_;
};

// Tracks the other nodes' keep-alive counters as seen from this node. Not thread-safe: one
// instance per agent, used from the store thread.
class LivenessMonitor {
 public:
  LivenessMonitor(std::string self_id, std::chrono::milliseconds timeout)
      : self_(std::move(self_id)), timeout_(timeout) {}
  // Bumps this node's counter and reads the peers'; returns the ids of peers whose counter has
  // not moved for the timeout. Peers seen for the first time start their clock now.
  std::vector<std::string> tick(Store& store, const std::vector<std::string>& peers);
  // Forgets the observations (a new round).
  void reset() { seen_.clear(); }

 private:
  struct Seen {
    int64_t value;                                // the peer's counter, last seen
    std::chrono::steady_clock::time_point since;  // when it last moved
    bool lease_seen = false;                      // its leased key existed once (etcd)
  };
  std::string self_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, Seen> seen_;
};

// The keep-alive keys of a node: a counter, and (stores with expiring keys) a leased key.
std::string keep_alive_key(const std::string& node_id);
std::string alive_key(const std::string& node_id);

}  // namespace cohort::launch

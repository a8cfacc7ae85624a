// The elastic rendezvous: membership decided in the store, MIN:MAX nodes, rounds that end and
// begin as nodes fail, vanish or arrive. Works over any cohort::Store (cohortd, etcd).
//
// Keys (under the run's prefix):
//   rdzv/current                 the current round number
//   rdzv/round/<r>/state         {"version", "status": joining|complete, "participants": [ids]}
//   rdzv/round/<r>/changed/<v>   set after every change of the state to version v (waiters
//                                wait for the next version: WAIT is the store's only wake-up)
//   round/<r>/outcome            how round r ended (round_ops.h); a decided outcome ends the round
//
// Joining: a node adds itself to the current round while it is joining. The round completes as
// soon as MAX nodes are in, or once MIN are in and the last-call time has passed since this node
// first saw MIN (each node times this on its own clock, so clocks need not agree). Node ranks are
// the positions of the node ids in sorted order. A node arriving while a round runs with fewer
// than MAX nodes ends it as "rescale" (the others restart into the next round without spending a
// restart); if the round is full it waits for the round to end.
//
// Time comes from the Clock given at construction (tests use a ManualClock over a MemoryStore on
// the same clock).
#pragma once

#include <chrono>

#include "cohort/base/clock.h"
#include "rdzv/rendezvous_protocol.h"

namespace cohort::launch {

struct DynamicSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds node_info_timeout{std::chrono::seconds(60)};
};

class DynamicProtocol final : public RendezvousProtocol {
 public:
  // `clock` must outlive the protocol.
  explicit DynamicProtocol(DynamicSettings settings, Clock& clock = Clock::steady())
      : settings_(settings), clock_(clock) {}
  RankAssignment join(Store& store, int after_round, NodeInfo self,
                      const RankKnown& on_rank_known) override;

 private:
  DynamicSettings settings_;
  Clock& clock_;
};

}  // namespace cohort::launch

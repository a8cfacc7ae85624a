// How node agents meet for a round, over any cohort::Store: StaticProtocol for a fixed set of
// node ranks (torchrun's static rendezvous), DynamicProtocol (dynamic_protocol.h) for MIN:MAX
// nodes whose membership is decided in the store.
#pragma once

#include <chrono>
#include <functional>

#include "cohort/rdzv/store.h"
#include "rdzv/round_types.h"

namespace cohort::launch {

class RendezvousProtocol {
 public:
  using RankKnown = std::function<void(int round, int node_rank, NodeInfo* self)>;
  virtual ~RendezvousProtocol() = default;
  // Blocks until this node takes part in a complete round after `after_round` (-1: the first)
  // and every node of it has published its NodeInfo. `on_rank_known(round, node_rank, &self)` runs
  // once the round and the node rank are fixed and before `self` is published. Throws StoreError /
  // StoreTimeoutError (a TimeoutError) naming what did not arrive.
  virtual RankAssignment join(Store& store, int after_round, NodeInfo self,
                              const RankKnown& on_rank_known) = 0;
};

// Every agent publishes its NodeInfo under round/<r>/node/<node_rank> and reads all of them.
class StaticProtocol final : public RendezvousProtocol {
 public:
  StaticProtocol(int nnodes, std::chrono::milliseconds timeout)
      : nnodes_(nnodes), timeout_(timeout) {}
  RankAssignment join(Store& store, int after_round, NodeInfo self,
                      const RankKnown& on_rank_known) override;

 private:
  int nnodes_;
  std::chrono::milliseconds timeout_;
};

}  // namespace cohort::launch

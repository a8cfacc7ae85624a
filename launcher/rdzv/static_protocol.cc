#include "rdzv/rendezvous_protocol.h"
#include "rdzv/round_ops.h"

namespace cohort::launch {

RankAssignment StaticProtocol::join(Store& store, int after_round, NodeInfo self,
                                    const RankKnown& on_rank_known) {
  const int round = after_round + 1;
  const int restarts = round_ops::restarts_after(store, after_round);
  if (on_rank_known) on_rank_known(round, self.node_rank, &self);
  auto nodes = round_ops::exchange_node_info(store, round, self, nnodes_, timeout_);
  check_same_settings(nodes);
  return assign_ranks(nodes, self.node_rank, round, restarts);
}

}  // namespace cohort::launch

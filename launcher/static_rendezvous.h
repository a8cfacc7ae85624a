// The static rendezvous of cohortrun's node agents, and the keys they keep in the store.
//
// Every agent of a run publishes a NodeInfo under round/<r>/node/<node_rank> and reads all of
// them; global ranks are prefix sums of the nodes' worker counts in node-rank order, so nodes may
// run different numbers of workers. The outcome of a round is one key written once
// (compare_set): the first node to report a failure, or the last to report success, decides it.
// All keys live under "cohort/<run_id>/" (see run_prefix), so co-located jobs never mix.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cohort/rdzv/store.h"

namespace cohort::launch {

struct NodeInfo {
  std::string id;  // unique per agent process ("host:pid:random"); elastic membership key
  int node_rank = 0;
  int nproc = 1;
  std::string host;    // hostname, for reports
  int pid = 0;         // the agent's pid, for reports
  std::string addr;    // address the node advertises (elastic: where its workers' store listens)
  int store_port = 0;  // elastic, node rank 0: the port of this round's workers' store
};

std::string to_json(const NodeInfo& n);
// Throws std::runtime_error naming what is malformed.
NodeInfo node_info_from_json(const std::string& text);

struct RankAssignment {
  int round = 0;          // the rendezvous round: namespaces the round's keys
  int restart_count = 0;  // the job's restarts so far (TORCHELASTIC_RESTART_COUNT)
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;
  int world_size = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  std::vector<NodeInfo> nodes;
};

// How nodes meet for a round. StaticProtocol: a fixed set of node ranks. DynamicProtocol
// (dynamic_rendezvous.h): membership decided in the store, MIN:MAX nodes.
class RendezvousProtocol {
 public:
  virtual ~RendezvousProtocol() = default;
  // Blocks until this node takes part in a complete round after `after_round` (-1: the first)
  // and every node of it has published its NodeInfo. `on_rank_known(node_rank, &self)` runs once
  // the node rank is fixed and before `self` is published. Throws StoreError/StoreTimeoutError.
  virtual RankAssignment join(Store& store, int after_round, NodeInfo self,
                              const std::function<void(int, NodeInfo*)>& on_rank_known) = 0;
};

class StaticProtocol final : public RendezvousProtocol {
 public:
  StaticProtocol(int nnodes, std::chrono::milliseconds timeout)
      : nnodes_(nnodes), timeout_(timeout) {}
  RankAssignment join(Store& store, int after_round, NodeInfo self,
                      const std::function<void(int, NodeInfo*)>& on_rank_known) override;

 private:
  int nnodes_;
  std::chrono::milliseconds timeout_;
};

// REQUIRES: nodes are indexed by node rank (nodes[i].node_rank == i).
RankAssignment assign_ranks(const std::vector<NodeInfo>& nodes, int node_rank, int round,
                            int restart_count);

// Store keys, relative to the run prefix.
namespace keys {
std::string run_prefix(const std::string& run_id);  // "cohort/<run_id>"
std::string node(int round, int node_rank);
std::string done_count(int round);
std::string outcome(int round);
std::string failures(int round, int node_rank);
std::string exit_count(int round);
}  // namespace keys

}  // namespace cohort::launch

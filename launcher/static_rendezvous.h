// The static rendezvous of cohortrun's node agents, and the keys they keep in the store.
//
// Every agent of a run publishes a NodeInfo under attempt/<a>/node/<node_rank> and reads all of
// them; global ranks are prefix sums of the nodes' worker counts in node-rank order, so nodes may
// run different numbers of workers. The outcome of an attempt is one key written once
// (compare_set): the first node to report a failure, or the last to report success, decides it.
// All keys live under "cohort/<run_id>/" (see run_prefix), so co-located jobs never mix.
#pragma once

#include <string>
#include <vector>

namespace cohort::launch {

struct NodeInfo {
  int node_rank = 0;
  int nproc = 1;
  std::string host;  // hostname, for reports
  int pid = 0;       // the agent's pid, for reports
};

std::string to_json(const NodeInfo& n);
// Throws std::runtime_error naming what is malformed.
NodeInfo node_info_from_json(const std::string& text);

struct RankAssignment {
  int attempt = 0;
  int node_rank = 0;
  int nnodes = 1;
  int local_world_size = 1;
  int world_size = 1;
  int base_rank = 0;  // global rank of this node's local rank 0
  std::vector<NodeInfo> nodes;
};

// REQUIRES: nodes are indexed by node rank (nodes[i].node_rank == i).
RankAssignment assign_ranks(const std::vector<NodeInfo>& nodes, int node_rank, int attempt);

// Store keys, relative to the run prefix.
namespace keys {
std::string run_prefix(const std::string& run_id);  // "cohort/<run_id>"
std::string node(int attempt, int node_rank);
std::string done_count(int attempt);
std::string outcome(int attempt);
std::string failures(int attempt, int node_rank);
std::string exit_count(int attempt);
}  // namespace keys

}  // namespace cohort::launch

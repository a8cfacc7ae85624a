// The records of a rendezvous round: who takes part (NodeInfo, published by every node) and what
// each node learns from it (RankAssignment). Shared by the static and the elastic rendezvous and
// by the agent.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cohort::launch {

struct NodeInfo {
  std::string id;  // unique per agent process ("host:pid:random"); elastic membership key
  int node_rank = 0;
  int nproc = 1;
  std::string host;    // hostname, for reports
  int pid = 0;         // the agent's pid, for reports
  std::string addr;    // address the node advertises (elastic: where its workers' store listens)
  int store_port = 0;  // node rank 0: the port of this round's workers' store (round_stores.h)
  // elastic: this agent started the c10d endpoint's store (a cohortd that dies with its host)
  bool endpoint_store = false;
  // Job-wide settings ("--max-restarts" -> "3"): every node of a job must agree on them.
  std::map<std::string, std::string> settings;
};

std::string to_json(const NodeInfo& n);
// Throws ProtocolError naming what is malformed.
// What a node record may say (a record written by any client of the store is read back):
// at most kMaxNodeWorkers workers, node ranks below kMaxNodes.
inline constexpr int kMaxNodeWorkers = 1 << 16;
inline constexpr int kMaxNodes = 1 << 16;
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

// Throws UsageError naming the first job-wide setting the nodes disagree on and both values.
void check_same_settings(const std::vector<NodeInfo>& nodes);

// Global ranks are prefix sums of the nodes' worker counts in node-rank order, so nodes may run
// different numbers of workers. REQUIRES: nodes[i].node_rank == i.
RankAssignment assign_ranks(const std::vector<NodeInfo>& nodes, int node_rank, int round,
                            int restart_count);

}  // namespace cohort::launch

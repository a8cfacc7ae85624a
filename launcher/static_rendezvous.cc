#include "static_rendezvous.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "json_text.h"
#include "round_ops.h"

namespace cohort::launch {

std::string to_json(const NodeInfo& n) {
  return json_text(nlohmann::json{{"id", n.id},
                                  {"node_rank", n.node_rank},
                                  {"nproc", n.nproc},
                                  {"host", n.host},
                                  {"pid", n.pid},
                                  {"addr", n.addr},
                                  {"store_port", n.store_port}});
}

NodeInfo node_info_from_json(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    NodeInfo n;
    n.id = j.value("id", "");
    n.node_rank = j.at("node_rank").get<int>();
    n.nproc = j.at("nproc").get<int>();
    n.host = j.value("host", "");
    n.pid = j.value("pid", 0);
    n.addr = j.value("addr", "");
    n.store_port = j.value("store_port", 0);
    if (n.nproc < 1) throw std::runtime_error("nproc < 1");
    return n;
  } catch (const std::exception& e) {
    throw std::runtime_error("malformed node record in the store ('" + text + "'): " + e.what());
  }
}

RankAssignment assign_ranks(const std::vector<NodeInfo>& nodes, int node_rank, int round,
                            int restart_count) {
  RankAssignment a;
  a.round = round;
  a.restart_count = restart_count;
  a.node_rank = node_rank;
  a.nnodes = static_cast<int>(nodes.size());
  a.nodes = nodes;
  a.world_size = 0;
  for (const auto& n : nodes) {
    if (n.node_rank < node_rank) a.base_rank += n.nproc;
    a.world_size += n.nproc;
  }
  a.local_world_size = nodes.at(static_cast<size_t>(node_rank)).nproc;
  return a;
}

RankAssignment StaticProtocol::join(Store& store, int after_round, NodeInfo self,
                                    const std::function<void(int, NodeInfo*)>& on_rank_known) {
  const int round = after_round + 1;
  const int restarts = round_ops::restarts_after(store, after_round);
  if (on_rank_known) on_rank_known(self.node_rank, &self);
  auto nodes = round_ops::exchange_node_info(store, round, self, nnodes_, timeout_);
  return assign_ranks(nodes, self.node_rank, round, restarts);
}

namespace keys {
std::string run_prefix(const std::string& run_id) {
  return "cohort/" + run_id;
}
std::string node(int round, int node_rank) {
  return "round/" + std::to_string(round) + "/node/" + std::to_string(node_rank);
}
std::string done_count(int round) {
  return "round/" + std::to_string(round) + "/done";
}
std::string outcome(int round) {
  return "round/" + std::to_string(round) + "/outcome";
}
std::string failures(int round, int node_rank) {
  return "round/" + std::to_string(round) + "/failures/" + std::to_string(node_rank);
}
std::string exit_count(int round) {
  return "round/" + std::to_string(round) + "/exit";
}
}  // namespace keys

}  // namespace cohort::launch

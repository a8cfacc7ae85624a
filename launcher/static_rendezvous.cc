#include "static_rendezvous.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace cohort::launch {

std::string to_json(const NodeInfo& n) {
  return nlohmann::json{{"node_rank", n.node_rank}, {"nproc", n.nproc}, {"host", n.host},
                        {"pid", n.pid}}
      .dump();
}

NodeInfo node_info_from_json(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    NodeInfo n;
    n.node_rank = j.at("node_rank").get<int>();
    n.nproc = j.at("nproc").get<int>();
    n.host = j.value("host", "");
    n.pid = j.value("pid", 0);
    if (n.nproc < 1) throw std::runtime_error("nproc < 1");
    return n;
  } catch (const std::exception& e) {
    throw std::runtime_error("malformed node record in the store ('" + text + "'): " + e.what());
  }
}

RankAssignment assign_ranks(const std::vector<NodeInfo>& nodes, int node_rank, int attempt) {
  RankAssignment a;
  a.attempt = attempt;
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

namespace keys {
std::string run_prefix(const std::string& run_id) { return "cohort/" + run_id; }
std::string node(int attempt, int node_rank) {
  return "attempt/" + std::to_string(attempt) + "/node/" + std::to_string(node_rank);
}
std::string done_count(int attempt) { return "attempt/" + std::to_string(attempt) + "/done"; }
std::string outcome(int attempt) { return "attempt/" + std::to_string(attempt) + "/outcome"; }
std::string failures(int attempt, int node_rank) {
  return "attempt/" + std::to_string(attempt) + "/failures/" + std::to_string(node_rank);
}
std::string exit_count(int attempt) { return "attempt/" + std::to_string(attempt) + "/exit"; }
}  // namespace keys

}  // namespace cohort::launch

#include "round_types.h"

#include <nlohmann/json.hpp>

#include "cohort/error.h"
#include "json_text.h"

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
    throw ProtocolError("malformed node record in the store ('" + text + "'): " + e.what());
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

}  // namespace cohort::launch

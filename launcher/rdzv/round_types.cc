#include "rdzv/round_types.h"

#include <nlohmann/json.hpp>

#include "cohort/base/json_number.h"
#include "cohort/error.h"
#include "failure/json_text.h"

namespace cohort::launch {

std::string to_json(const NodeInfo& n) {
  return json_text(nlohmann::json{{"id", n.id},
                                  {"node_rank", n.node_rank},
                                  {"nproc", n.nproc},
                                  {"host", n.host},
                                  {"pid", n.pid},
                                  {"addr", n.addr},
                                  {"store_port", n.store_port},
                                  {"endpoint_store", n.endpoint_store},
                                  {"settings", n.settings}});
}

NodeInfo node_info_from_json(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    NodeInfo n;
    n.id = j.value("id", "");
    n.node_rank = json_number::required<int>(j, "node_rank");
    n.nproc = json_number::required<int>(j, "nproc");
    n.host = j.value("host", "");
    n.pid = json_number::field<int>(j, "pid", 0);
    n.addr = j.value("addr", "");
    n.store_port = json_number::field<int>(j, "store_port", 0);
    n.endpoint_store = j.value("endpoint_store", false);
    if (j.contains("settings"))
      n.settings = j.at("settings").get<std::map<std::string, std::string>>();
    // Bounds that no real node reaches, so that sums over a round's nodes cannot overflow.
    if (n.nproc < 1 || n.nproc > kMaxNodeWorkers)
      throw ProtocolError("nproc " + std::to_string(n.nproc) + " outside 1.." +
                          std::to_string(kMaxNodeWorkers));
    if (n.node_rank < 0 || n.node_rank >= kMaxNodes)
      throw ProtocolError("node_rank " + std::to_string(n.node_rank) + " outside 0.." +
                          std::to_string(kMaxNodes - 1));
    return n;
  } catch (const std::exception& e) {
    throw ProtocolError("malformed node record in the store ('" + text.substr(0, 200) +
                        (text.size() > 200 ? "...'" : "'") + "): " + e.what());
  }
}

void check_same_settings(const std::vector<NodeInfo>& nodes) {
  if (nodes.empty()) return;
  const NodeInfo& first = nodes.front();
  auto setting = [](const NodeInfo& n, const std::string& key) {
    auto it = n.settings.find(key);
    return it == n.settings.end() ? std::string("(unset)") : it->second;
  };
  for (const NodeInfo& n : nodes) {
    // Every key either node has: a setting only a later node names differs from "(unset)" too.
    std::vector<std::string> keys;
    for (const auto& kv : first.settings) keys.push_back(kv.first);
    for (const auto& kv : n.settings)
      if (!first.settings.count(kv.first)) keys.push_back(kv.first);
    for (const std::string& key : keys) {
      const std::string value = setting(first, key);
      const std::string theirs = setting(n, key);
      if (theirs == value) continue;
      throw UsageError("the nodes of this job disagree on " + key + ": node " +
                       std::to_string(first.node_rank) + " (" + first.host + ") has " + value +
                       ", node " + std::to_string(n.node_rank) + " (" + n.host + ") has " + theirs +
                       "; start every node with the same value");
    }
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

#include "observe/node_status.h"

#include <nlohmann/json.hpp>
#include <type_traits>

#include "cohort/base/json_number.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

using nlohmann::json;

template <typename T>
void put(json& j, const char* name, const std::optional<T>& v) {
  if (v) j[name] = *v;
}

template <typename T>
std::optional<T> get(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return json_number::field<T>(j, name, T{});  // a whole number of T, or ProtocolError
  } else {
    return it->get<T>();
  }
}

}  // namespace

std::string to_json(const NodeStatus& s) {
  json workers = json::array();
  for (const auto& w : s.workers) {
    json x{{"rank", w.rank}, {"local_rank", w.local_rank}, {"pid", w.pid}, {"state", w.state}};
    put(x, "heartbeat_age_s", w.heartbeat_age_s);
    put(x, "step", w.step);
    put(x, "step_s", w.step_s);
    put(x, "items_per_s", w.items_per_s);
    put(x, "comm_share", w.comm_share);
    put(x, "cpu_s", w.cpu_s);
    put(x, "rss_bytes", w.rss_bytes);
    if (!w.gpu.empty()) x["gpu"] = w.gpu;
    workers.push_back(std::move(x));
  }
  json stragglers = json::array();
  for (const auto& g : s.stragglers)
    stragglers.push_back(
        {{"rank", g.rank}, {"host", g.host}, {"ratio", g.ratio}, {"reason", g.reason}});
  json j{{"node_rank", s.node_rank},
         {"host", s.host},
         {"round", s.round},
         {"state", s.state},
         {"restarts", s.restarts},
         {"max_restarts", s.max_restarts},
         {"nnodes", s.nnodes},
         {"updated", s.updated},
         {"workers", std::move(workers)},
         {"stragglers", std::move(stragglers)}};
  if (s.hang) j["hang"] = json::parse(to_json(*s.hang));
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

NodeStatus node_status_from_json(const std::string& text) {
  try {
    json j = json::parse(text);
    NodeStatus s;
    s.node_rank = json_number::required<int>(j, "node_rank");
    s.host = j.value("host", "");
    s.round = json_number::field<int>(j, "round", 0);
    s.state = j.value("state", "");
    s.restarts = json_number::field<int>(j, "restarts", 0);
    s.max_restarts = json_number::field<int>(j, "max_restarts", 0);
    s.nnodes = json_number::field<int>(j, "nnodes", 1);
    s.updated = j.value("updated", 0.0);
    for (const auto& x : j.value("workers", json::array())) {
      WorkerStatus w;
      w.rank = json_number::required<int>(x, "rank");
      w.local_rank = json_number::field<int>(x, "local_rank", 0);
      w.pid = json_number::field<int>(x, "pid", 0);
      w.state = x.value("state", "");
      w.heartbeat_age_s = get<double>(x, "heartbeat_age_s");
      w.step = get<long long>(x, "step");
      w.step_s = get<double>(x, "step_s");
      w.items_per_s = get<double>(x, "items_per_s");
      w.comm_share = get<double>(x, "comm_share");
      w.cpu_s = get<double>(x, "cpu_s");
      w.rss_bytes = get<long long>(x, "rss_bytes");
      w.gpu = x.value("gpu", "");
      s.workers.push_back(std::move(w));
    }
    for (const auto& x : j.value("stragglers", json::array())) {
      s.stragglers.push_back({json_number::required<int>(x, "rank"), x.value("host", ""),
                              x.value("ratio", 0.0), x.value("reason", "")});
    }
    if (auto it = j.find("hang"); it != j.end() && it->is_object())
      s.hang = hang_status_from_json(it->dump());
    return s;
  } catch (const std::exception& e) {
    throw ProtocolError(std::string("malformed node status record: ") + e.what());
  }
}

}  // namespace cohort::launch

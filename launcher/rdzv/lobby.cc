#include "rdzv/lobby.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

namespace cohort::launch::lobby {
namespace {

using nlohmann::json;

// Bounds on what one line may hold: a hostile writer cannot make a reader keep much.
constexpr size_t kMaxField = 256;

std::optional<Waiting> parse(std::string_view line) {
  try {
    const json j = json::parse(line);
    Waiting w;
    auto text = [&](const char* k) {
      std::string s = j.at(k).get<std::string>();
      if (s.size() > kMaxField) s.resize(kMaxField);
      return s;
    };
    w.run_id = text("run");
    w.node = text("node");
    w.host = text("host");
    w.entry = text("entry");
    w.nnodes = text("nnodes");
    w.since = j.at("since").get<double>();
    w.at = j.at("at").get<double>();
    if (w.run_id.empty() || w.node.empty()) return std::nullopt;
    return w;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string encode(const Waiting& w) {
  return json{{"run", w.run_id},    {"node", w.node},   {"host", w.host}, {"entry", w.entry},
              {"nnodes", w.nnodes}, {"since", w.since}, {"at", w.at}}
             .dump(-1, ' ', false, json::error_handler_t::replace) +
         "\n";
}

std::vector<Waiting> fresh(std::string_view value, double now) {
  std::map<std::string, Waiting> latest;  // by node
  while (!value.empty()) {
    const size_t nl = value.find('\n');
    const std::string_view line = value.substr(0, nl);
    value.remove_prefix(nl == std::string_view::npos ? value.size() : nl + 1);
    auto w = parse(line);
    if (!w || w->at < now - kFresh || w->at > now + kFresh) continue;
    auto [it, added] = latest.emplace(w->node, *w);
    if (!added && w->at > it->second.at) it->second = *w;
  }
  std::vector<Waiting> out;
  for (auto& [node, w] : latest) out.push_back(std::move(w));
  return out;
}

std::vector<Waiting> other_runs(const std::vector<Waiting>& fresh_nodes,
                                const std::string& run_id) {
  std::map<std::string, Waiting> first;  // by run
  for (const auto& w : fresh_nodes) {
    if (w.run_id == run_id) continue;
    auto [it, added] = first.emplace(w.run_id, w);
    if (!added && w.since < it->second.since) it->second = w;
  }
  std::vector<Waiting> out;
  for (auto& [run, w] : first) out.push_back(std::move(w));
  return out;
}

std::optional<std::string> trimmed(std::string_view value, double now) {
  if (value.size() <= kTrimBytes) return std::nullopt;
  std::string out;
  for (const auto& w : fresh(value, now)) out += encode(w);
  return out;
}

}  // namespace cohort::launch::lobby

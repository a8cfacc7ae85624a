#include "cohort/base/hang_probe.h"

#include <charconv>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "cohort/base/json_number.h"
#include "cohort/error.h"

namespace cohort::hang_probe {
namespace {

using nlohmann::json;

[[noreturn]] void malformed(const std::string& what) {
  throw ProtocolError("a worker's answer to a hang probe is malformed: " + what);
}

[[noreturn]] void malformed_field(const char* key, const json& value) {
  malformed(std::string("'") + key + "' is " + value.dump());
}

template <typename T>
T field(const json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const std::optional<T> n = json_number::whole<T>(*it);
    if (!n) malformed_field(key, *it);
    return *n;
  } else if constexpr (std::is_same_v<T, std::vector<int>>) {
    if (!it->is_array()) malformed_field(key, *it);
    T out;
    for (const auto& v : *it) {
      const std::optional<int> n = json_number::whole<int>(v);
      if (!n) malformed_field(key, *it);
      out.push_back(*n);
    }
    return out;
  } else {
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      malformed_field(key, *it);
    }
  }
}

std::string compact(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? std::string() : it->dump();
}

// "gloo:all_reduce" -> "all_reduce": PyTorch's backend prefix, dropped when what follows it is a
// plain name. Anything else stays as it is, so that reading an answer written from a parsed one
// (libcohort's encode_answer) gives the same operation again.
std::string plain_op(std::string op) {
  const size_t colon = op.find(':');
  if (colon == std::string::npos || op.find(':', colon + 1) != std::string::npos) return op;
  return op.substr(colon + 1);
}

StackFrame frame_from(const json& f) {
  if (!f.is_array() || f.size() < 3) malformed("a frame is " + f.dump());
  StackFrame s;
  try {
    s.file = f[0].get<std::string>();
    if (!f[1].is_null()) {
      const std::optional<int> line = json_number::whole<int>(f[1]);
      if (!line) malformed("a frame is " + f.dump());
      s.line = *line;
    }
    s.function = f[2].get<std::string>();
    if (f.size() > 3 && f[3].is_string()) s.source = f[3].get<std::string>();
  } catch (const json::exception&) {
    malformed("a frame is " + f.dump());
  }
  return s;
}

}  // namespace

std::string encode_request(int64_t id) {
  return "P " + std::to_string(id) + "\n";
}

std::optional<int64_t> parse_request(std::string_view line) {
  if (line.size() < 3 || line.substr(0, 2) != "P ") return std::nullopt;
  int64_t id = 0;
  const char* end = line.data() + line.size();
  auto [ptr, ec] = std::from_chars(line.data() + 2, end, id);
  if (ec != std::errc() || ptr != end || id < 0) return std::nullopt;
  return id;
}

ProbeAnswer parse_answer(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    malformed(std::string("not JSON (") + e.what() + ")");
  }
  if (!j.is_object()) malformed("not an object");
  ProbeAnswer a;
  a.id = field<int64_t>(j, "id", 0);
  a.pid = field<int>(j, "pid", 0);
  a.time = field<double>(j, "time", 0);
  for (const auto& t : field<json>(j, "threads", json::array())) {
    ThreadStack s;
    s.name = field<std::string>(t, "name", "?");
    s.main = field<bool>(t, "main", false);
    for (const auto& f : field<json>(t, "frames", json::array())) s.frames.push_back(frame_from(f));
    a.threads.push_back(std::move(s));
  }
  if (j.contains("torch") && j["torch"].is_string()) a.torch = j["torch"].get<std::string>();
  for (const auto& g : field<json>(j, "groups", json::array())) {
    GroupProgress p;
    p.name = field<std::string>(g, "name", "");
    p.backend = field<std::string>(g, "backend", "");
    p.ranks = field<std::vector<int>>(g, "ranks", {});
    if (g.contains("seq")) p.seq = json_number::whole<int64_t>(g["seq"]);
    a.groups.push_back(std::move(p));
  }
  a.flight_recorder = field<bool>(j, "fr", false);
  for (const auto& c : field<json>(j, "collectives", json::array())) {
    CollectiveEntry e;
    e.group = field<std::string>(c, "pg", "");
    e.seq = field<int64_t>(c, "seq", 0);
    e.p2p_seq = field<int64_t>(c, "p2p_seq", 0);
    e.op = plain_op(field<std::string>(c, "op", "?"));
    e.in_sizes = compact(c, "in");
    e.out_sizes = compact(c, "out");
    e.dtypes = compact(c, "dtypes");
    e.state = field<std::string>(c, "state", "");
    e.done = field<bool>(c, "done", false);
    e.since = field<double>(c, "since", 0);
    e.timeout_s = field<double>(c, "timeout_s", 0);
    e.p2p = field<bool>(c, "p2p", false);
    a.collectives.push_back(std::move(e));
  }
  a.errors = field<std::vector<std::string>>(j, "errors", {});
  return a;
}

std::string encode_answer(const ProbeAnswer& a) {
  json j = {{"v", 1}, {"id", a.id}, {"pid", a.pid}, {"time", a.time}};
  json threads = json::array();
  for (const auto& t : a.threads) {
    json frames = json::array();
    for (const auto& f : t.frames) frames.push_back({f.file, f.line, f.function, f.source});
    threads.push_back({{"name", t.name}, {"main", t.main}, {"frames", std::move(frames)}});
  }
  j["threads"] = std::move(threads);
  if (a.torch) j["torch"] = *a.torch;
  json groups = json::array();
  for (const auto& g : a.groups) {
    json x = {{"name", g.name}, {"backend", g.backend}, {"ranks", g.ranks}};
    if (g.seq) x["seq"] = *g.seq;
    groups.push_back(std::move(x));
  }
  j["groups"] = std::move(groups);
  j["fr"] = a.flight_recorder;
  json collectives = json::array();
  auto raw = [](const std::string& text) {
    json v = json::parse(text, nullptr, false);
    return v.is_discarded() ? json::array() : v;
  };
  for (const auto& c : a.collectives) {
    collectives.push_back({{"pg", c.group},
                           {"seq", c.seq},
                           {"p2p_seq", c.p2p_seq},
                           {"op", c.op},
                           {"in", raw(c.in_sizes)},
                           {"out", raw(c.out_sizes)},
                           {"dtypes", raw(c.dtypes)},
                           {"state", c.state},
                           {"done", c.done},
                           {"since", c.since},
                           {"timeout_s", c.timeout_s},
                           {"p2p", c.p2p}});
  }
  j["collectives"] = std::move(collectives);
  if (!a.errors.empty()) j["errors"] = a.errors;
  // Invalid UTF-8 (a file name, a source line) becomes U+FFFD rather than an exception.
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace cohort::hang_probe

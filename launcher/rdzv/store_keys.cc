#include "rdzv/store_keys.h"

#include <charconv>
#include <vector>

namespace cohort::launch::keys {
namespace {

constexpr std::string_view kRoot = "cohort/";

std::string num(int v) {
  return std::to_string(v);
}

std::string round_key(int round, std::string_view what) {
  return "round/" + num(round) + "/" + std::string(what);
}

std::vector<std::string_view> split(std::string_view s) {
  std::vector<std::string_view> parts;
  while (true) {
    size_t slash = s.find('/');
    parts.push_back(s.substr(0, slash));
    if (slash == std::string_view::npos) return parts;
    s.remove_prefix(slash + 1);
  }
}

// A non-negative decimal written as std::to_string writes it ("12", never "012" or "+1").
std::optional<int> number(std::string_view s) {
  if (s.empty() || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::string lobby() {
  return "cohort/lobby";
}

std::string run_prefix(const std::string& run_id) {
  return std::string(kRoot) + run_id;
}

std::optional<std::string> split_run(std::string_view full_key, std::string* rest) {
  if (full_key.substr(0, kRoot.size()) != kRoot) return std::nullopt;
  full_key.remove_prefix(kRoot.size());
  size_t slash = full_key.find('/');
  if (slash == 0 || slash == std::string_view::npos) return std::nullopt;
  if (rest != nullptr) *rest = std::string(full_key.substr(slash + 1));
  return std::string(full_key.substr(0, slash));
}

std::string node(int round, int node_rank) {
  return round_key(round, "node/" + num(node_rank));
}
std::string done_count(int round) {
  return round_key(round, "done");
}
std::string outcome(int round) {
  return round_key(round, "outcome");
}
std::string failures(int round, int node_rank) {
  return round_key(round, "failures/" + num(node_rank));
}
std::string exit_count(int round) {
  return round_key(round, "exit");
}
std::string exit_all(int round) {
  return exit_count(round) + "/all";
}
std::string running(int round, int node_rank) {
  return round_key(round, "running/" + num(node_rank));
}
std::string worker_port(int port) {
  return "worker_port/" + num(port);
}
std::string hang_probe(int round) {
  return round_key(round, "hang");
}
std::string hang_answers(int round, int probe, int node_rank) {
  return round_key(round, "hang/" + num(probe) + "/" + num(node_rank));
}
std::string status(int node_rank) {
  return "status/" + num(node_rank);
}
std::string current_round() {
  return "rdzv/current";
}
std::string round_state(int round) {
  return "rdzv/round/" + num(round) + "/state";
}
std::string round_changed(int round, int version) {
  return "rdzv/round/" + num(round) + "/changed/" + num(version);
}
std::string keep_alive(const std::string& node_id) {
  return "rdzv/hb/" + node_id;
}
std::string alive(const std::string& node_id) {
  return "rdzv/alive/" + node_id;
}

ParsedKey parse(std::string_view key) {
  using Kind = ParsedKey::Kind;
  ParsedKey k;
  const std::vector<std::string_view> p = split(key);
  if (p[0] == "round" && p.size() >= 3) {
    auto round = number(p[1]);
    if (!round) return k;
    if (p.size() == 3 && p[2] == "done") {
      k.kind = Kind::kDoneCount;
    } else if (p.size() == 3 && p[2] == "outcome") {
      k.kind = Kind::kOutcome;
    } else if (p.size() == 3 && p[2] == "hang") {
      k.kind = Kind::kHangProbe;
    } else if (p.size() == 5 && p[2] == "hang") {
      auto probe = number(p[3]);
      auto n = number(p[4]);
      if (!probe || !n) return k;
      k.kind = Kind::kHangAnswers;
      k.probe = *probe;
      k.node_rank = *n;
    } else if (p.size() == 3 && p[2] == "exit") {
      k.kind = Kind::kExitCount;
    } else if (p.size() == 4 && p[2] == "exit" && p[3] == "all") {
      k.kind = Kind::kExitAll;
    } else if (p.size() == 4 && (p[2] == "node" || p[2] == "failures" || p[2] == "running")) {
      auto n = number(p[3]);
      if (!n) return k;
      k.kind = p[2] == "node" ? Kind::kNode : p[2] == "failures" ? Kind::kFailures : Kind::kRunning;
      k.node_rank = *n;
    } else {
      return k;
    }
    k.round = *round;
  } else if (p[0] == "worker_port" && p.size() == 2) {
    if (auto port = number(p[1])) {
      k.kind = Kind::kWorkerPort;
      k.port = *port;
    }
  } else if (p[0] == "status" && p.size() == 2) {
    if (auto n = number(p[1])) {
      k.kind = Kind::kStatus;
      k.node_rank = *n;
    }
  } else if (p[0] == "rdzv") {
    if (p.size() == 2 && p[1] == "current") {
      k.kind = Kind::kCurrentRound;
    } else if (p.size() >= 3 && (p[1] == "hb" || p[1] == "alive")) {
      // A node id may itself hold slashes: everything after "rdzv/hb/".
      k.kind = p[1] == "hb" ? Kind::kKeepAlive : Kind::kAlive;
      k.node_id = std::string(key.substr(key.find('/', 5) + 1));
      if (k.node_id.empty()) k.kind = Kind::kOther;
    } else if (p.size() >= 4 && p[1] == "round") {
      auto round = number(p[2]);
      if (!round) return k;
      if (p.size() == 4 && p[3] == "state") {
        k.kind = Kind::kRoundState;
        k.round = *round;
      } else if (p.size() == 5 && p[3] == "changed") {
        if (auto v = number(p[4])) {
          k.kind = Kind::kRoundChanged;
          k.round = *round;
          k.version = *v;
        }
      }
    }
  }
  return k;
}

}  // namespace cohort::launch::keys

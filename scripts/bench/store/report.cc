#include "report.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>

#include "wire.h"

namespace cohort::bench {
namespace {

using nlohmann::json;

// Index of a server in the report, or -1.
int server_index(const BenchReport& r, const std::string& name) {
  for (size_t i = 0; i < r.servers.size(); ++i) {
    if (r.servers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

// Server CPU microseconds per request: the server's efficiency, whatever the generator and the
// rest of the machine left it (-1 when not measured).
double server_us_per_op(const OpsResult& r) {
  return r.server_cpu < 0 || r.ops_per_s <= 0 ? -1 : r.server_cpu * 1e6 / r.ops_per_s;
}

// cohortd ops/s over PyTorch ops/s, when the report has both and both cells succeeded.
std::optional<double> ops_ratio(const BenchReport& r, const OpsCell& cell) {
  int c = server_index(r, "cohortd"), p = server_index(r, "pytorch");
  if (c < 0 || p < 0) return std::nullopt;
  const OpsResult &a = cell.results[c], &b = cell.results[p];
  if (!a.error.empty() || !b.error.empty() || b.ops_per_s <= 0) return std::nullopt;
  return a.ops_per_s / b.ops_per_s;
}

// cohortd-scraped ops/s over cohortd's: what a Prometheus scraping /metrics costs the clients.
std::optional<double> scrape_ratio(const BenchReport& r, const OpsCell& cell) {
  int c = server_index(r, "cohortd"), s = server_index(r, "cohortd-scraped");
  if (c < 0 || s < 0) return std::nullopt;
  const OpsResult &plain = cell.results[c], &scraped = cell.results[s];
  if (!plain.error.empty() || !scraped.error.empty() || plain.ops_per_s <= 0) return std::nullopt;
  return scraped.ops_per_s / plain.ops_per_s;
}

// PyTorch's server CPU per request over cohortd's: how much less work cohortd does per request,
// independent of how much CPU the generator and other processes left each server.
std::optional<double> cpu_ratio(const BenchReport& r, const OpsCell& cell) {
  int c = server_index(r, "cohortd"), p = server_index(r, "pytorch");
  if (c < 0 || p < 0 || !ops_ratio(r, cell)) return std::nullopt;
  double a = server_us_per_op(cell.results[c]), b = server_us_per_op(cell.results[p]);
  if (a <= 0 || b <= 0) return std::nullopt;
  return b / a;
}

// PyTorch's storm time over cohortd's. When PyTorch timed out, `at_least` is the timeout over
// cohortd's time: a lower bound.
struct Speedup {
  std::optional<double> exact, at_least;
};
Speedup storm_speedup(const BenchReport& r, const StormCell& cell) {
  Speedup s;
  int c = server_index(r, "cohortd"), p = server_index(r, "pytorch");
  if (c < 0 || p < 0) return s;
  const StormResult &a = cell.results[c], &b = cell.results[p];
  if (a.status != "ok" || a.total_s <= 0) return s;
  if (b.status == "ok") s.exact = b.total_s / a.total_s;
  if (b.status == "timeout") s.at_least = r.options.storm_timeout_s / a.total_s;
  return s;
}

std::string with_commas(double v) {
  auto n = static_cast<long long>(v + 0.5);
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), f, v);
  return buf;
}

// Rounded to `digits` decimals (dividing by a power of ten keeps the JSON short: 16.9, not
// 16.900000000000002); null for the -1 that marks "not measured".
json round_to(double v, int digits) {
  double p = std::pow(10.0, digits);
  return v < 0 ? json(nullptr) : json(std::round(v * p) / p);
}

json ops_json(const OpsResult& r) {
  json j = {{"ops_per_s", round_to(r.ops_per_s, 0)},
            {"requests", r.requests},
            {"cycles", r.cycles},
            {"seconds", r.seconds},
            {"p50_us", round_to(r.p50_us, 1)},
            {"p99_us", round_to(r.p99_us, 1)},
            {"server_cpu", round_to(r.server_cpu, 2)},
            {"server_us_per_op", round_to(server_us_per_op(r), 2)},
            {"server_kernel_share", round_to(r.server_kernel_share, 2)},
            {"generator_cpu", round_to(r.generator_cpu, 2)}};
  if (r.all_ops_per_s.size() > 1) j["runs_ops_per_s"] = r.all_ops_per_s;
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

json storm_json(const StormResult& r) {
  json j = {{"status", r.status},
            {"total_s", round_to(r.total_s, 4)},
            {"issue_s", round_to(r.issue_s, 4)},
            {"connect_s", round_to(r.connect_s, 4)},
            {"arrive_s", round_to(r.arrive_s, 4)},
            {"max_connect_ms", round_to(r.max_connect_ms, 2)},
            {"connected", r.connected},
            {"arrived", r.arrived},
            {"released", r.released}};
  if (r.all_total_s.size() > 1) {
    j["runs_total_s"] = json::array();
    for (double v : r.all_total_s) j["runs_total_s"].push_back(round_to(v, 4));
  }
  if (!r.error.empty()) j["error"] = r.error;
  return j;
}

json opt(const std::optional<double>& v, int digits) {
  return v ? round_to(*v, digits) : json(nullptr);
}

}  // namespace

void print_tables(const BenchReport& r, std::FILE* out) {
  const auto& o = r.options;
  std::fprintf(out, "\nstore_bench: %s dialect; ops cells %.1f s after %.1f s warm-up",
               std::string(rdzv::dialect_name(o.dialect)).c_str(), o.duration_s, o.warmup_s);
  if (o.repeat > 1) std::fprintf(out, ", median of %d runs (servers alternating)", o.repeat);
  std::fprintf(out,
               "; %d generator thread(s)\n%d CPUs%s; load average %.2f %.2f %.2f before, "
               "%.2f %.2f %.2f after\n",
               o.threads, r.cpus,
               r.pinned ? ", servers pinned to CPU 0, generator to the rest" : "", r.load_before[0],
               r.load_before[1], r.load_before[2], r.load_after[0], r.load_after[1],
               r.load_after[2]);
  for (const auto& s : r.servers) {
    std::fprintf(out, "  %-8s %s%s%s\n", s.name.c_str(), s.address.c_str(),
                 s.version.empty() ? "" : "  ", s.version.c_str());
  }
  bool compare = server_index(r, "cohortd") >= 0 && server_index(r, "pytorch") >= 0;

  if (!r.ops.empty()) {
    std::fprintf(out,
                 "\nops/s: each client one connection, one write outstanding, cycling SET+WAIT, "
                 "GET, ADD;\nevery request counted (SET with its WAIT); p50/p99 per round trip;\n"
                 "srv cpu = server cores busy; us/op = server CPU microseconds per request;\n"
                 "krnl = share of the server's CPU in the kernel (on loopback, TCP's work for both "
                 "ends)\n");
    std::fprintf(out, "%-16s", "clients keys");
    for (const auto& s : r.servers) std::fprintf(out, " | %-45s", s.name.c_str());
    std::fprintf(out, "%s\n", compare ? " |  ratio" : "");
    std::fprintf(out, "%-16s", "");
    for (size_t i = 0; i < r.servers.size(); ++i) {
      std::fprintf(out, " | %10s %7s %7s %7s %5s %4s", "ops/s", "p50 us", "p99 us", "srv cpu",
                   "us/op", "krnl");
    }
    std::fprintf(out, "%s\n", compare ? " |" : "");
    for (const auto& cell : r.ops) {
      std::fprintf(out, "%7d %-8s", cell.clients, key_mode_name(cell.mode));
      for (const auto& res : cell.results) {
        if (!res.error.empty()) {
          std::fprintf(out, " | %-45s", "error (see below)");
          continue;
        }
        double us = server_us_per_op(res);
        std::fprintf(
            out, " | %10s %7.1f %7.1f %7s %5s %4s", with_commas(res.ops_per_s).c_str(), res.p50_us,
            res.p99_us, res.server_cpu < 0 ? "-" : fmt("%.0f%%", res.server_cpu * 100).c_str(),
            us < 0 ? "-" : fmt("%.1f", us).c_str(),
            res.server_kernel_share < 0 ? "-"
                                        : fmt("%.0f%%", res.server_kernel_share * 100).c_str());
      }
      if (compare) {
        auto ratio = ops_ratio(r, cell);
        std::fprintf(out, " | %6s", ratio ? fmt("%.2fx", *ratio).c_str() : "-");
      }
      std::fprintf(out, "\n");
    }
  }

  if (server_index(r, "cohortd-scraped") >= 0 && server_index(r, "cohortd") >= 0) {
    std::fprintf(out, "\ncohortd-scraped ops/s over cohortd's:");
    for (const auto& cell : r.ops) {
      auto ratio = scrape_ratio(r, cell);
      std::fprintf(out, "  %d %s %s", cell.clients, key_mode_name(cell.mode),
                   ratio ? fmt("%.3fx", *ratio).c_str() : "-");
    }
    std::fprintf(out, "\n");
  }

  if (!r.storms.empty()) {
    std::fprintf(out,
                 "\nrendezvous storm: N ranks, one connection each, ADD arrived then WAIT go; the "
                 "N-th arrival SETs go.\ntotal = first connect to last release; connect = to last "
                 "connection up; arrive = to N-th ADD reply\n");
    std::fprintf(out, "%-6s", "ranks");
    for (const auto& s : r.servers) std::fprintf(out, " | %-38s", s.name.c_str());
    std::fprintf(out, "%s\n", compare ? " | speedup" : "");
    std::fprintf(out, "%-6s", "");
    for (size_t i = 0; i < r.servers.size(); ++i) {
      std::fprintf(out, " | %9s %9s %9s %8s", "total s", "connect s", "arrive s", "max conn");
    }
    std::fprintf(out, "%s\n", compare ? " |" : "");
    for (const auto& cell : r.storms) {
      std::fprintf(out, "%6d", cell.ranks);
      for (const auto& res : cell.results) {
        auto secs = [](double v) { return v < 0 ? std::string("-") : fmt("%.3f", v); };
        std::string total = res.status == "ok" ? secs(res.total_s) : res.status;
        std::string max_conn = res.max_connect_ms < 0 ? "-" : fmt("%.0fms", res.max_connect_ms);
        std::fprintf(out, " | %9s %9s %9s %8s", total.c_str(), secs(res.connect_s).c_str(),
                     secs(res.arrive_s).c_str(), max_conn.c_str());
      }
      if (compare) {
        Speedup s = storm_speedup(r, cell);
        std::string text = s.exact      ? fmt("%.1fx", *s.exact)
                           : s.at_least ? fmt(">%.0fx", *s.at_least)
                                        : "-";
        std::fprintf(out, " | %7s", text.c_str());
      }
      std::fprintf(out, "\n");
    }
  }

  bool header = false;
  auto problem = [&](const std::string& line) {
    if (!header) std::fprintf(out, "\nnotes:\n");
    header = true;
    std::fprintf(out, "  %s\n", line.c_str());
  };
  for (const auto& cell : r.ops) {
    for (size_t i = 0; i < cell.results.size(); ++i) {
      if (cell.results[i].error.empty()) continue;
      problem(r.servers[i].name + ", " + std::to_string(cell.clients) + " clients " +
              key_mode_name(cell.mode) + ": " + cell.results[i].error);
    }
  }
  for (const auto& cell : r.storms) {
    for (size_t i = 0; i < cell.results.size(); ++i) {
      if (cell.results[i].error.empty()) continue;
      problem(r.servers[i].name + ", storm of " + std::to_string(cell.ranks) + ": " +
              cell.results[i].status + ", " + cell.results[i].error);
    }
  }
  for (const auto& s : r.servers) {
    if (!s.notes.empty()) problem(s.name + ": " + s.notes);
  }
  std::fprintf(out, "\n");
}

std::string report_json(const BenchReport& r) {
  const auto& o = r.options;
  json j;
  j["benchmark"] = "store_bench";
  j["dialect"] = o.dialect == rdzv::Dialect::kLegacy ? "legacy" : "current";
  j["config"] = {{"duration_s", o.duration_s},   {"warmup_s", o.warmup_s},
                 {"threads", o.threads},         {"repeat", o.repeat},
                 {"value_bytes", o.value_bytes}, {"storm_timeout_s", o.storm_timeout_s},
                 {"cycle", "SET+WAIT, GET, ADD"}};
  j["host"] = {{"cpus", r.cpus},
               {"fd_limit", r.fd_limit},
               {"pinned", r.pinned},
               {"loadavg_before", r.load_before},
               {"loadavg_after", r.load_after}};
  j["servers"] = json::array();
  for (const auto& s : r.servers) {
    json sj = {{"name", s.name}, {"address", s.address}};
    if (!s.version.empty()) sj["version"] = s.version;
    if (!s.notes.empty()) sj["notes"] = s.notes;
    j["servers"].push_back(sj);
  }

  j["ops"] = json::array();
  for (const auto& cell : r.ops) {
    json cj = {{"clients", cell.clients}, {"keys", key_mode_name(cell.mode)}};
    for (size_t i = 0; i < cell.results.size(); ++i) {
      cj[r.servers[i].name] = ops_json(cell.results[i]);
    }
    cj["ratio"] = opt(ops_ratio(r, cell), 3);
    cj["server_cpu_ratio"] = opt(cpu_ratio(r, cell), 3);
    if (auto s = scrape_ratio(r, cell)) cj["scraped_over_plain"] = round_to(*s, 3);
    j["ops"].push_back(cj);
  }

  j["storm"] = json::array();
  for (const auto& cell : r.storms) {
    json cj = {{"ranks", cell.ranks}};
    for (size_t i = 0; i < cell.results.size(); ++i) {
      cj[r.servers[i].name] = storm_json(cell.results[i]);
    }
    Speedup s = storm_speedup(r, cell);
    cj["speedup"] = opt(s.exact, 2);
    if (s.at_least) cj["speedup_at_least"] = round_to(*s.at_least, 2);
    j["storm"].push_back(cj);
  }

  // The issue's targets, where this run measured them.
  json t = json::object();
  for (const auto& cell : r.ops) {
    if (cell.clients != 8) continue;
    auto ratio = ops_ratio(r, cell);
    if (!ratio) continue;  // PyTorch was not measured, or a cell failed
    std::string key = std::string("ops_ratio_8_clients_") + key_mode_name(cell.mode);
    t[key] = round_to(*ratio, 3);
    bool met = *ratio >= 2.0;
    t["ops_2x_at_8_clients"] = t.contains("ops_2x_at_8_clients")
                                   ? json(t["ops_2x_at_8_clients"].get<bool>() && met)
                                   : json(met);
  }
  int c = server_index(r, "cohortd");
  for (const auto& cell : r.storms) {
    if (cell.ranks != 10000 || c < 0) continue;
    const auto& res = cell.results[c];
    t["storm_10000_cohortd_s"] = res.status == "ok" ? round_to(res.total_s, 4) : json(nullptr);
    t["storm_10000_under_2s"] = res.status == "ok" && res.total_s < 2.0;
  }
  j["targets"] = t;
  return j.dump();
}

}  // namespace cohort::bench

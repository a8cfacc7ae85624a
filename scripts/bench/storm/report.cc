#include <unistd.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "storm_bench.h"

namespace cohort::bench {
namespace {

using nlohmann::json;

json null_if(double v, bool ok) {
  return ok ? json(v) : json(nullptr);
}

const StormCell* find(const StormReport& r, const std::string& server, const std::string& path,
                      int ranks) {
  for (const auto& c : r.cells)
    if (c.server == server && c.path == path && c.ranks == ranks && c.skipped.empty()) return &c;
  return nullptr;
}

// The median total of a cell, or -1 when it has no successful run.
double total(const StormCell* c) {
  const StormOutcome* m = c ? c->median() : nullptr;
  return m && m->status == "ok" ? m->total_s : -1;
}

}  // namespace

void print_storm_report(const StormBenchOptions& o, const StormReport& r) {
  std::printf(
      "\nrendezvous storm: every rank connects, ADDs its arrival and WAITs for the go; %d ranks "
      "per node; nodes dial from addresses of their own (127.x.y.z). %s; net.core.somaxconn "
      "%d; %ld descriptors per process; %ld CPUs; load average %.2f before, %.2f after. Median "
      "of %d.\n",
      o.ranks_per_node, r.namespace_note.c_str(), r.somaxconn, r.fd_limit,
      ::sysconf(_SC_NPROCESSORS_ONLN), r.loadavg_before, r.loadavg_after, o.repeat);
  std::printf("%-10s %-6s %7s %6s %5s | %8s %9s %9s | %8s %8s %13s | %s\n", "server", "path",
              "ranks", "nodes", "procs", "total s", "connect s", "max conn", "store", "store",
              "store RSS MB", "status");
  std::printf("%-10s %-6s %7s %6s %5s | %8s %9s %9s | %8s %8s %13s |\n", "", "", "", "", "", "", "",
              "ms", "conns", "CPU s", "ready->after");
  json cells = json::array();
  for (const auto& c : r.cells) {
    if (!c.skipped.empty()) {
      cells.push_back(
          {{"server", c.server}, {"path", c.path}, {"ranks", c.ranks}, {"skipped", c.skipped}});
      continue;
    }
    const StormOutcome* m = c.median();
    if (m == nullptr) continue;
    const bool ok = m->status == "ok";
    std::printf("%-10s %-6s %7d %6d %5d | %8.3f %9.3f %9.1f | %8ld %8.2f %6.1f->%6.1f | %s%s%s\n",
                c.server.c_str(), c.path.c_str(), m->ranks, m->nodes, m->processes, m->total_s,
                m->connect_s, m->max_connect_ms, m->store_connections, m->store_cpu_s,
                m->store_rss_ready_kb / 1024.0, m->store_rss_after_kb / 1024.0, m->status.c_str(),
                m->error.empty() ? "" : ": ", m->error.c_str());
    json runs = json::array();
    for (const auto& run : c.runs) runs.push_back(null_if(run.total_s, run.status == "ok"));
    json cell = {{"server", c.server},
                 {"path", c.path},
                 {"ranks", m->ranks},
                 {"nodes", m->nodes},
                 {"processes", m->processes},
                 {"status", m->status},
                 {"total_s", null_if(m->total_s, ok)},
                 {"runs_total_s", runs},
                 {"connect_s", null_if(m->connect_s, ok)},
                 {"max_connect_ms", m->max_connect_ms},
                 {"setup_s", m->setup_s},
                 {"store_connections", m->store_connections},
                 {"store_cpu_s", m->store_cpu_s},
                 {"store_rss_before_kb", m->store_rss_before_kb},
                 {"store_rss_ready_kb", m->store_rss_ready_kb},
                 {"store_rss_after_kb", m->store_rss_after_kb}};
    if (!m->error.empty()) cell["error"] = m->error;
    if (c.path == "relay" && ok && m->nodes > 0) {
      // What one relaying node costs the store: its idle link, then its link and channels after
      // the storm, and the store's CPU for its part of the storm.
      cell["store_bytes_per_idle_link"] =
          (m->store_rss_ready_kb - m->store_rss_before_kb) * 1024.0 / m->nodes;
      cell["store_bytes_per_node_after"] =
          (m->store_rss_after_kb - m->store_rss_before_kb) * 1024.0 / m->nodes;
      cell["store_cpu_us_per_node"] = m->store_cpu_s * 1e6 / m->nodes;
    }
    cells.push_back(cell);
  }
  json ratios = json::object(), targets = json::object();
  for (int n : o.ranks) {
    const double direct = total(find(r, "cohortd", "direct", n));
    const double one_queue = total(find(r, "cohortd-1q", "direct", n));
    const double pytorch = total(find(r, "pytorch", "direct", n));
    const double relay = total(find(r, "cohortd", "relay", n));
    const std::string at = std::to_string(n);
    if (direct > 0 && pytorch > 0) ratios["pytorch_over_cohortd_direct_" + at] = pytorch / direct;
    if (direct > 0 && one_queue > 0)
      ratios["one_queue_over_accept_queues_" + at] = one_queue / direct;
    if (direct > 0 && relay > 0) ratios["direct_over_relay_" + at] = direct / relay;
    if (pytorch > 0 && relay > 0) ratios["pytorch_over_relay_" + at] = pytorch / relay;
  }
  if (double t = total(find(r, "cohortd", "relay", 19000)); t > 0)
    targets["relay_19000_under_1s"] = t < 1.0;
  if (double t = total(find(r, "cohortd", "relay", 100000)); t > 0)
    targets["relay_100000_under_5s"] = t < 5.0;
  for (const auto& [k, v] : ratios.items()) std::printf("%s: %.2fx\n", k.c_str(), v.get<double>());
  for (const auto& [k, v] : targets.items())
    std::printf("target %s: %s\n", k.c_str(), v.get<bool>() ? "met" : "NOT met");
  json out = {{"benchmark", "storm_bench"},
              {"ranks_per_node", o.ranks_per_node},
              {"repeat", o.repeat},
              {"host",
               {{"namespace", r.namespace_note},
                {"somaxconn", r.somaxconn},
                {"fd_limit", r.fd_limit},
                {"cpus", ::sysconf(_SC_NPROCESSORS_ONLN)},
                {"loadavg_before", r.loadavg_before},
                {"loadavg_after", r.loadavg_after}}},
              {"cells", cells},
              {"ratios", ratios},
              {"targets", targets}};
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace cohort::bench

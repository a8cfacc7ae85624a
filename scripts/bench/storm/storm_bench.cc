#include "storm_bench.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "../store/server_process.h"
#include "netns.h"

namespace cohort::bench {
namespace {

double loadavg() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

std::unique_ptr<ServerProcess> start_server(const StormBenchOptions& o, const std::string& name) {
  constexpr auto kStart = std::chrono::seconds(60);  // importing torch takes seconds
  if (name == "pytorch") return ServerProcess::start_pytorch(o.python, -1, kStart);
  std::vector<std::string> args;
  if (name == "cohortd-1q") args = {"--accept-queues", "1"};
  return ServerProcess::start_cohortd(o.cohortd, -1, kStart, name, args);
}

int port_of(const ServerProcess& p) {
  const std::string& t = p.endpoint().text;
  return std::stoi(t.substr(t.rfind(':') + 1));
}

}  // namespace

const StormOutcome* StormCell::median() const {
  std::vector<const StormOutcome*> ok;
  for (const auto& r : runs)
    if (r.status == "ok") ok.push_back(&r);
  if (ok.empty()) return runs.empty() ? nullptr : &runs.back();
  std::sort(ok.begin(), ok.end(),
            [](const auto* a, const auto* b) { return a->total_s < b->total_s; });
  return ok[ok.size() / 2];
}

StormReport run_storm_bench(const StormBenchOptions& o) {
  StormReport report;
  if (o.netns) {
    NetnsResult ns = enter_fresh_netns(o.somaxconn);
    report.namespace_note = ns.note;
  } else {
    report.namespace_note = "the machine's own network namespace";
  }
  report.somaxconn = read_somaxconn();
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  report.fd_limit = static_cast<long>(rl.rlim_max);
  report.loadavg_before = loadavg();
  int seq = 0;
  for (const auto& server : o.servers) {
    for (int n : o.ranks) {
      for (const auto& path : o.paths) {
        StormCell cell{server, path, n, {}, {}};
        if (path == "relay" && server == "pytorch") {
          cell.skipped = "PyTorch's servers take no relay links";
        } else if (path == "relay" && server == "cohortd-1q") {
          cell.skipped = "the relay path does not depend on the accept queues";
        } else if (path == "direct" && n > o.direct_max) {
          cell.skipped = "over --direct-max (the store's descriptors)";
        }
        if (!cell.skipped.empty()) {
          report.cells.push_back(std::move(cell));
          continue;
        }
        // A fresh server per cell: its memory and CPU figures are this cell's alone.
        std::fprintf(stderr, "storm_bench: starting %s\n", server.c_str());
        std::unique_ptr<ServerProcess> proc = start_server(o, server);
        for (int rep = 0; rep < o.repeat; ++rep) {
          StormSpec spec;
          spec.path = path == "relay" ? StormPath::kRelay : StormPath::kDirect;
          spec.dialect = o.dialect;
          spec.ranks = n;
          spec.ranks_per_node = o.ranks_per_node;
          spec.processes = o.processes;
          spec.store_port = port_of(*proc);
          spec.store_pid = proc->pid();
          spec.timeout_s = o.timeout_s;
          spec.key_prefix = "/storm" + std::to_string(::getpid()) + "_" + std::to_string(seq++);
          cell.runs.push_back(run_storm_processes(spec));
          const StormOutcome& r = cell.runs.back();
          std::fprintf(stderr, "storm_bench: %-10s %-6s %6d ranks  %s %.3f s%s%s\n", server.c_str(),
                       path.c_str(), n, r.status.c_str(), r.total_s, r.error.empty() ? "" : ": ",
                       r.error.c_str());
        }
        if (std::string note = proc->stop(); !note.empty())
          std::fprintf(stderr, "storm_bench: %s\n", note.c_str());
        report.cells.push_back(std::move(cell));
      }
    }
  }
  report.loadavg_after = loadavg();
  return report;
}

}  // namespace cohort::bench

#include "bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>

#include "cohort/error.h"
#include "cohort/rdzv/cohortd.h"
#include "scraper.h"
#include "server_process.h"
#include "wire.h"

namespace cohort::bench {
namespace {

constexpr auto kStartTimeout = std::chrono::seconds(60);  // importing torch takes a few seconds
constexpr auto kAliveTimeout = std::chrono::milliseconds(10000);
// Descriptors the process needs besides one per storm rank.
constexpr long kSpareFds = 64;

std::array<double, 3> loadavg() {
  std::array<double, 3> l{};
  std::ifstream f("/proc/loadavg");
  f >> l[0] >> l[1] >> l[2];
  return l;
}

struct Target {
  ServerInfo info;
  Endpoint endpoint;
  pid_t pid = -1;
  std::unique_ptr<ServerProcess> process;   // null for --target
  std::unique_ptr<MetricsScraper> scraper;  // cohortd-scraped only
};

// A port on 127.0.0.1 that nothing listens on now, for cohortd's --metrics-addr (which does not
// print the port it chose). Another process could take it before cohortd does; then cohortd
// fails to start and the benchmark says so.
int free_port() {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (!fd.valid() || ::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    throw Error("finding a free port for --metrics-addr: " + errno_text(errno));
  }
  return ntohs(a.sin_port);
}

// One round trip on a fresh connection: the server is up and has worked through what came
// before (a storm's 10,000 disconnects, say). "" when it answered.
std::string check_alive(const Endpoint& ep, rdzv::Dialect d, const std::string& key) {
  try {
    Fd fd = connect_blocking(ep, kAliveTimeout);
    std::string req = d == rdzv::Dialect::kCurrent ? encode_handshake(d, 1) : std::string();
    req += encode_add(d, key, 1);
    send_all(fd.get(), req, kAliveTimeout, "liveness ADD");
    recv_exact(fd.get(), d == rdzv::Dialect::kCurrent ? 12 : 8, kAliveTimeout, "liveness ADD");
    return {};
  } catch (const std::exception& e) {
    return e.what();
  }
}

void note(ServerInfo* info, const std::string& what) {
  if (what.empty()) return;
  if (!info->notes.empty()) info->notes += "; ";
  info->notes += what;
}

// Keeps this process (and the generator threads it starts later) off the servers' CPU 0.
bool pin_generator(int cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c = 1; c < cpus; ++c) CPU_SET(c, &set);
  return ::sched_setaffinity(0, sizeof(set), &set) == 0;
}

std::vector<Target> start_servers(const BenchOptions& o, int server_cpu) {
  std::vector<Target> out;
  for (const auto& name : o.servers) {
    Target t;
    t.info.name = name;
    if (name == "target") {
      t.endpoint = resolve_endpoint(o.target);
    } else {
      std::fprintf(stderr, "store_bench: starting %s\n", name.c_str());
      if (name == "cohortd") {
        t.process = ServerProcess::start_cohortd(o.cohortd, server_cpu, kStartTimeout);
      } else if (name == "cohortd-scraped") {
        std::string metrics = "127.0.0.1:" + std::to_string(free_port());
        t.process = ServerProcess::start_cohortd(o.cohortd, server_cpu, kStartTimeout, name,
                                                 {"--metrics-addr", metrics});
        t.scraper =
            std::make_unique<MetricsScraper>(resolve_endpoint(metrics), o.scrape_interval_s);
      } else {
        t.process = ServerProcess::start_pytorch(o.python, server_cpu, kStartTimeout);
      }
      t.endpoint = t.process->endpoint();
      t.pid = t.process->pid();
      t.info.version = t.process->version();
    }
    t.info.address = t.endpoint.text;
    out.push_back(std::move(t));
  }
  return out;
}

void print_ops_progress(const Target& t, int clients, KeyMode mode, const OpsResult& r) {
  if (!r.error.empty()) {
    std::fprintf(stderr, "store_bench: %-8s %2d clients %-8s  error: %s\n", t.info.name.c_str(),
                 clients, key_mode_name(mode), r.error.c_str());
    return;
  }
  std::fprintf(stderr, "store_bench: %-8s %2d clients %-8s  %10.0f ops/s  p50 %.1f us\n",
               t.info.name.c_str(), clients, key_mode_name(mode), r.ops_per_s, r.p50_us);
}

void print_storm_progress(const Target& t, int ranks, const StormResult& r) {
  if (r.status == "ok") {
    std::fprintf(stderr, "store_bench: %-8s storm %5d ranks  %.3f s\n", t.info.name.c_str(), ranks,
                 r.total_s);
  } else {
    std::fprintf(stderr, "store_bench: %-8s storm %5d ranks  %s: %s\n", t.info.name.c_str(), ranks,
                 r.status.c_str(), r.error.c_str());
  }
}

OpsResult ops_once(const BenchOptions& o, const Target& t, int clients, KeyMode mode,
                   const std::string& prefix) {
  OpsConfig cfg;
  cfg.dialect = o.dialect;
  cfg.warmup_s = o.warmup_s;
  cfg.duration_s = o.duration_s;
  cfg.threads = o.threads;
  cfg.value_bytes = o.value_bytes;
  cfg.key_prefix = prefix;
  cfg.server_pid = t.pid;
  return run_ops(t.endpoint, clients, mode, cfg);
}

StormResult storm_once(const BenchOptions& o, long fd_limit, Target* t, int ranks,
                       const std::string& prefix) {
  if (ranks + kSpareFds > fd_limit) {
    StormResult r;
    r.status = "error";
    r.ranks = ranks;
    r.error = "needs " + std::to_string(ranks + kSpareFds) + " descriptors; RLIMIT_NOFILE is " +
              std::to_string(fd_limit);
    return r;
  }
  StormConfig cfg;
  cfg.dialect = o.dialect;
  cfg.timeout_s = o.storm_timeout_s;
  cfg.key_prefix = prefix;
  StormResult r = run_storm(t->endpoint, ranks, cfg);
  std::string dead = check_alive(t->endpoint, o.dialect, prefix + "/alive");
  if (!dead.empty()) {
    note(&t->info, "unresponsive after the " + std::to_string(ranks) + "-rank storm: " + dead);
  }
  return r;
}

// The repetition with the median ops/s (the lower one of the middle two for an even count),
// carrying every repetition's figure; a failed repetition wins, so errors are never hidden.
OpsResult median_ops(std::vector<OpsResult> runs) {
  for (auto& r : runs) {
    if (!r.error.empty()) return r;
  }
  std::vector<double> all;
  for (const auto& r : runs) all.push_back(r.ops_per_s);
  std::sort(runs.begin(), runs.end(),
            [](const OpsResult& a, const OpsResult& b) { return a.ops_per_s < b.ops_per_s; });
  OpsResult m = runs[(runs.size() - 1) / 2];
  m.all_ops_per_s = std::move(all);
  return m;
}

// The same for storms, by total time; a storm that did not finish counts as the slowest.
StormResult median_storm(std::vector<StormResult> runs) {
  std::vector<double> all;
  for (const auto& r : runs) all.push_back(r.status == "ok" ? r.total_s : -1);
  auto key = [](const StormResult& r) { return r.status == "ok" ? r.total_s : 1e300; };
  std::sort(runs.begin(), runs.end(),
            [&](const StormResult& a, const StormResult& b) { return key(a) < key(b); });
  StormResult m = runs[runs.size() / 2];
  m.all_total_s = std::move(all);
  return m;
}

}  // namespace

BenchReport run_bench(const BenchOptions& o) {
  BenchReport report;
  report.options = o;
  report.cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  report.fd_limit = rdzv::raise_fd_limit();
  report.load_before = loadavg();
  bool pin = o.pin && report.cpus >= 2 && o.target.empty();
  std::vector<Target> targets = start_servers(o, pin ? 0 : -1);
  report.pinned = pin && pin_generator(report.cpus);
  const std::string run = "/bench/" + std::to_string(::getpid());

  for (int clients : o.clients) {
    for (KeyMode mode : o.key_modes) {
      // runs[k][rep]: servers alternate within each repetition.
      std::vector<std::vector<OpsResult>> runs(targets.size());
      for (int rep = 0; rep < o.repeat; ++rep) {
        for (size_t k = 0; k < targets.size(); ++k) {
          std::string prefix = run + "/" + targets[k].info.name + "/c" + std::to_string(clients) +
                               "-" + key_mode_name(mode) + "-r" + std::to_string(rep);
          runs[k].push_back(ops_once(o, targets[k], clients, mode, prefix));
          print_ops_progress(targets[k], clients, mode, runs[k].back());
        }
      }
      OpsCell cell{clients, mode, {}};
      for (auto& r : runs) cell.results.push_back(median_ops(std::move(r)));
      report.ops.push_back(std::move(cell));
    }
  }

  for (int ranks : o.storms) {
    std::vector<std::vector<StormResult>> runs(targets.size());
    for (int rep = 0; rep < o.repeat; ++rep) {
      for (size_t k = 0; k < targets.size(); ++k) {
        std::string prefix = "/storm/" + std::to_string(::getpid()) + "-" + targets[k].info.name +
                             "-" + std::to_string(ranks) + "-r" + std::to_string(rep);
        runs[k].push_back(storm_once(o, report.fd_limit, &targets[k], ranks, prefix));
        print_storm_progress(targets[k], ranks, runs[k].back());
      }
    }
    StormCell cell{ranks, {}};
    for (auto& r : runs) cell.results.push_back(median_storm(std::move(r)));
    report.storms.push_back(std::move(cell));
  }

  for (auto& t : targets) {
    if (t.scraper) note(&t.info, t.scraper->stop());
    if (t.process) note(&t.info, t.process->stop());
    report.servers.push_back(t.info);
  }
  report.load_after = loadavg();
  return report;
}

}  // namespace cohort::bench

#include "options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <filesystem>
#include <sstream>

#include "wire.h"

#ifndef COHORT_TORCH_PYTHON
#define COHORT_TORCH_PYTHON "/usr/bin/python3"
#endif

namespace cohort::bench {
namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "1,2,4,8" -> {1,2,4,8}; "none" or "" -> {}.
std::vector<int> parse_counts(const std::string& list, const char* flag) {
  std::vector<int> out;
  if (list == "none") return out;
  for (const auto& item : split(list)) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v < 1) {
      throw CLI::ValidationError(flag, "'" + item + "' is not a positive integer");
    }
    out.push_back(v);
  }
  return out;
}

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, n)).parent_path().string();
}

}  // namespace

int parse_options(int argc, char** argv, BenchOptions* out) {
  CLI::App app{
      "store_bench: TCPStore load generator. Measures ops/s (SET+WAIT, GET, ADD cycles) and a "
      "rendezvous storm on cohortd and PyTorch 1.13's TCPStore server in the same run; prints a "
      "table, then one JSON line."};
  std::string clients = "1,2,4,8", keys = "distinct,shared", storms = "1000,10000";
  std::string servers = "cohortd,pytorch", dialect = "legacy";
  out->python = COHORT_TORCH_PYTHON;
  app.add_option("--clients", clients, "Client counts for the ops/s cells, or 'none'")
      ->capture_default_str();
  app.add_option("--keys", keys, "Key modes: distinct (own keys) and/or shared (same keys)")
      ->capture_default_str();
  app.add_option("--storm", storms, "Rank counts for the rendezvous storm, or 'none'")
      ->capture_default_str();
  app.add_option("--servers", servers,
                 "Servers to start and measure: cohortd, pytorch, cohortd-scraped (cohortd "
                 "serving Prometheus metrics, scraped every --scrape-interval)")
      ->capture_default_str();
  app.add_option("--scrape-interval", out->scrape_interval_s,
                 "Seconds between scrapes of cohortd-scraped's /metrics")
      ->capture_default_str()
      ->check(CLI::Range(0.01, 3600.0));
  app.add_option("--target", out->target,
                 "host:port of an already running server to measure instead (any dialect)");
  app.add_option("--dialect", dialect,
                 "legacy (1.13 numbering, no handshake) or current (VALIDATE + PING first; not "
                 "for PyTorch 1.13)")
      ->capture_default_str();
  app.add_option("--duration", out->duration_s, "Counted seconds per ops cell")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", out->warmup_s, "Uncounted seconds before each ops cell")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--threads", out->threads, "Generator threads for the ops cells")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--repeat", out->repeat,
                 "Runs per cell and server (servers alternate); the median is reported")
      ->capture_default_str()
      ->check(CLI::Range(1, 100));
  app.add_flag("--pin,!--no-pin", out->pin,
               "Servers on CPU 0, the generator on the other CPUs (2+ CPUs)");
  app.add_option("--value-bytes", out->value_bytes, "SET value size")
      ->capture_default_str()
      ->check(CLI::Range(1, 64 * 1024));  // each request must go out in one send()
  app.add_option("--storm-timeout", out->storm_timeout_s,
                 "Seconds before a storm counts as timeout")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--cohortd", out->cohortd, "cohortd binary (default: next to store_bench)");
  app.add_option("--python", out->python,
                 "Python whose torch serves the PyTorch side (1.13: legacy dialect; 2.x: its "
                 "libuv server, with --dialect current)")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    out->clients = parse_counts(clients, "--clients");
    out->storms = parse_counts(storms, "--storm");
    out->key_modes.clear();
    for (const auto& k : split(keys)) {
      if (k == "distinct") {
        out->key_modes.push_back(KeyMode::kDistinct);
      } else if (k == "shared") {
        out->key_modes.push_back(KeyMode::kShared);
      } else {
        throw CLI::ValidationError("--keys", "'" + k + "' is neither distinct nor shared");
      }
    }
    out->servers = split(servers);
    for (const auto& s : out->servers) {
      if (s != "cohortd" && s != "pytorch" && s != "cohortd-scraped") {
        throw CLI::ValidationError("--servers",
                                   "'" + s + "' is not cohortd, pytorch or cohortd-scraped");
      }
    }
    if (!out->target.empty()) out->servers = {"target"};
    if (out->servers.empty()) throw CLI::ValidationError("--servers", "no server to measure");
    if (dialect != "legacy" && dialect != "current") {
      throw CLI::ValidationError("--dialect", "'" + dialect + "' is neither legacy nor current");
    }
    out->dialect = parse_dialect(dialect);
    bool has_pytorch =
        std::find(out->servers.begin(), out->servers.end(), "pytorch") != out->servers.end();
    if (out->dialect == rdzv::Dialect::kCurrent && has_pytorch &&
        out->python == COHORT_TORCH_PYTHON) {
      // A 1.13 server reads VALIDATE as a SET with a ~1 GB key and stalls every client.
      throw CLI::ValidationError("--dialect",
                                 "the default --python is PyTorch 1.13, which speaks only the "
                                 "legacy dialect; give --python a PyTorch 2.x (its libuv "
                                 "server), or use --servers cohortd");
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help prints and succeeds; anything else is a usage error
  }
  if (out->cohortd.empty()) out->cohortd = self_dir() + "/cohortd";
  return -1;
}

}  // namespace cohort::bench

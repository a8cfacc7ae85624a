#include "options.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <filesystem>
#include <sstream>

#ifndef COHORT_TORCH2_PYTHON
#define COHORT_TORCH2_PYTHON ""
#endif

namespace cohort::bench {
namespace {

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  return std::filesystem::path(std::string(buf, static_cast<size_t>(n))).parent_path().string();
}

}  // namespace

int parse_storm_options(int argc, char** argv, StormBenchOptions* out) {
  CLI::App app{
      "storm_bench: the rendezvous storm at scale (every rank connects, ADDs its arrival, WAITs "
      "for the go), as 8-rank nodes whose ranks dial the store directly or through the node's "
      "relay (docs/RELAY.md), from several generator processes, in a fresh network namespace; "
      "prints a table, then one JSON line."};
  std::string ranks = "10000,19000,100000", servers = "cohortd,cohortd-1q,pytorch";
  std::string paths = "direct,relay", dialect = "current";
  out->python = COHORT_TORCH2_PYTHON;
  app.add_option("--ranks", ranks, "Rank counts")->capture_default_str();
  app.add_option("--ranks-per-node", out->ranks_per_node, "Ranks per simulated node")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--servers", servers,
                 "cohortd, cohortd-1q (one accept queue, as before --accept-queues), pytorch "
                 "(PyTorch 2.x's libuv server, direct only)")
      ->capture_default_str();
  app.add_option("--paths", paths, "direct and/or relay")->capture_default_str();
  app.add_option("--direct-max", out->direct_max,
                 "Skip direct storms of more ranks (the store's descriptors)")
      ->capture_default_str();
  app.add_option("--processes", out->processes, "Generator processes (0: as few as fit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--repeat", out->repeat, "Runs per cell (the median is reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 50));
  app.add_option("--timeout", out->timeout_s, "Seconds before a storm counts as timeout")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--somaxconn", out->somaxconn,
                 "Set net.core.somaxconn in the benchmark's namespace (0: its default)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app.add_flag("--netns,!--no-netns", out->netns,
               "Run in a fresh network namespace (needs root; its sysctls are its own)")
      ->capture_default_str();
  app.add_option("--dialect", dialect, "current (VALIDATE + PING first) or legacy")
      ->capture_default_str();
  app.add_option("--cohortd", out->cohortd, "cohortd binary (default: next to storm_bench)");
  app.add_option("--python", out->python, "PyTorch 2.x's Python, for the pytorch server")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
    out->ranks.clear();
    for (const auto& r : split(ranks)) {
      size_t used = 0;
      int v = 0;
      try {
        v = std::stoi(r, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != r.size() || v < 1) throw CLI::ValidationError("--ranks", "'" + r + "'");
      out->ranks.push_back(v);
    }
    out->servers = split(servers);
    for (const auto& s : out->servers)
      if (s != "cohortd" && s != "cohortd-1q" && s != "pytorch")
        throw CLI::ValidationError("--servers",
                                   "'" + s + "' is not cohortd, cohortd-1q or pytorch");
    out->paths = split(paths);
    for (const auto& p : out->paths)
      if (p != "direct" && p != "relay")
        throw CLI::ValidationError("--paths", "'" + p + "' is neither direct nor relay");
    if (dialect != "current" && dialect != "legacy")
      throw CLI::ValidationError("--dialect", "'" + dialect + "' is neither current nor legacy");
    out->dialect = dialect == "current" ? rdzv::Dialect::kCurrent : rdzv::Dialect::kLegacy;
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (out->cohortd.empty()) out->cohortd = self_dir() + "/cohortd";
  return -1;
}

}  // namespace cohort::bench

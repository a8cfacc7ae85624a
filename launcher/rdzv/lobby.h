// The lobby: one key per store (keys::lobby(), "cohort/lobby") where every node still waiting for
// its rendezvous says so, so that nodes waiting in different runs at one endpoint find each other
// within seconds and can say so: without --rdzv-id, nodes started with different scripts (or
// different run ids given by hand) would otherwise each wait out their join timeout saying only
// "still waiting".
//
// Each waiting node appends a line every few seconds (APPEND: no read-modify-write race); readers
// take the lines of the last kFresh seconds. Whoever finds the value over kTrimBytes replaces it
// with its fresh lines (COMPARE_SET against what it read, so a concurrent append is never lost:
// the trim then simply fails and waits for the next turn). Lines that do not parse (a foreign or
// hostile writer) are skipped. Pure functions: the store calls are the caller's.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cohort::launch::lobby {

// A line older than this (seconds) is a node that stopped waiting (its round formed, or it left).
inline constexpr double kFresh = 15.0;
// Above this size the value is cut down to its fresh lines.
inline constexpr size_t kTrimBytes = 64 * 1024;

struct Waiting {
  std::string run_id;  // the rendezvous it waits in
  std::string node;    // its node id (unique per agent)
  std::string host;
  std::string entry;   // the entry point's name ("train.py")
  std::string nnodes;  // "2:4"
  double since = 0;    // when it started waiting (seconds since the epoch)
  double at = 0;       // when it wrote this line
};

// One line (JSON, ending in '\n').
std::string encode(const Waiting& w);
// The lines of `value` that parse and were written within kFresh of `now`; the latest per node.
std::vector<Waiting> fresh(std::string_view value, double now);
// The waiting nodes of other runs than `run_id`, one per run (its earliest-waiting node).
std::vector<Waiting> other_runs(const std::vector<Waiting>& fresh_nodes, const std::string& run_id);
// When `value` is over kTrimBytes: what to replace it with (the fresh lines); else nullopt.
std::optional<std::string> trimmed(std::string_view value, double now);

}  // namespace cohort::launch::lobby

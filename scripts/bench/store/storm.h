// The rendezvous storm: N simulated ranks, one connection each, opened as fast as the generator
// can (non-blocking connects, so the server's accept backlog matters). Each rank sends
// ADD("<prefix>/arrived", 1) and, on the reply, WAIT("<prefix>/go"); the rank whose ADD returns N
// sends SET("<prefix>/go") first. Measured: first connect to last WAIT released.
//
// One thread, one epoll set. run_storm() is synchronous and not reentrant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/rdzv/codec.h"
#include "net.h"

namespace cohort::bench {

struct StormConfig {
  rdzv::Dialect dialect = rdzv::Dialect::kLegacy;
  double timeout_s = 60;   // the storm is abandoned (status "timeout") after this
  std::string key_prefix;  // unique per storm, so a reused server starts from zero
};

struct StormResult {
  std::string status = "ok";  // "ok", "timeout" or "error"
  std::string error;          // what failed, for "error" (and what was missing, for "timeout")
  int ranks = 0;
  int connected = 0, arrived = 0, released = 0;  // progress when it ended
  double issue_s = -1;              // time this generator took to call connect() N times
  double connect_s = -1;            // first connect to last connection established
  double arrive_s = -1;             // first connect to the ADD that returned N
  double total_s = -1;              // first connect to last WAIT released
  std::vector<double> all_total_s;  // every repetition's total (-1: not ok), when repeated
  double max_connect_ms = -1;       // slowest single connect (a dropped SYN shows up as >= 1000 ms)
};

StormResult run_storm(const Endpoint& ep, int ranks, const StormConfig& config);

}  // namespace cohort::bench

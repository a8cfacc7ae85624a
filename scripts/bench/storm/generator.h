// One generator process of the multi-process storm: a range of simulated nodes, each with its
// ranks, and (on the relay path) each node's StoreRelay, the one cohortrun's agent runs.
//
// Node i has its own loopback address (node_address()), from which its ranks (direct path) or its
// relay's link (relay path) reach the store, as on a real cluster each node has its own address.
#pragma once

#include <string>

#include "cohort/rdzv/codec.h"

namespace cohort::bench {

enum class StormPath { kDirect, kRelay };

struct GeneratorSpec {
  StormPath path = StormPath::kDirect;
  rdzv::Dialect dialect = rdzv::Dialect::kCurrent;
  std::string store_host = "127.0.0.1";
  int store_port = 0;
  int first_node = 0, nodes = 0, ranks_per_node = 8;
  int job_ranks = 0;  // all generators together
  std::string key_prefix;
  double timeout_s = 60;
};

// "127.a.b.c" for node i (never 127.0.0.x: the store is there).
std::string node_address(int node);

// Runs in a forked child. Protocol on its two pipes (one line each way):
//   child -> parent: "ready" once its relays are linked (or an "error ..." line);
//   parent -> child: one byte: go;
//   child -> parent: "ok <connected> <released> <all_connected_ns> <last_released_ns>
//                     <max_connect_ms>" or "error <text>", with every connection still open;
//   parent -> child: one byte: done (it closes everything and exits).
// Returns the process's exit status.
int run_generator(const GeneratorSpec& spec, int to_parent, int from_parent);

}  // namespace cohort::bench

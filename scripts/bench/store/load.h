// The ops/s load generator: C clients, each one connection with one request outstanding, cycling
// SET+WAIT, GET, ADD as real TCPStore clients do (a get() is a WAIT then a GET; SET has no reply,
// so its WAIT follows in the same write). All clients are driven by a few epoll threads on
// non-blocking sockets, so the generator costs little next to the server it measures.
//
// run_ops() is synchronous and not reentrant; it starts and joins its own threads.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cohort/rdzv/codec.h"
#include "net.h"

namespace cohort::bench {

enum class KeyMode {
  kDistinct,  // each client its own value key and counter
  kShared,    // every client the same value key and counter
};
const char* key_mode_name(KeyMode m);

struct OpsConfig {
  rdzv::Dialect dialect = rdzv::Dialect::kLegacy;
  double warmup_s = 0.5;    // run, not counted
  double duration_s = 2.0;  // counted
  int threads = 1;          // generator threads (clients are spread over them)
  size_t value_bytes = 64;  // SET value size
  std::string key_prefix;   // unique per cell, e.g. "/bench/<pid>/<cell>"
  pid_t server_pid = -1;    // when known, the server's CPU time is sampled over the window
};

struct OpsResult {
  std::string error;              // empty on success
  uint64_t requests = 0;          // replies completed in the window (SET counted with its WAIT)
  uint64_t cycles = 0;            // SET, WAIT+GET, ADD cycles completed in the window
  double seconds = 0;             // window length
  double ops_per_s = 0;           // requests / seconds
  double p50_us = 0, p99_us = 0;  // round trip of one write (SET+WAIT counts as one)
  double server_cpu = -1;         // server CPU seconds per second of window (1.0 = one core)
  // Share of that CPU spent in the kernel (system time): on loopback, mostly TCP's work for both
  // ends of each round trip, which no server code can save.
  double server_kernel_share = -1;
  double generator_cpu = 0;           // the same for this process
  std::vector<double> all_ops_per_s;  // every repetition's ops/s, when the cell was repeated
};

// Runs one cell: connects `clients` connections to `ep` (VALIDATE + PING first in the current
// dialect), drives them for warmup + duration, drains outstanding replies, closes. Failures
// (refused connect, a closed connection, a malformed reply) come back in OpsResult::error.
OpsResult run_ops(const Endpoint& ep, int clients, KeyMode mode, const OpsConfig& config);

}  // namespace cohort::bench

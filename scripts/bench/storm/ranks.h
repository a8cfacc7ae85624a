// The ranks of one generator process in a multi-process rendezvous storm: each rank opens one
// connection (to its node's relay, or to the store from its node's address), then as in
// store_bench's storm: VALIDATE+PING (current dialect), ADD("<prefix>/arrived", 1), and WAIT
// ("<prefix>/go"); the rank whose ADD returns the job's rank count SETs go first.
//
// One thread, one epoll set; run_ranks() is synchronous and not reentrant.
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cohort/rdzv/codec.h"

namespace cohort::bench {

struct RankTarget {
  sockaddr_storage dial{};  // where the rank connects
  socklen_t dial_len = 0;
  sockaddr_storage source{};  // the address it connects from (family AF_UNSPEC: the system's)
  socklen_t source_len = 0;
};

struct RanksConfig {
  rdzv::Dialect dialect = rdzv::Dialect::kCurrent;
  int job_ranks = 0;       // the whole storm's rank count (the ADD that returns it SETs go)
  std::string key_prefix;  // unique per storm
  std::chrono::steady_clock::time_point deadline;
};

struct RanksResult {
  std::string error;  // "" when every rank was released before the deadline
  int connected = 0, released = 0;
  std::chrono::steady_clock::time_point all_connected{}, last_released{};
  double max_connect_ms = 0;  // slowest single connect (a dropped SYN: >= 1000 ms)
};

// Runs the storm of `ranks`; calls while_open(result) with every connection still open (so the
// store's connection count can be read), then closes them and returns the result.
RanksResult run_ranks(const std::vector<RankTarget>& ranks, const RanksConfig& config,
                      const std::function<void(const RanksResult&)>& while_open);

}  // namespace cohort::bench

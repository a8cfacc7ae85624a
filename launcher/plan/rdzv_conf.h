// --rdzv-conf: torchrun's rendezvous settings ("k=v,k=v"), parsed once.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace cohort::launch {

struct RdzvConf {
  std::chrono::milliseconds join_timeout{std::chrono::seconds(600)};
  std::chrono::milliseconds last_call_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds close_timeout{std::chrono::seconds(30)};
  std::chrono::milliseconds keep_alive_interval{std::chrono::seconds(5)};
  int keep_alive_max_attempt = 3;
  // `timeout` / `read_timeout`: how long a node waits for the records of its round's peers.
  std::chrono::milliseconds node_info_timeout{std::chrono::seconds(60)};
  std::optional<bool> is_host;  // torchrun's is_host: whether this agent hosts the c10d store

  // A node that stops beating for this long is lost.
  std::chrono::milliseconds liveness_timeout() const {
    return keep_alive_interval * keep_alive_max_attempt;
  }
};

// Parses `text` (timeouts in seconds, fractions allowed; booleans as 1/0, true/false, yes/no).
// torchrun's keys that cohortrun does not need (store_type, heartbeat_timeout) are accepted and
// ignored. Throws UsageError naming the bad item.
RdzvConf parse_rdzv_conf(const std::string& text);

}  // namespace cohort::launch

// The store server's metrics in Prometheus' text format: what StoreServer::metrics_text() and
// cohortd's --metrics-port serve. The server gathers a ServerMetricsView on its loop; rendering
// reads nothing else.
//
//   cohortd_info{version}                           1
//   cohortd_connections{dialect,authenticated}      open now; dialect "unknown" before a request
//   cohortd_connections_accepted_total, cohortd_connections_refused_total (at accept: a limit)
//   cohortd_connections_closed_total{reason}        limit, memory, silent, unauthenticated
//   cohortd_connection_buffered_bytes               unsent replies and unread requests, all
//   cohortd_request_duration_seconds{op}            histogram from read to reply (a WAIT: until
//                                                   woken); its _count is the requests answered
//   cohortd_requests_rejected_total{reason}         requests that closed their connection
//   cohortd_auth_failures_total{reason}             no_token, wrong_token
//   cohortd_parked_waits, cohortd_keys, cohortd_stored_bytes (keys and values),
//   cohortd_queued_bytes (queued items), cohortd_max_memory_bytes (--max-memory, 0: none)
//   cohortd_shared_waits, cohortd_relay_links, cohortd_relay_channels (docs/RELAY.md)
//   with --data-dir: cohortd_log_bytes, cohortd_log_written_bytes_total,
//   cohortd_log_compactions_total, cohortd_log_fsync_lag_seconds, cohortd_log_replayed_records
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "cohort/rdzv/server.h"
#include "server/server_counters.h"
#include "server/store_log.h"
#include "server/store_state.h"

namespace cohort::rdzv {

struct ServerMetricsView {
  const StoreServerStats* stats = nullptr;
  const ServerCounters* counters = nullptr;
  const StoreState* state = nullptr;
  const StoreLog* journal = nullptr;  // null without --data-dir
  uint64_t max_memory = 0;            // --max-memory (0: none)
  struct Connection {
    std::string_view dialect;
    bool authenticated = false;
  };
  std::vector<Connection> connections;
};

std::string render_server_metrics(const ServerMetricsView& view);

}  // namespace cohort::rdzv

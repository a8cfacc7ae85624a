#include "server/server_metrics.h"

#include <map>
#include <utility>

#include "cohort/base/prometheus.h"
#include "cohort/base/version.h"

namespace cohort::rdzv {

std::string render_server_metrics(const ServerMetricsView& v) {
  prom::Exposition out;
  const StoreServerStats& s = *v.stats;
  auto n = [](auto x) { return static_cast<double>(x); };

  out.family("cohortd_info", "gauge", "The store server's version");
  out.sample("cohortd_info", {{"version", cohort::version()}}, 1);

  std::map<std::pair<std::string_view, bool>, int> open;
  for (std::string_view d : {"current", "legacy", "unknown"})
    for (bool a : {true, false}) open[{d, a}] = 0;
  for (const auto& c : v.connections) ++open[{c.dialect, c.authenticated}];
  out.family("cohortd_connections", "gauge",
             "Open client connections by dialect and whether they passed the token handshake "
             "(or needed none)");
  for (const auto& [key, count] : open)
    out.sample("cohortd_connections",
               {{"dialect", key.first}, {"authenticated", key.second ? "true" : "false"}}, count);

  out.family("cohortd_connections_accepted_total", "counter", "Connections accepted");
  out.sample("cohortd_connections_accepted_total", {}, n(s.accepted));
  out.family("cohortd_connections_refused_total", "counter",
             "Connections closed at accept for --max-connections or "
             "--max-connections-per-address");
  out.sample("cohortd_connections_refused_total", {}, n(s.refused));
  out.family("cohortd_connections_closed_total", "counter",
             "Connections the server closed, by reason: a limit or a bad request (limit), "
             "unsent or buffered bytes (memory), a first-request or idle timeout (silent), no or "
             "a wrong token (unauthenticated)");
  const uint64_t limit_only =
      s.closed_for_limit >= s.closed_for_memory ? s.closed_for_limit - s.closed_for_memory : 0;
  out.sample("cohortd_connections_closed_total", {{"reason", "limit"}}, n(limit_only));
  out.sample("cohortd_connections_closed_total", {{"reason", "memory"}}, n(s.closed_for_memory));
  out.sample("cohortd_connections_closed_total", {{"reason", "silent"}}, n(s.closed_silent));
  out.sample("cohortd_connections_closed_total", {{"reason", "unauthenticated"}},
             n(s.refused_unauthenticated));
  out.family("cohortd_connection_buffered_bytes", "gauge",
             "Replies not yet sent and requests not yet run, all connections together");
  out.sample("cohortd_connection_buffered_bytes", {}, n(s.connection_bytes));

  out.family("cohortd_request_duration_seconds", "histogram",
             "Requests answered, by operation, from the read of their bytes to their reply (a "
             "parked WAIT or BARRIER: until it was woken)");
  for (size_t i = 0; i < kOpCount; ++i) {
    const Op op = static_cast<Op>(i);
    out.histogram("cohortd_request_duration_seconds", {{"op", op_name(op)}},
                  v.counters->latency(op));
  }
  out.family("cohortd_requests_rejected_total", "counter",
             "Requests refused, each closing its connection, by reason");
  for (size_t i = 0; i < kRejectReasonCount; ++i) {
    const auto r = static_cast<RejectReason>(i);
    out.sample("cohortd_requests_rejected_total", {{"reason", reject_reason_name(r)}},
               n(v.counters->rejects(r)));
  }
  out.family("cohortd_auth_failures_total", "counter",
             "Connections refused for no token handshake or a wrong token");
  for (auto r : {RejectReason::kNoToken, RejectReason::kWrongToken})
    out.sample("cohortd_auth_failures_total", {{"reason", reject_reason_name(r)}},
               n(v.counters->rejects(r)));

  out.family("cohortd_parked_waits", "gauge", "WAIT and BARRIER requests parked now");
  out.sample("cohortd_parked_waits", {}, n(s.parked_waits));
  out.family("cohortd_shared_waits", "gauge",
             "WAITs of relayed workers sharing one parked wait (docs/RELAY.md)");
  out.sample("cohortd_shared_waits", {}, n(s.sharing_waits));
  out.family("cohortd_relay_links", "gauge", "Relay links open now (one per relaying node)");
  out.sample("cohortd_relay_links", {}, n(s.links));
  out.family("cohortd_relay_channels", "gauge",
             "Workers' connections carried by relay links now (also in cohortd_connections)");
  out.sample("cohortd_relay_channels", {}, n(s.channels));
  out.family("cohortd_keys", "gauge", "Keys in the store (queues not counted)");
  out.sample("cohortd_keys", {}, n(s.keys));
  out.family("cohortd_stored_bytes", "gauge", "Bytes of the store's keys and values");
  out.sample("cohortd_stored_bytes", {}, n(v.state->key_value_bytes()));
  out.family("cohortd_queued_bytes", "gauge",
             "Bytes of the items in the store's queues (QUEUE_PUSH), with their queues' keys");
  out.sample("cohortd_queued_bytes", {}, n(v.state->queued_bytes()));
  out.family("cohortd_max_memory_bytes", "gauge",
             "--max-memory: the most bytes of keys, values and queued items together (0: no cap)");
  out.sample("cohortd_max_memory_bytes", {}, n(v.max_memory));

  if (v.journal) {
    const StoreLog& j = *v.journal;
    out.family("cohortd_log_bytes", "gauge", "Size of store.log in --data-dir");
    out.sample("cohortd_log_bytes", {}, n(j.size()));
    out.family("cohortd_log_written_bytes_total", "counter",
               "Bytes written to store.log, compactions included");
    out.sample("cohortd_log_written_bytes_total", {}, n(j.bytes_written()));
    out.family("cohortd_log_compactions_total", "counter", "Compactions of store.log finished");
    out.sample("cohortd_log_compactions_total", {}, n(j.compactions()));
    out.family("cohortd_log_fsync_lag_seconds", "gauge",
               "How long the oldest write not yet handed to fdatasync has waited (0: none)");
    out.sample("cohortd_log_fsync_lag_seconds", {},
               std::chrono::duration<double>(j.unsynced_for()).count());
    out.family("cohortd_log_replayed_records", "gauge", "Log records replayed at start-up");
    out.sample("cohortd_log_replayed_records", {}, n(s.replayed_records));
  }
  return out.text();
}

}  // namespace cohort::rdzv

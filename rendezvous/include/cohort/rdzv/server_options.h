// cohort::rdzv::StoreServerOptions: what a store server is told (address, limits, timeouts,
// authentication, persistence), and the fsync policy of a persistent store. Its own header, so
// that the layers below the server (protocol handler, session, store log) can take the options
// without depending on the server itself (server.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cohort/rdzv/auth.h"
#include "cohort/rdzv/codec.h"

namespace cohort::rdzv {

// When a persistent store (data_dir) calls fsync(2); see store_log.h.
enum class FsyncPolicy { kAlways, kInterval, kNever };
FsyncPolicy parse_fsync_policy(const std::string& text);  // throws UsageError

struct StoreServerOptions {
  std::string host = "0.0.0.0";               // an IPv4 or IPv6 literal, or a name to resolve
  uint16_t port = 29500;                      // 0 picks a free port (see StoreServer::port())
  Limits limits;                              // per request: key bytes, value bytes, keys
  uint64_t max_request_bytes = 256ull << 20;  // one whole request (MULTI_SET can be large)
  size_t max_connections = 100000;            // further connections are accepted and closed at once
  // Listening sockets on the port (SO_REUSEPORT), each with an accept queue as long as the system
  // allows (net.core.somaxconn); 0: enough for about 32,768 connections queued, at most 8.
  int accept_queues = 0;
  // Open connections from one client address; more are closed at accept (0: no limit). Bounds
  // what one host can hold, descriptors included, however its connections behave.
  size_t max_connections_per_address = 4096;
  size_t max_waiters = 1000000;  // parked WAITs; one more closes that connection
  // Bytes one connection may have waiting to be sent (replies, 1.13 watch notifications). Its
  // requests are not executed while it has this much unsent (a pipelining client that reads
  // slowly is slowed down, not closed); a notification that would take it past the bound closes
  // it, since a client that does not read its notifications would otherwise grow without end.
  // Requests buffered behind a parked WAIT or unsent replies are not read past this bound either.
  uint64_t max_unsent_bytes = 64ull << 20;
  // All connections' unsent and buffered bytes together: over it, the connection holding the
  // most is closed with a log line. Bounds what slow readers cost however many there are.
  uint64_t connection_memory_budget = 1ull << 30;
  // The store's keys, values and queued items together, in bytes (0: no cap), as Redis's
  // maxmemory (with noeviction) and etcd's quota: a write that would take them past it is
  // refused by closing its connection, with a log line naming this flag (neither TCPStore dialect
  // has an error reply; PyTorch's clients raise at their next request). Reads go on, deletes make
  // room. A store restored from --data-dir may start above it; it takes writes again once under.
  uint64_t max_memory = 0;
  // A request begun but not completed within this time closes its connection (a slow client
  // cannot hold a connection slot with half a request). Idle connections are fine. 0: no limit.
  std::chrono::milliseconds request_timeout{std::chrono::seconds(30)};
  // When set, every connection must prove it knows this token (auth.h) before anything else,
  // except those from `allow_unauthenticated` networks (PyTorch's clients cannot authenticate).
  std::string auth_token;
  std::vector<auth::Cidr> allow_unauthenticated;
  // A connection that must authenticate and has not within this time is closed (0: no limit).
  std::chrono::milliseconds handshake_timeout{std::chrono::seconds(10)};
  // A connection that need not authenticate and has completed no request within this time is
  // closed with a log line (0: no limit): connections that never speak cannot hold descriptors
  // and connection slots for ever. Connections that have spoken are kept however long they stay
  // idle (see idle_timeout): PyTorch's clients hold theirs idle for a whole job and do not
  // reconnect. A silent connection is also kept while another connection from its address has
  // spoken: PyTorch 1.13's TCPStore opens a callback connection beside its first one that stays
  // silent unless watch_key is called, and its callback thread spins on a core once that
  // connection is closed.
  std::chrono::milliseconds first_request_timeout{std::chrono::seconds(30)};
  // A connection with nothing parked (no WAIT, no 1.13 watch, nothing unsent or buffered) from
  // which nothing has been read for this long is closed (0, the default: never). Only for stores
  // whose clients reconnect: PyTorch's TCPStore clients stay silent for hours between requests
  // and never reconnect, so a job of theirs would fail at its next store request.
  std::chrono::milliseconds idle_timeout{0};
  // Persistence: keys, counters and tagged replies survive a restart with the same directory.
  // Empty: in memory only.
  std::string data_dir;
  FsyncPolicy fsync = FsyncPolicy::kInterval;
  std::chrono::milliseconds fsync_interval{100};
  // Damage in the middle of store.log: cut it off (after a copy) instead of refusing to start.
  bool accept_log_damage = false;
};

}  // namespace cohort::rdzv

// cohort::rdzv::StoreServer: the store server (cohortd's core, also embedded in cohortrun).
//
// Speaks both TCPStore dialects (codec.h), told apart per connection by its first bytes. One Asio
// event loop; every connection is parsed as a stream, so a client that sends half a request delays
// nobody else. A request over a limit closes that connection with a log line naming the limit; the
// server and every other client carry on.
//
// Thread safety: construct, query and stop() on the loop's thread (or before run()). For a server
// on a thread of its own, use StoreServerThread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "cohort/rdzv/server_options.h"

namespace asio {
class io_context;
}

namespace cohort::rdzv {

struct StoreServerStats {
  size_t connections = 0;  // open TCP connections now (a relay link counts once)
  size_t links = 0;        // open relay links (docs/RELAY.md)
  size_t channels = 0;     // workers' connections carried by them
  uint64_t links_opened = 0, channels_opened = 0;  // since start
  size_t sharing_waits = 0;  // WAITs that share another's parked wait (a link's channels)
  int accept_queues = 0, accept_queue_length = 0;  // listening sockets, each one's backlog
  uint64_t accepted = 0;                           // since start
  uint64_t refused = 0;  // closed at accept: max_connections or max_connections_per_address
  uint64_t closed_for_limit = 0;         // a limit, a malformed request, or --request-timeout
  uint64_t closed_for_memory = 0;        // --max-unsent-bytes or --connection-memory-budget (also
                                         // counted in closed_for_limit)
  uint64_t connection_bytes = 0;         // unsent and buffered, all connections, now
  uint64_t refused_unauthenticated = 0;  // no token, or a wrong one
  // Closed at first_request_timeout or at idle_timeout.
  uint64_t closed_silent = 0;
  size_t replayed_records = 0;  // from the data directory at start-up
  size_t parked_waits = 0;
  int64_t keys = 0;
};

class StoreServer {
 public:
  // Binds and listens at once; throws cohort::Error naming the address and the system error.
  // `io` must outlive the server; nothing is served until io.run().
  StoreServer(asio::io_context& io, StoreServerOptions options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  // The bound port (the real one when options.port was 0) and "host:port" as printed.
  uint16_t port() const;
  std::string address() const;

  // Stops accepting and closes every connection; io.run() then returns once handlers drain.
  void stop();

  StoreServerStats stats() const;
  // The server's metrics in Prometheus' text format (the families are listed in
  // rendezvous/server_metrics.h).
  std::string metrics_text() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

// A StoreServer on its own thread (named "cohort-store"), for processes without an event loop
// (workers hosting a store, tests). The constructor returns once the server listens (or throws
// like StoreServer's); the destructor stops it and joins the thread. Thread-safe.
class StoreServerThread {
 public:
  explicit StoreServerThread(StoreServerOptions options);
  ~StoreServerThread();
  StoreServerThread(const StoreServerThread&) = delete;
  StoreServerThread& operator=(const StoreServerThread&) = delete;

  uint16_t port() const { return port_; }
  std::string address() const { return address_; }
  StoreServerStats stats() const;
  std::string metrics_text() const;
  void stop();

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
  uint16_t port_ = 0;
  std::string address_;
  std::thread thread_;
};

}  // namespace cohort::rdzv

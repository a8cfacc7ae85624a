// cohort::rdzv::StoreRelay: a node's store relay (docs/RELAY.md). The workers of a node connect
// to it as they would to the store (it is their MASTER_ADDR:MASTER_PORT); it carries each of
// their connections as a channel of one relay link to cohortd (relay_wire.h), which runs for
// every channel the session a direct connection would get. The relay reads no request: it moves
// bytes, so both TCPStore dialects, the token handshake and every operation behave exactly as
// against the store.
//
// Only local clients are accepted (their address is the relay's own, or loopback): cohortd
// treats a channel as coming from the link's address, which a remote host must not borrow.
// When the link is lost (cohortd gone, the network cut) the relay closes every worker connection
// and its listener, so its workers fail as they would on losing the store itself.
//
// Thread safety: construct, query and stop() on the loop's thread (or before run()); for a relay
// on a thread of its own, StoreRelayThread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "cohort/error.h"

namespace asio {
class io_context;
}

namespace cohort::rdzv {

// The relay cannot work with this store (not a cohortd that knows relay links, unreachable, no
// listening address): the caller gives its workers the store's own address.
class RelayUnavailable : public virtual Error {
 public:
  explicit RelayUnavailable(const std::string& what) : Error(what) {}
};

struct StoreRelayOptions {
  std::string store_host;  // the workers' store
  int store_port = 0;
  // Where workers connect: "" = the link's local address (the address that routes to the store,
  // which is what a direct worker connection would come from). Port 0: a free one.
  std::string listen_host;
  int listen_port = 0;
  // The link's own address ("": the system's choice). Benchmarks simulating many nodes on one
  // machine give each relay its node's address.
  std::string source_host;
  // Connecting the link and its hello, all attempts together (refused connections are retried).
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(10)};
  // Worker connections at once; more are closed at accept with a log line.
  size_t max_clients = 4096;
};

struct StoreRelayStats {
  size_t clients = 0;       // open now
  uint64_t accepted = 0;    // since start
  uint64_t refused = 0;     // not local, or over max_clients
  uint64_t bytes_up = 0;    // workers -> store, payload
  uint64_t bytes_down = 0;  // store -> workers, payload
  bool link_up = false;
  std::string link_lost_reason;  // "" while up
};

class StoreRelay {
 public:
  // Connects the link (blocking, up to options.connect_timeout) and listens. Throws
  // RelayUnavailable naming the store and what failed. `io` must outlive the relay; nothing is
  // relayed until io.run().
  StoreRelay(asio::io_context& io, StoreRelayOptions options);
  ~StoreRelay();
  StoreRelay(const StoreRelay&) = delete;
  StoreRelay& operator=(const StoreRelay&) = delete;

  // Where workers connect.
  const std::string& host() const;
  uint16_t port() const;
  // "host:port" of the store it relays to.
  const std::string& store_address() const;

  // Runs on the loop once the link is lost, with why; the relay has closed everything by then.
  void on_link_lost(std::function<void(const std::string& why)> fn);
  // Closes the listener, every worker connection and the link.
  void stop();
  StoreRelayStats stats() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

// A StoreRelay on its own thread ("cohort-relay"). The constructor returns once the relay
// listens (or throws like StoreRelay's); the destructor stops it and joins. Thread-safe.
class StoreRelayThread {
 public:
  explicit StoreRelayThread(StoreRelayOptions options);
  ~StoreRelayThread();
  StoreRelayThread(const StoreRelayThread&) = delete;
  StoreRelayThread& operator=(const StoreRelayThread&) = delete;

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  // `fn` runs on the relay's thread.
  void on_link_lost(std::function<void(const std::string& why)> fn);
  StoreRelayStats stats() const;
  void stop();

 private:
  struct Loop;
  std::unique_ptr<Loop> loop_;
  std::string host_;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace cohort::rdzv

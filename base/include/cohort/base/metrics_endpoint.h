// MetricsEndpoint: a small HTTP/1.1 server on the owner's Asio loop that answers
// `GET /metrics` with the text its owner renders at that moment (Prometheus' text format, see
// prometheus.h), and `GET /healthz` with "ok". Every reply closes its connection; a scrape every
// few seconds needs no more.
//
// It runs on the owner's loop so that rendering reads the owner's state without locks; rendering
// is the only work a scrape puts on that loop, so it must cost little (the store's counters are
// kept as they change). A client gets 10 s and 8 KiB for its request. At most 64 connections are
// open at once: a newcomer beyond that closes the oldest, so clients that send nothing can delay
// nobody's scrape, only lose their own place. Out of descriptors, accepting is retried every
// 50 ms, never in a spin.
//
// Thread safety: construct, use and destroy on the loop's thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace asio {
class io_context;
}

namespace cohort {

struct MetricsAddress {
  std::string host;  // "" when off
  int port = -1;     // -1 when off; 0 picks a free port
  bool enabled() const { return port >= 0; }
};

// Reads --metrics-port and --metrics-addr into one address: `metrics_addr` ("host:port", the
// port may be 0) wins; else `metrics_port` (-1: off) on `default_host`. Throws UsageError naming
// the flag when either is not valid.
MetricsAddress metrics_address(const std::string& metrics_addr, int metrics_port,
                               const std::string& default_host);

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;
  // Binds and listens at once; throws IoError naming the address and the system's error.
  MetricsEndpoint(asio::io_context& io, const MetricsAddress& address, Render render);
  ~MetricsEndpoint();  // closes the listener and every open connection
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const;
  // "http://host:port/metrics", as a log line prints it.
  std::string url() const;

 private:
  class Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace cohort

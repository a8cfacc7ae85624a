// Listener: the store server's listening sockets and its accept loop.
//
// A storm of connections (every rank of a big job dialling at once) overflows an accept queue
// faster than one loop empties it, and every connection the kernel drops then waits out a SYN
// retransmit (1 s, then 3 s more). The queue is as long as the listen backlog, which the kernel
// caps at net.core.somaxconn (4096 by default). So the backlog asked for is the largest, and
// where somaxconn keeps the queue short, several sockets listen on the port with SO_REUSEPORT:
// the kernel spreads connections over their queues, one loop accepts from all of them
// (docs/RELAY.md §1 has the measurements). A port that something already holds is still refused:
// the port is first bound without SO_REUSEPORT, which fails as it always did.
//
// Thread safety: the loop's thread only.
#pragma once

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <memory>
#include <vector>

#include "cohort/base/accept_failures.h"

namespace spdlog {
class logger;
}

namespace cohort::rdzv {

class Listener {
 public:
  using OnAccept = std::function<void(asio::ip::tcp::socket)>;

  // Listens on `ep` with `queues` sockets (0: as many as bring the accept queues to about 32,768
  // connections, at most 8). Throws cohort::Error naming the address and the system's error.
  Listener(asio::io_context& io, const asio::ip::tcp::endpoint& ep, int queues,
           std::shared_ptr<spdlog::logger> log);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Accepts until stop(); `on_accept` runs on the loop for each connection.
  void start(OnAccept on_accept);
  void stop();

  uint16_t port() const { return port_; }
  int queues() const { return static_cast<int>(acceptors_.size()); }
  // Each queue's length: the backlog asked for, as the kernel caps it (net.core.somaxconn).
  int queue_length() const { return queue_length_; }

 private:
  void accept_on(size_t i);

  std::shared_ptr<spdlog::logger> log_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::vector<std::unique_ptr<asio::steady_timer>> retry_timers_;
  std::shared_ptr<bool> stopped_ = std::make_shared<bool>(false);
  OnAccept on_accept_;
  AcceptFailures failures_{"accept failed"};  // every queue's
  uint16_t port_ = 0;
  int queue_length_ = 0;
};

// net.core.somaxconn of this network namespace (4096, the kernel's default, when unreadable).
int system_somaxconn();

}  // namespace cohort::rdzv

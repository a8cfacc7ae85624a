#include "server/listener.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <asio/ip/v6_only.hpp>
#include <climits>
#include <fstream>

#include "cohort/error.h"

namespace cohort::rdzv {
namespace {

using asio::ip::tcp;

// About this many connections may wait in the accept queues together by default.
constexpr int kQueuedConnections = 32768;
constexpr int kMaxQueues = 8;

std::string describe(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return (ep.address().is_v6() ? "[" + host + "]" : host) + ":" + std::to_string(ep.port());
}

[[noreturn]] void fail(const tcp::endpoint& ep, const std::error_code& ec) {
  throw Error("cannot listen on " + describe(ep) + ": " + ec.message() +
              (ec == asio::error::address_in_use
                   ? " (another process holds that port; choose another, or port 0 for a free one)"
                   : ""));
}

std::unique_ptr<tcp::acceptor> open_acceptor(asio::io_context& io, const tcp::endpoint& ep,
                                             bool reuse_port, std::error_code& ec) {
  auto a = std::make_unique<tcp::acceptor>(io);
  a->open(ep.protocol(), ec);
  // Asio opens without SOCK_CLOEXEC: a program this process starts (cohortrun's workers, a
  // libcohort worker's children) must not hold the port.
  if (!ec) ::fcntl(a->native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) a->set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec && ep.address().is_v6()) a->set_option(asio::ip::v6_only(false), ec);
  if (!ec && reuse_port) {
    const int one = 1;
    if (::setsockopt(a->native_handle(), SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) != 0)
      ec = std::error_code(errno, std::system_category());
  }
  if (!ec) a->bind(ep, ec);
  // The kernel caps the backlog at net.core.somaxconn: ask for the most and let it decide.
  if (!ec) a->listen(INT_MAX, ec);
  return a;
}

}  // namespace

int system_somaxconn() {
  std::ifstream f("/proc/sys/net/core/somaxconn");
  int v = 0;
  f >> v;
  return f && v > 0 ? v : 4096;
}

Listener::Listener(asio::io_context& io, const tcp::endpoint& ep, int queues,
                   std::shared_ptr<spdlog::logger> log)
    : log_(std::move(log)) {
  queue_length_ = system_somaxconn();
  if (queues <= 0) {
    queues = std::clamp((kQueuedConnections + queue_length_ - 1) / queue_length_, 1, kMaxQueues);
  }
  // First without SO_REUSEPORT: a port something holds is refused, as it always was.
  std::error_code ec;
  auto first = open_acceptor(io, ep, /*reuse_port=*/false, ec);
  if (ec) fail(ep, ec);
  port_ = first->local_endpoint().port();
  if (queues == 1) {
    acceptors_.push_back(std::move(first));
  } else {
    // The port is free and now known (it may have been 0): the group takes it. Another process
    // could take it in between; then this fails as an address in use.
    first->close(ec);
    const tcp::endpoint bound(ep.address(), port_);
    for (int i = 0; i < queues; ++i) {
      acceptors_.push_back(open_acceptor(io, bound, /*reuse_port=*/true, ec));
      if (ec) fail(bound, ec);
    }
  }
  for (size_t i = 0; i < acceptors_.size(); ++i)
    retry_timers_.push_back(std::make_unique<asio::steady_timer>(io));
}

void Listener::start(OnAccept on_accept) {
  on_accept_ = std::move(on_accept);
  for (size_t i = 0; i < acceptors_.size(); ++i) accept_on(i);
}

void Listener::stop() {
  *stopped_ = true;
  // The callback may hold the listener's owner (StoreServer's shared Impl): keeping it past stop()
  // would be a cycle that nothing frees.
  on_accept_ = nullptr;
  std::error_code ignored;
  for (auto& a : acceptors_) a->close(ignored);
  for (auto& t : retry_timers_) t->cancel();
}

void Listener::accept_on(size_t i) {
  // The handlers hold `stopped`, not the listener, whose owner may be gone by the time they run.
  acceptors_[i]->async_accept([this, i, stopped = stopped_](std::error_code ec, tcp::socket s) {
    if (*stopped || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of descriptors: accepting again at once would spin; retry shortly. Said a line a
      // second at most: every queue fails every 50 ms for as long as the storm lasts.
      if (auto line = failures_.failed(ec.message())) log_->warn("{}", *line);
      retry_timers_[i]->expires_after(std::chrono::milliseconds(50));
      retry_timers_[i]->async_wait([this, i, stopped](std::error_code e) {
        if (!e && !*stopped) accept_on(i);
      });
      return;
    }
    if (auto line = failures_.accepted()) log_->warn("{}", *line);
    // A copy: the callback may stop the listener, which drops on_accept_.
    const OnAccept on_accept = on_accept_;
    on_accept(std::move(s));
    if (!*stopped) accept_on(i);
  });
}

}  // namespace cohort::rdzv

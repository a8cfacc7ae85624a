#include "cohort/base/metrics_endpoint.h"

#include <fcntl.h>

#include <asio/ip/tcp.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <chrono>
#include <map>

#include "cohort/base/net.h"
#include "cohort/base/prometheus.h"
#include "cohort/error.h"

namespace cohort {
namespace {

using asio::ip::tcp;

constexpr size_t kMaxRequestBytes = 8 * 1024;
// Connections open at once. At the bound a newcomer is not turned away: the oldest connection
// gives way. A scraper's connection lives milliseconds, so it is never the oldest for long, while
// a client that sends nothing is closed to make room: 64 silent connections (re-opened as they
// were closed) refused every scrape (issue 27).
constexpr size_t kMaxConnections = 64;
constexpr auto kRequestTimeout = std::chrono::seconds(10);
// Accepting failed (out of descriptors: EMFILE, ENFILE): accepting again at once fails the same
// way and spins a core (94 % measured), so wait this long first, as the store's acceptor does.
constexpr auto kAcceptRetry = std::chrono::milliseconds(50);

std::string response(int code, std::string_view reason, std::string_view content_type,
                     std::string_view body) {
  std::string r = "HTTP/1.1 " + std::to_string(code) + " " + std::string(reason) + "\r\n";
  r += "Content-Type: " + std::string(content_type) + "\r\n";
  r += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  r += "Connection: close\r\n\r\n";
  r += body;
  return r;
}

// The reply to a whole request head (its first line is all that matters here).
std::string answer(std::string_view head, const MetricsEndpoint::Render& render) {
  const size_t eol = head.find("\r\n");
  std::string_view line = head.substr(0, eol);
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos) {
    return response(400, "Bad Request", "text/plain", "bad request line\n");
  }
  std::string_view method = line.substr(0, sp1);
  std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  target = target.substr(0, target.find('?'));
  if (method != "GET") {
    return response(405, "Method Not Allowed", "text/plain", "only GET is served\n");
  }
  if (target == "/metrics") return response(200, "OK", prom::kContentType, render());
  if (target == "/healthz") return response(200, "OK", "text/plain", "ok\n");
  if (target == "/") {
    return response(200, "OK", "text/plain", "metrics at /metrics, health at /healthz\n");
  }
  return response(404, "Not Found", "text/plain", "not found; metrics are at /metrics\n");
}

}  // namespace

MetricsAddress metrics_address(const std::string& metrics_addr, int metrics_port,
                               const std::string& default_host) {
  MetricsAddress a;
  if (!metrics_addr.empty()) {
    HostPort hp = parse_host_port(metrics_addr, -1);
    if (hp.port < 0 || hp.port > 65535) {
      throw UsageError("--metrics-addr " + metrics_addr +
                       ": give HOST:PORT (port 0 picks a free one)");
    }
    a.host = hp.host.empty() ? default_host : hp.host;
    a.port = hp.port;
    return a;
  }
  if (metrics_port < -1 || metrics_port > 65535) {
    throw UsageError("--metrics-port " + std::to_string(metrics_port) +
                     ": give a port from 0 to 65535 (0 picks a free one)");
  }
  if (metrics_port >= 0) {
    a.host = default_host;
    a.port = metrics_port;
  }
  return a;
}

class MetricsEndpoint::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(asio::io_context& io, const MetricsAddress& address, Render render)
      : acceptor_(io), retry_(io), render_(std::move(render)) {
    std::error_code ec;
    auto addr = asio::ip::make_address(strip_brackets(address.host), ec);
    if (ec) {
      tcp::resolver resolver(io);
      auto results = resolver.resolve(address.host, std::to_string(address.port), ec);
      if (ec || results.empty()) {
        throw IoError("metrics endpoint: cannot resolve " + address.host + ": " + ec.message());
      }
      addr = results.begin()->endpoint().address();
    }
    tcp::endpoint ep(addr, static_cast<uint16_t>(address.port));
    acceptor_.open(ep.protocol(), ec);
    // Asio opens and accepts without SOCK_CLOEXEC: the processes this one starts (cohortrun's
    // workers) must not hold the port or a scraper's connection.
    if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && ep.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      throw IoError("metrics endpoint: cannot listen on " +
                    format_host_port(address.host, address.port) + ": " + ec.message() +
                    (ec == asio::error::address_in_use ? " (choose another --metrics-port)" : ""));
    }
    port_ = acceptor_.local_endpoint().port();
    host_ = address.host;
  }

  void start() { accept(); }

  void stop() {
    std::error_code ignored;
    acceptor_.close(ignored);
    retry_.cancel();
    for (auto& [seq, c] : open_) c->close();
    open_.clear();
  }

  int port() const { return port_; }
  const std::string& host() const { return host_; }

 private:
  struct Connection : std::enable_shared_from_this<Connection> {
    Connection(tcp::socket s, uint64_t seq)
        : socket(std::move(s)), timer(socket.get_executor()), seq(seq) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::string in;
    std::string out;
    const uint64_t seq;  // accept order: the smallest open one is the oldest
    bool closed = false;

    void close() {
      if (closed) return;
      closed = true;
      timer.cancel();
      std::error_code ignored;
      socket.close(ignored);
    }
  };

  void accept() {
    acceptor_.async_accept([self = shared_from_this()](std::error_code ec, tcp::socket s) {
      if (!self->acceptor_.is_open()) return;
      if (ec) {
        self->retry_.expires_after(kAcceptRetry);
        self->retry_.async_wait([self](std::error_code e) {
          if (!e && self->acceptor_.is_open()) self->accept();
        });
        return;
      }
      ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);  // as the acceptor's
      if (self->open_.size() >= kMaxConnections) self->finish(self->open_.begin()->second);
      self->serve(std::make_shared<Connection>(std::move(s), self->next_seq_++));
      self->accept();
    });
  }

  void serve(std::shared_ptr<Connection> c) {
    open_.emplace(c->seq, c);
    c->timer.expires_after(kRequestTimeout);
    c->timer.async_wait([self = shared_from_this(), c](std::error_code ec) {
      if (!ec) self->finish(c);
    });
    read(c);
  }

  void read(std::shared_ptr<Connection> c) {
    const size_t at = c->in.size();
    c->in.resize(at + 1024);
    c->socket.async_read_some(asio::buffer(c->in.data() + at, 1024),
                              [self = shared_from_this(), c, at](std::error_code ec, size_t n) {
                                if (c->closed) return;
                                c->in.resize(at + n);
                                if (ec) return self->finish(c);
                                const size_t end = c->in.find("\r\n\r\n");
                                if (end == std::string::npos) {
                                  if (c->in.size() > kMaxRequestBytes) {
                                    c->out = response(431, "Request Header Fields Too Large",
                                                      "text/plain", "request head over 8 KiB\n");
                                    return self->write(c);
                                  }
                                  return self->read(c);
                                }
                                c->out =
                                    answer(std::string_view(c->in).substr(0, end), self->render_);
                                self->write(c);
                              });
  }

  void write(std::shared_ptr<Connection> c) {
    asio::async_write(c->socket, asio::buffer(c->out),
                      [self = shared_from_this(), c](std::error_code, size_t) {
                        if (c->closed) return;
                        std::error_code ignored;
                        c->socket.shutdown(tcp::socket::shutdown_send, ignored);
                        self->finish(c);
                      });
  }

  void finish(std::shared_ptr<Connection> c) {
    c->close();
    open_.erase(c->seq);
  }

  tcp::acceptor acceptor_;
  asio::steady_timer retry_;  // kAcceptRetry after a failed accept
  Render render_;
  // Open connections by accept order. Held here too: the oldest is closed from here when a
  // newcomer needs its place.
  std::map<uint64_t, std::shared_ptr<Connection>> open_;
  uint64_t next_seq_ = 0;
  int port_ = 0;
  std::string host_;
};

MetricsEndpoint::MetricsEndpoint(asio::io_context& io, const MetricsAddress& address, Render render)
    : impl_(std::make_shared<Impl>(io, address, std::move(render))) {
  impl_->start();
}

MetricsEndpoint::~MetricsEndpoint() {
  impl_->stop();
}

int MetricsEndpoint::port() const {
  return impl_->port();
}

std::string MetricsEndpoint::url() const {
  return "http://" + format_host_port(impl_->host(), impl_->port()) + "/metrics";
}

}  // namespace cohort

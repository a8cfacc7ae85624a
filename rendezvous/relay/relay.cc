#include "cohort/rdzv/relay.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <array>
#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>
#include <cstring>
#include <future>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cohort/base/accept_failures.h"
#include "cohort/base/deadline.h"
#include "cohort/base/logging.h"
#include "cohort/base/net.h"
#include "cohort/rdzv/relay_wire.h"

namespace cohort::rdzv {

using asio::ip::tcp;

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kClientReadChunk = 64 * 1024;
constexpr size_t kLinkReadChunk = 64 * 1024;
constexpr size_t kLinkBacklog = 4 << 20;

}  // namespace

class StoreRelay::Impl final : public std::enable_shared_from_this<StoreRelay::Impl> {
 public:
  Impl(asio::io_context& io, StoreRelayOptions options)
      : io_(io),
        options_(std::move(options)),
        log_(component_logger("relay")),
        link_(io),
        acceptor_(io),
        accept_retry_(io) {
    store_address_ = format_host_port(options_.store_host, options_.store_port);
    open_link();
    listen();
  }

  void start() {
    link_up_ = true;
    do_link_read();
    do_accept();
  }

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }
  const std::string& store_address() const { return store_address_; }
  void on_link_lost(std::function<void(const std::string&)> fn) { on_lost_ = std::move(fn); }

  void stop() { shut_down("", /*tell=*/false); }

  StoreRelayStats stats() const {
    StoreRelayStats s = stats_;
    s.clients = clients_.size();
    s.link_up = link_up_;
    s.link_lost_reason = lost_reason_;
    return s;
  }

 private:
  struct Client {
    tcp::socket socket;
    uint32_t channel;
    bool reading = false;
    bool paused = false;        // the store asked to stop reading this worker
    uint64_t unacked = 0;       // bytes written to the worker, not yet acknowledged to the store
    bool store_closed = false;  // the store closed the channel: close once the rest is sent
    bool closed = false;
    std::string out, writing;
    bool write_in_flight = false;
    explicit Client(tcp::socket s, uint32_t ch) : socket(std::move(s)), channel(ch) {}
  };

  // ---- the link -------------------------------------------------------------------------------

  // Connects to the store from options_.source_host (when set), retrying refused attempts with
  // backoff until `deadline`; returns the connected descriptor or throws RelayUnavailable.
  int connect_link(Clock::time_point deadline) {
    std::error_code ec;
    std::vector<tcp::endpoint> targets;
    const auto addr = asio::ip::make_address(strip_brackets(options_.store_host), ec);
    if (!ec) {
      targets.emplace_back(addr, static_cast<uint16_t>(options_.store_port));
    } else {
      tcp::resolver resolver(io_);
      for (const auto& r :
           resolver.resolve(options_.store_host, std::to_string(options_.store_port), ec))
        targets.push_back(r.endpoint());
      if (ec || targets.empty())
        throw RelayUnavailable("cannot resolve the store's host '" + options_.store_host + "'");
    }
    auto backoff = std::chrono::milliseconds(10);
    std::string last = "no attempt";
    for (;;) {
      for (const auto& t : targets) {
        const int fd = try_connect(t, deadline, &last);
        if (fd >= 0) return fd;
      }
      if (Clock::now() + backoff >= deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
    }
    throw RelayUnavailable("cannot connect the relay link to the store at " + store_address_ +
                           ": " + last);
  }

  // One non-blocking connect, waited for until `deadline`; -1 (with *error) when it failed.
  int try_connect(const tcp::endpoint& to, Clock::time_point deadline, std::string* error) {
    const int fd = ::socket(to.protocol().family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      *error = std::strerror(errno);
      return -1;
    }
    auto failed = [&](int err) {
      *error = std::strerror(err);
      ::close(fd);
      return -1;
    };
    if (!options_.source_host.empty()) {
      std::error_code ec;
      const tcp::endpoint from(asio::ip::make_address(strip_brackets(options_.source_host), ec), 0);
      if (ec) return failed(EINVAL);
      if (::bind(fd, from.data(), static_cast<socklen_t>(from.size())) != 0) return failed(errno);
    }
    if (::connect(fd, to.data(), static_cast<socklen_t>(to.size())) != 0) {
      if (errno != EINPROGRESS) return failed(errno);
      const int left_ms = poll_ms_left(deadline);
      pollfd p{fd, POLLOUT, 0};
      if (left_ms == 0 || ::poll(&p, 1, left_ms) != 1) return failed(ETIMEDOUT);
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return failed(err);
    }
    return fd;
  }

  void open_link() {
    const auto deadline = Clock::now() + options_.connect_timeout;
    const int fd = connect_link(deadline);
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
    std::error_code ec;
    link_.assign(local.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd, ec);
    if (ec) {
      ::close(fd);
      throw RelayUnavailable("relay link: " + ec.message());
    }
    link_.set_option(tcp::no_delay(true), ec);
    link_local_ = link_.local_endpoint(ec).address().to_string();
    // The hello, then the welcome within the deadline. A server that does not know the hello
    // closes the connection (cohortd before relay links, PyTorch's classic server) or keeps
    // waiting for more (libuv keeps an unknown first command).
    const std::string hello = link::hello();
    asio::write(link_, asio::buffer(hello), ec);
    std::array<uint8_t, link::kWelcomeBytes> welcome{};
    size_t got = 0;
    while (!ec && got < welcome.size()) {
      pollfd p{link_.native_handle(), POLLIN, 0};
      const int left_ms = poll_ms_left(deadline);
      if (left_ms == 0 || ::poll(&p, 1, left_ms) == 0) {
        throw RelayUnavailable("the store at " + store_address_ +
                               " did not answer the relay link's hello within " +
                               std::to_string(options_.connect_timeout.count()) +
                               " ms: it is not a cohortd that takes relay links");
      }
      got += link_.read_some(asio::buffer(welcome.data() + got, welcome.size() - got), ec);
    }
    if (ec) {
      throw RelayUnavailable("the store at " + store_address_ +
                             " closed the relay link at its "
                             "hello (" +
                             ec.message() +
                             "): it is not a cohortd that takes relay "
                             "links");
    }
    if (link::parse_welcome(welcome, &max_unsent_bytes_) != link::HelloStatus::kComplete) {
      throw RelayUnavailable("the store at " + store_address_ +
                             " answered the relay link's hello with something else: it is not a "
                             "cohortd of this version");
    }
    link_.non_blocking(true, ec);
    ack_step_ = std::max<uint64_t>(1, max_unsent_bytes_ / link::kAckFraction);
  }

  // Reads wait for readability, then read into one buffer the loop shares (scratch()): a relay
  // of a thousand idle connections holds no read buffers.
  static std::array<char, kLinkReadChunk>& scratch() {
    static thread_local std::array<char, kLinkReadChunk> buf;
    return buf;
  }

  void do_link_read() {
    if (!link_up_) return;
    link_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](std::error_code ec) {
      if (!self->link_up_) return;
      size_t n = 0;
      if (!ec) {
        n = self->link_.read_some(asio::buffer(scratch()), ec);
        if (ec == asio::error::would_block || ec == asio::error::try_again) {
          self->do_link_read();
          return;
        }
      }
      if (ec) {
        self->shut_down(ec == asio::error::eof ? "the store closed the relay link"
                                               : "relay link: " + ec.message(),
                        true);
        return;
      }
      self->link_in_.append(scratch().data(), n);
      self->handle_link_input();
      self->do_link_read();
    });
  }

  void handle_link_input() {
    size_t pos = 0;
    while (link_up_) {
      link::Frame f;
      auto in = std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(link_in_.data()) + pos,
                                         link_in_.size() - pos);
      DecodeResult r = link::decode_frame(in, &f);
      if (r.status == DecodeStatus::kNeedMore) break;
      if (r.status == DecodeStatus::kBad) {
        shut_down("relay link: the store sent a bad frame: " + r.error, true);
        return;
      }
      on_frame(f);
      pos += r.consumed;
    }
    link_in_.erase(0, pos);
    if (link_in_.empty() && link_in_.capacity() > 4096) std::string().swap(link_in_);
  }

  void on_frame(const link::Frame& f) {
    auto it = clients_.find(f.channel);
    if (it == clients_.end()) return;  // a worker that has gone meanwhile
    Client& c = *it->second;
    switch (f.kind) {
      case link::FrameKind::kData:
        stats_.bytes_down += f.payload.size();
        c.out.append(f.payload);
        flush_client(it->second);
        return;
      case link::FrameKind::kClose:
        c.store_closed = true;
        c.paused = true;  // nothing more is read from it
        if (c.out.empty() && !c.write_in_flight) close_client(c.channel, false);
        return;
      case link::FrameKind::kPause:
        c.paused = true;
        return;
      case link::FrameKind::kResume:
        c.paused = false;
        do_client_read(it->second);
        return;
      case link::FrameKind::kOpen:
      case link::FrameKind::kAck:
        return;  // not sent by a store
    }
  }

  // The link's output buffer, for a frame to be appended; it is written at the end of this turn
  // of the loop (frames of one turn, a wake of many workers or many workers' requests, go in
  // one write).
  std::string& link_output() {
    if (!link_flush_posted_) {
      // Frames of one loop turn (a wake of many workers, many workers' requests) go in one write.
      link_flush_posted_ = true;
      asio::post(io_, [self = shared_from_this()] {
        self->link_flush_posted_ = false;
        self->flush_link();
      });
    }
    return link_out_;
  }
  void send_frame(link::FrameKind kind, uint32_t channel) {
    if (link_up_) link::put_frame(&link_output(), kind, channel);
  }
  // Bytes for the store not yet written: past kLinkBacklog, workers are not read until it drains
  // (the store's own reading is what paces them, as it would pace their direct connections).
  size_t link_backlog() const { return link_out_.size() + link_sending_.size(); }

  void flush_link() {
    if (!link_up_ || link_writing_ || link_out_.empty()) return;
    link_writing_ = true;
    link_sending_.swap(link_out_);
    link_out_.clear();
    asio::async_write(link_, asio::buffer(link_sending_),
                      [self = shared_from_this()](std::error_code ec, size_t) {
                        self->link_writing_ = false;
                        self->link_sending_.clear();
                        if (!self->link_up_) return;
                        if (ec) {
                          self->shut_down("relay link: " + ec.message(), true);
                          return;
                        }
                        self->flush_link();
                        if (self->link_backlog() < kLinkBacklog) self->resume_stalled();
                      });
  }

  void resume_stalled() {
    auto stalled = std::move(stalled_);
    stalled_.clear();
    for (auto& weak : stalled)
      if (auto c = weak.lock()) do_client_read(c);
  }

  // ---- workers --------------------------------------------------------------------------------

  void listen() {
    std::string host = options_.listen_host.empty() ? link_local_ : options_.listen_host;
    std::error_code ec;
    auto addr = asio::ip::make_address(strip_brackets(host), ec);
    if (ec) throw RelayUnavailable("relay listen address '" + host + "': " + ec.message());
    tcp::endpoint ep(addr, static_cast<uint16_t>(options_.listen_port));
    acceptor_.open(ep.protocol(), ec);
    // Asio opens and accepts without SOCK_CLOEXEC, and the relay's process (cohortrun's agent)
    // starts the workers: they must not inherit its listener or its connections.
    if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(tcp::acceptor::max_listen_connections, ec);
    if (ec) {
      throw RelayUnavailable("the relay cannot listen on " +
                             format_host_port(host, options_.listen_port) + ": " + ec.message());
    }
    host_ = addr.to_string();
    listen_address_ = addr;
    port_ = acceptor_.local_endpoint().port();
  }

  void do_accept() {
    acceptor_.async_accept(accepted_peer_,
                           [self = shared_from_this()](std::error_code ec, tcp::socket s) {
                             if (!self->link_up_) return;
                             if (ec == asio::error::operation_aborted) return;
                             if (ec) {
                               self->accept_failed(ec);
                               return;
                             }
                             if (auto line = self->accept_failures_.accepted())
                               self->log_->warn("{}", *line);
                             self->on_accept(std::move(s), self->accepted_peer_.address());
                             self->do_accept();
                           });
  }

  // Out of descriptors (EMFILE): accepting again at once fails the same way, spinning a core and
  // logging each failure; retry after 50 ms as cohortd's acceptor does, a line a second at most.
  void accept_failed(const std::error_code& ec) {
    if (auto line = accept_failures_.failed(ec.message())) log_->warn("{}", *line);
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([self = shared_from_this()](std::error_code e) {
      if (!e && self->link_up_) self->do_accept();
    });
  }

  void on_accept(tcp::socket s, const asio::ip::address& peer) {
    std::error_code ec;
    // cohortd takes a channel as coming from the link's address: only this node's processes may
    // use that (docs/RELAY.md §3).
    const bool local = peer.is_loopback() || peer == listen_address_;
    const std::string from = peer.to_string();
    if (!local || clients_.size() >= options_.max_clients) {
      ++stats_.refused;
      log_->warn("relay: refusing a connection from {}: {}", from,
                 local
                     ? "too many worker connections (" + std::to_string(options_.max_clients) + ")"
                     : std::string("not from this node (the relay serves its own workers only)"));
      s.close(ec);
      return;
    }
    ::fcntl(s.native_handle(), F_SETFD, FD_CLOEXEC);  // as the listener's (listen())
    s.set_option(tcp::no_delay(true), ec);
    s.non_blocking(true, ec);
    ++stats_.accepted;
    const uint32_t channel = next_channel_++;
    auto c = std::make_shared<Client>(std::move(s), channel);
    clients_.emplace(channel, c);
    send_frame(link::FrameKind::kOpen, channel);
    do_client_read(c);
  }

  void do_client_read(const std::shared_ptr<Client>& c) {
    if (c->closed || c->reading || c->paused) return;
    if (link_backlog() >= kLinkBacklog) {
      stalled_.push_back(c);
      return;
    }
    c->reading = true;
    c->socket.async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), c](std::error_code ec) {
          c->reading = false;
          if (c->closed || !self->link_up_ || c->paused) return;
          size_t n = 0;
          if (!ec) {
            n = c->socket.read_some(asio::buffer(scratch().data(), kClientReadChunk), ec);
            if (ec == asio::error::would_block || ec == asio::error::try_again) {
              self->do_client_read(c);
              return;
            }
          }
          if (ec) {
            // The worker went (or reset): tell the store, unless the store closed it first.
            self->close_client(c->channel, !c->store_closed);
            return;
          }
          self->stats_.bytes_up += n;
          link::put_data(&self->link_output(), c->channel, std::string_view(scratch().data(), n));
          self->do_client_read(c);
        });
  }

  void flush_client(const std::shared_ptr<Client>& c) {
    if (c->closed || c->write_in_flight || c->out.empty()) return;
    c->write_in_flight = true;
    c->writing.swap(c->out);
    c->out.clear();
    asio::async_write(c->socket, asio::buffer(c->writing),
                      [self = shared_from_this(), c](std::error_code ec, size_t n) {
                        c->write_in_flight = false;
                        c->writing.clear();
                        if (c->closed || !self->link_up_) return;
                        if (ec) {
                          self->close_client(c->channel, !c->store_closed);
                          return;
                        }
                        // The store counts these bytes as unsent until told: in steps, so that
                        // small replies cost no frame each (relay_wire.h, kAck).
                        c->unacked += n;
                        if (c->unacked >= self->ack_step_) {
                          link::put_ack(&self->link_output(), c->channel, c->unacked);
                          c->unacked = 0;
                        }
                        if (c->out.empty() && c->store_closed) {
                          self->close_client(c->channel, false);
                          return;
                        }
                        self->flush_client(c);
                      });
  }

  void close_client(uint32_t channel, bool tell_store) {
    auto it = clients_.find(channel);
    if (it == clients_.end()) return;
    Client& c = *it->second;
    c.closed = true;
    std::error_code ignored;
    c.socket.shutdown(tcp::socket::shutdown_both, ignored);
    c.socket.close(ignored);
    if (tell_store) send_frame(link::FrameKind::kClose, channel);
    clients_.erase(it);
  }

  // Ends everything: the link, the listener, every worker connection (`why` logged, and told to
  // on_link_lost when `tell`).
  void shut_down(const std::string& why, bool tell) {
    if (!link_up_ && stopped_) return;
    stopped_ = true;
    link_up_ = false;
    lost_reason_ = why.empty() ? "stopped" : why;
    std::error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    link_.shutdown(tcp::socket::shutdown_both, ignored);
    link_.close(ignored);
    const size_t workers = clients_.size();
    for (auto& [n, c] : clients_) {
      c->closed = true;
      c->socket.shutdown(tcp::socket::shutdown_both, ignored);
      c->socket.close(ignored);
    }
    clients_.clear();
    // With workers connected this ends them, as losing the store would; without, it is the
    // store closing at the end of its round.
    if (!why.empty() && workers > 0) {
      log_->warn("relay to {}: {}; its {} worker connection(s) are closed", store_address_, why,
                 workers);
    } else if (!why.empty()) {
      log_->info("relay to {}: {}", store_address_, why);
    }
    if (tell && on_lost_) on_lost_(why);
  }

  asio::io_context& io_;
  StoreRelayOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  std::string store_address_;
  tcp::socket link_;
  std::string link_local_;
  uint64_t max_unsent_bytes_ = 64ull << 20;  // cohortd's, from the welcome
  uint64_t ack_step_ = 16ull << 20;
  std::string link_in_, link_out_, link_sending_;
  bool link_writing_ = false;
  bool link_flush_posted_ = false;
  bool link_up_ = false;
  bool stopped_ = false;
  std::string lost_reason_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_retry_;
  AcceptFailures accept_failures_{"relay: accept failed"};
  std::string host_;
  asio::ip::address listen_address_;
  tcp::endpoint accepted_peer_;  // filled by each accept
  uint16_t port_ = 0;
  uint32_t next_channel_ = 1;
  std::unordered_map<uint32_t, std::shared_ptr<Client>> clients_;
  std::vector<std::weak_ptr<Client>> stalled_;  // not read while the link is backed up
  StoreRelayStats stats_;
  std::function<void(const std::string&)> on_lost_;
};

StoreRelay::StoreRelay(asio::io_context& io, StoreRelayOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->start();
}
StoreRelay::~StoreRelay() {
  impl_->stop();
}
const std::string& StoreRelay::host() const {
  return impl_->host();
}
uint16_t StoreRelay::port() const {
  return impl_->port();
}
const std::string& StoreRelay::store_address() const {
  return impl_->store_address();
}
void StoreRelay::on_link_lost(std::function<void(const std::string&)> fn) {
  impl_->on_link_lost(std::move(fn));
}
void StoreRelay::stop() {
  impl_->stop();
}
StoreRelayStats StoreRelay::stats() const {
  return impl_->stats();
}

// ---- StoreRelayThread -----------------------------------------------------------------------

struct StoreRelayThread::Loop {
  asio::io_context io;
  // Keeps run() going until the destructor, so that stats() can always post to the loop.
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  std::unique_ptr<StoreRelay> relay;
};

StoreRelayThread::StoreRelayThread(StoreRelayOptions options) : loop_(std::make_unique<Loop>()) {
  loop_->relay = std::make_unique<StoreRelay>(loop_->io, std::move(options));
  host_ = loop_->relay->host();
  port_ = loop_->relay->port();
  thread_ = std::thread([loop = loop_.get()] {
    pthread_setname_np(pthread_self(), "cohort-relay");
    loop->io.run();
  });
}

StoreRelayThread::~StoreRelayThread() {
  stop();
  loop_->work.reset();
  if (thread_.joinable()) thread_.join();
  loop_->relay.reset();
}

void StoreRelayThread::stop() {
  asio::post(loop_->io, [loop = loop_.get()] { loop->relay->stop(); });
}

void StoreRelayThread::on_link_lost(std::function<void(const std::string&)> fn) {
  asio::post(loop_->io,
             [loop = loop_.get(), fn = std::move(fn)]() mutable { loop->relay->on_link_lost(fn); });
}

StoreRelayStats StoreRelayThread::stats() const {
  std::promise<StoreRelayStats> p;
  auto f = p.get_future();
  asio::post(loop_->io, [&] { p.set_value(loop_->relay->stats()); });
  return f.get();
}

}  // namespace cohort::rdzv

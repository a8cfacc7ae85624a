#include "cohort/rdzv/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/ip/v6_only.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <unordered_map>

#include "cohort/base/logging.h"
#include "cohort/error.h"
#include "server/pending_handshakes.h"
#include "server/server_metrics.h"
#include "server/session.h"
#include "server/store_log.h"
#include "server/store_state.h"

namespace cohort::rdzv {

using asio::ip::tcp;

class StoreServer::Impl final : public SessionHost,
                                public StoreListener,
                                public std::enable_shared_from_this<StoreServer::Impl> {
 public:
  Impl(asio::io_context& io, StoreServerOptions options)
      : io_(io),
        options_(std::move(options)),
        log_(component_logger("store")),
        state_(this, options_.max_waiters),
        acceptor_(io),
        retry_timer_(io),
        journal_timer_(io),
        compaction_wait_(io) {
    tcp::endpoint ep = resolve(options_.host, options_.port);
    std::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    // Asio opens and accepts without SOCK_CLOEXEC: a program this process starts (cohortrun's
    // workers, a libcohort worker's children) must not hold the port or a client's connection.
    if (!ec) ::fcntl(acceptor_.native_handle(), F_SETFD, FD_CLOEXEC);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec && ep.address().is_v6()) acceptor_.set_option(asio::ip::v6_only(false), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(tcp::acceptor::max_listen_connections, ec);
    if (ec) {
      throw Error("cannot listen on " + format_address(options_.host, options_.port) + ": " +
                  ec.message() +
                  (ec == asio::error::address_in_use
                       ? " (another process holds that port; choose another, or port 0 for a "
                         "free one)"
                       : ""));
    }
    port_ = acceptor_.local_endpoint().port();
    if (!options_.data_dir.empty()) {
      journal_ = std::make_unique<StoreLog>(options_.data_dir, &state_, options_.fsync,
                                            options_.accept_log_damage);
      stats_.replayed_records = journal_->replayed_records();
      log_->info("data dir {}: {} keys restored from {} log records (queues are not persisted)",
                 options_.data_dir, state_.num_keys(), journal_->replayed_records());
      if (!journal_->damaged_copy().empty()) {
        log_->warn(
            "data dir {}: --accept-log-damage: {} bytes from the damage on were dropped; "
            "the damaged log was copied to {}",
            options_.data_dir, journal_->dropped_bytes(), journal_->damaged_copy());
      } else if (journal_->dropped_torn_tail()) {
        log_->warn("data dir {}: a torn last record ({} bytes, a write cut short) was dropped",
                   options_.data_dir, journal_->dropped_bytes());
      }
      if (journal_->was_empty()) {
        log_->warn(
            "data dir {}: store.log was empty (not even its header): starting with an "
            "empty store",
            options_.data_dir);
      }
      compact_at_start();
    }
    const uint64_t held = state_.key_value_bytes() + state_.queued_bytes();
    if (options_.max_memory > 0 && held > options_.max_memory) {
      log_->warn(
          "the store holds {} bytes of keys and values, past --max-memory ({}): writes that add "
          "bytes are refused until deletes bring it under",
          held, options_.max_memory);
    }
  }

  void start() {
    do_accept();
    if (journal_) arm_journal_timer();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return format_address(options_.host, port_); }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    std::error_code ignored;
    acceptor_.close(ignored);
    retry_timer_.cancel();
    journal_timer_.cancel();
    std::error_code closed;
    compaction_wait_.close(closed);
    if (journal_) {
      journal_->abandon_compaction();  // store.log holds everything; the next start compacts
      journal_->sync();
    }
    auto sessions = std::move(sessions_);
    sessions_.clear();
    for (auto& [id, s] : sessions) s->stop();
  }

  StoreServerStats stats() const {
    StoreServerStats s = stats_;
    s.connections = sessions_.size();
    s.parked_waits = state_.parked_waits();
    s.keys = state_.num_keys();
    s.connection_bytes = connection_bytes_;
    return s;
  }

  std::string metrics_text() const {
    const StoreServerStats s = stats();
    ServerMetricsView view{&s, &counters_, &state_, journal_.get(), options_.max_memory, {}};
    view.connections.reserve(sessions_.size());
    for (const auto& [id, session] : sessions_)
      view.connections.push_back(
          {session->handler().dialect_name(), session->handler().authenticated()});
    return render_server_metrics(view);
  }

  // SessionHost
  StoreState& state() override { return state_; }
  ServerCounters* counters() override { return &counters_; }
  const StoreServerOptions& options() const override { return options_; }
  spdlog::logger& log() override { return *log_; }
  void on_session_closed(SessionId id, bool for_limit, bool unauthenticated) override {
    state_.drop_session(id);
    pending_handshakes_.remove(id);
    auto it = sessions_.find(id);
    if (it != sessions_.end()) {
      auto count = per_address_.find(it->second->address());
      if (count != per_address_.end() && --count->second == 0) per_address_.erase(count);
      if (it->second->spoke()) {
        auto spoken = spoken_per_address_.find(it->second->address());
        if (spoken != spoken_per_address_.end() && --spoken->second == 0)
          spoken_per_address_.erase(spoken);
      }
      sessions_.erase(it);
    }
    if (unauthenticated) {
      ++stats_.refused_unauthenticated;
    } else if (for_limit) {
      ++stats_.closed_for_limit;
    }
  }

  void charge(int64_t delta) override {
    connection_bytes_ = static_cast<uint64_t>(static_cast<int64_t>(connection_bytes_) + delta);
    if (connection_bytes_ > options_.connection_memory_budget && !budget_check_posted_ &&
        !stopped_) {
      // Not here: this runs inside a session's request, maybe while the state notifies.
      budget_check_posted_ = true;
      asio::post(io_, [self = shared_from_this()] { self->enforce_budget(); });
    }
  }
  void count_memory_close() override { ++stats_.closed_for_memory; }
  void count_silent_close() override { ++stats_.closed_silent; }
  bool address_has_spoken(const std::string& address) const override {
    return spoken_per_address_.contains(address);
  }
  void on_session_spoke(SessionId id, const std::string& address) override {
    ++spoken_per_address_[address];
    pending_handshakes_.remove(id);
  }
  void log_flood_close(FloodClose kind, const std::string& peer,
                       const std::string& reason) override {
    flood_log_.closed(kind, peer, reason);
  }

  // StoreListener
  void on_wait_satisfied(SessionId id) override {
    auto it = sessions_.find(id);
    if (it != sessions_.end()) it->second->wake();
  }
  void on_watch_event(SessionId id, const WatchEvent& event) override {
    auto it = sessions_.find(id);
    if (it != sessions_.end()) it->second->deliver(event);
  }

 private:
  static std::string format_address(const std::string& host, uint16_t port) {
    bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  }

  tcp::endpoint resolve(const std::string& host, uint16_t port) {
    std::error_code ec;
    auto addr = asio::ip::make_address(host, ec);
    if (!ec) return {addr, port};
    tcp::resolver resolver(io_);
    auto results = resolver.resolve(host, std::to_string(port), ec);
    if (ec || results.empty()) {
      throw Error("cannot resolve the listen address '" + host + "': " + ec.message());
    }
    return results.begin()->endpoint();
  }

  // A cohortd killed within a second of each start never reached its first compaction check, so
  // its log grew by every run's writes (2.7 GB for 10 MB of data in 45 s, issue 27). The log has
  // just been read whole: when it is due, compact it now, before anything is served (the child
  // is waited for; store.log stays whole until the rename that ends it, so a kill meanwhile loses
  // nothing).
  void compact_at_start() {
    const auto started = std::chrono::steady_clock::now();
    const uint64_t before = journal_->size();
    try {
      if (!journal_->maybe_compact()) return;
      log_->info("data dir {}: compacted the store log at start: {} -> {} bytes in {} ms",
                 options_.data_dir, before, journal_->size(),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - started)
                     .count());
    } catch (const std::exception& e) {
      log_->error("data dir {}: compaction at start failed (serving from the log as it is): {}",
                  options_.data_dir, e.what());
    }
  }

  // Every fsync interval: fsync what was written; about once a second: compact if worthwhile.
  void arm_journal_timer() {
    auto period =
        options_.fsync == FsyncPolicy::kInterval
            ? std::min<std::chrono::milliseconds>(options_.fsync_interval, std::chrono::seconds(1))
            : std::chrono::milliseconds(1000);
    journal_timer_.expires_after(period);
    journal_timer_.async_wait([self = shared_from_this(), period](std::error_code ec) {
      if (ec || self->stopped_) return;
      if (self->options_.fsync == FsyncPolicy::kInterval) self->journal_->sync_in_background();
      self->since_compaction_check_ += period;
      if (self->since_compaction_check_ >= std::chrono::seconds(1)) {
        self->since_compaction_check_ = {};
        try {
          if (self->journal_->start_compaction()) self->await_compaction();
        } catch (const std::exception& e) {
          self->log_->error("compaction failed: {}", e.what());
        }
      }
      self->arm_journal_timer();
    });
  }

  // A compaction runs in a child process (store_log.h): finish it when its pipe says it is done.
  void await_compaction() {
    compaction_started_ = std::chrono::steady_clock::now();
    compaction_log_size_ = journal_->size();
    int fd = ::fcntl(journal_->compaction_fd(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) {
      journal_->abandon_compaction();
      log_->error("compaction abandoned: cannot duplicate its pipe");
      return;
    }
    compaction_wait_.assign(fd);
    compaction_wait_.async_wait(
        asio::posix::stream_descriptor::wait_read, [self = shared_from_this()](std::error_code ec) {
          std::error_code closed;
          self->compaction_wait_.close(closed);
          if (self->stopped_) return;
          if (ec) {
            self->journal_->abandon_compaction();
            self->log_->error("compaction abandoned: waiting for it failed: {}", ec.message());
            return;
          }
          auto finish_start = std::chrono::steady_clock::now();
          try {
            if (self->journal_->finish_compaction()) {
              auto ms = [](auto d) {
                return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
              };
              auto now = std::chrono::steady_clock::now();
              self->log_->info(
                  "compacted the store log in {}: {} -> {} bytes in {} ms ({}; the loop paused "
                  "{} ms to finish, copying {} bytes written meanwhile)",
                  self->options_.data_dir, self->compaction_log_size_, self->journal_->size(),
                  ms(now - self->compaction_started_),
                  self->journal_->last_fork_errno() == 0
                      ? std::string("in a child process")
                      : std::string("in the loop: fork failed: ") +
                            std::strerror(self->journal_->last_fork_errno()),
                  ms(now - finish_start), self->journal_->last_tail_bytes());
            }
          } catch (const std::exception& e) {
            self->log_->error("compaction failed: {}", e.what());
          }
        });
  }

  // Over --connection-memory-budget: close the connections holding the most until under it.
  void enforce_budget() {
    budget_check_posted_ = false;
    while (!stopped_ && connection_bytes_ > options_.connection_memory_budget) {
      std::shared_ptr<Session> largest;  // held: closing erases it from sessions_
      for (auto& [id, s] : sessions_)
        if (!largest || s->footprint() > largest->footprint()) largest = s;
      if (!largest || largest->footprint() == 0) return;
      ++stats_.closed_for_memory;
      largest->close_for_memory(
          std::to_string(largest->footprint()) +
          " bytes unsent or buffered, the most of any connection, while all hold " +
          std::to_string(connection_bytes_) + ", past --connection-memory-budget (" +
          std::to_string(options_.connection_memory_budget) + ")");
    }
  }

  // Closes `victim` (a connection that has not completed the token handshake) to make room for a
  // newcomer at `limit`; false when there is none.
  bool make_room(std::optional<SessionId> victim, const char* limit) {
    if (!victim) return false;
    auto it = sessions_.find(*victim);
    if (it == sessions_.end()) return false;
    std::shared_ptr<Session> s = it->second;  // held: closing erases it from sessions_
    s->give_way(std::string("token handshake not completed; its place at ") + limit +
                " goes to a newer connection");
    return true;
  }

  // Turns away a connection at a limit, with a line a second at most about it.
  void refuse(tcp::socket socket, const std::string& why) {
    ++stats_.refused;
    auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ > std::chrono::seconds(1)) {
      log_->warn("{}; {} refused so far", why, stats_.refused);
      last_refusal_log_ = now;
    }
    std::error_code ignored;
    socket.close(ignored);
    do_accept();
  }

  void do_accept() {
    acceptor_.async_accept([self = shared_from_this()](std::error_code ec, tcp::socket socket) {
      self->on_accept(ec, std::move(socket));
    });
  }

  void on_accept(std::error_code ec, tcp::socket socket) {
    if (stopped_) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors: accepting again at once would spin; retry shortly.
      log_->warn("accept failed: {}; retrying in 50 ms", ec.message());
      retry_timer_.expires_after(std::chrono::milliseconds(50));
      retry_timer_.async_wait([self = shared_from_this()](std::error_code e) {
        if (!e && !self->stopped_) self->do_accept();
      });
      return;
    }
    ++stats_.accepted;
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);  // as the acceptor's (constructor)
    std::error_code ignored;
    std::string peer, peer_addr;
    auto ep = socket.remote_endpoint(ignored);
    if (!ignored) {
      peer_addr = ep.address().to_string();
      peer = peer_addr + ":" + std::to_string(ep.port());
    }
    bool must_authenticate = !options_.auth_token.empty();
    for (const auto& net : options_.allow_unauthenticated)
      if (must_authenticate && net.contains(peer_addr)) must_authenticate = false;
    // At a limit, a newcomer that must authenticate takes the place of the oldest connection that
    // has not (pending_handshakes.h); otherwise it is turned away.
    if (sessions_.size() >= options_.max_connections &&
        !make_room(must_authenticate ? pending_handshakes_.oldest() : std::nullopt,
                   "--max-connections")) {
      refuse(std::move(socket), "refusing connections: " + std::to_string(sessions_.size()) +
                                    " open reaches --max-connections (" +
                                    std::to_string(options_.max_connections) + ")");
      return;
    }
    const size_t per_address_limit = options_.max_connections_per_address;
    if (per_address_limit > 0 && per_address_[peer_addr] >= per_address_limit &&
        !make_room(must_authenticate ? pending_handshakes_.oldest(peer_addr) : std::nullopt,
                   "--max-connections-per-address")) {
      refuse(std::move(socket), "refusing connections from " + peer_addr + ": it holds " +
                                    std::to_string(per_address_[peer_addr]) +
                                    " (--max-connections-per-address)");
      return;
    }
    socket.set_option(tcp::no_delay(true), ignored);
    SessionId id = next_id_++;
    auto session = std::make_shared<Session>(
        *this, std::move(socket), id, peer.empty() ? "?" : peer, peer_addr, must_authenticate);
    sessions_.emplace(id, session);
    ++per_address_[peer_addr];
    if (must_authenticate) pending_handshakes_.add(id, peer_addr);
    session->start();
    do_accept();
  }

  asio::io_context& io_;
  StoreServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  StoreState state_;
  tcp::acceptor acceptor_;
  asio::steady_timer retry_timer_;
  asio::steady_timer journal_timer_;
  std::unique_ptr<StoreLog> journal_;               // with --data-dir
  asio::posix::stream_descriptor compaction_wait_;  // the running compaction's pipe
  std::chrono::steady_clock::time_point compaction_started_{};
  uint64_t compaction_log_size_ = 0;
  std::chrono::milliseconds since_compaction_check_{0};
  uint16_t port_ = 0;
  bool stopped_ = false;
  SessionId next_id_ = 1;
  std::unordered_map<SessionId, std::shared_ptr<Session>> sessions_;
  std::unordered_map<std::string, size_t> per_address_;         // open sessions by client address
  std::unordered_map<std::string, size_t> spoken_per_address_;  // of which have spoken
  PendingHandshakes pending_handshakes_;  // of which must authenticate and have not
  StoreServerStats stats_;
  ServerCounters counters_;
  uint64_t connection_bytes_ = 0;  // sum of every session's footprint()
  bool budget_check_posted_ = false;
  std::chrono::steady_clock::time_point last_refusal_log_{};
  FloodLog flood_log_{*log_};
};

StoreServer::StoreServer(asio::io_context& io, StoreServerOptions options)
    : impl_(std::make_shared<Impl>(io, std::move(options))) {
  impl_->start();
}

StoreServer::~StoreServer() {
  impl_->stop();
}

uint16_t StoreServer::port() const {
  return impl_->port();
}
std::string StoreServer::address() const {
  return impl_->address();
}
void StoreServer::stop() {
  impl_->stop();
}
StoreServerStats StoreServer::stats() const {
  return impl_->stats();
}
std::string StoreServer::metrics_text() const {
  return impl_->metrics_text();
}

// ---- StoreServerThread ----------------------------------------------------------------------

struct StoreServerThread::Loop {
  asio::io_context io;
  std::unique_ptr<StoreServer> server;
};

StoreServerThread::StoreServerThread(StoreServerOptions options) : loop_(std::make_unique<Loop>()) {
  loop_->server = std::make_unique<StoreServer>(loop_->io, std::move(options));
  port_ = loop_->server->port();
  address_ = loop_->server->address();
  thread_ = std::thread([loop = loop_.get()] {
    pthread_setname_np(pthread_self(), "cohort-store");
    loop->io.run();
  });
}

StoreServerThread::~StoreServerThread() {
  stop();
  if (thread_.joinable()) thread_.join();
  loop_->server.reset();
}

void StoreServerThread::stop() {
  asio::post(loop_->io, [loop = loop_.get()] { loop->server->stop(); });
}

// Runs `fn` on the server's loop (at once when the loop has stopped) and returns its result.
template <typename Fn>
static auto on_loop(asio::io_context& io, Fn fn) {
  if (io.stopped()) return fn();
  std::promise<decltype(fn())> p;
  auto f = p.get_future();
  asio::post(io, [&] { p.set_value(fn()); });
  return f.get();
}

StoreServerStats StoreServerThread::stats() const {
  return on_loop(loop_->io, [this] { return loop_->server->stats(); });
}

std::string StoreServerThread::metrics_text() const {
  return on_loop(loop_->io, [this] { return loop_->server->metrics_text(); });
}

}  // namespace cohort::rdzv

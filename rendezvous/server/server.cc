#include "cohort/rdzv/server.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <unordered_map>
#include <unordered_set>

#include "cohort/base/logging.h"
#include "cohort/error.h"
#include "server/link_session.h"
#include "server/listener.h"
#include "server/pending_handshakes.h"
#include "server/server_metrics.h"
#include "server/session.h"
#include "server/store_log.h"
#include "server/store_state.h"

namespace cohort::rdzv {

using asio::ip::tcp;

class StoreServer::Impl final : public SessionHost,
                                public LinkHost,
                                public StoreListener,
                                public std::enable_shared_from_this<StoreServer::Impl> {
 public:
  Impl(asio::io_context& io, StoreServerOptions options)
      : io_(io),
        options_(std::move(options)),
        log_(component_logger("store")),
        state_(this, options_.max_waiters),
        journal_timer_(io),
        compaction_wait_(io) {
    listener_ = std::make_unique<Listener>(io_, resolve(options_.host, options_.port),
                                           options_.accept_queues, log_);
    port_ = listener_->port();
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
    listener_->start([self = shared_from_this()](tcp::socket s) { self->on_accept(std::move(s)); });
    if (journal_) arm_journal_timer();
  }

  uint16_t port() const { return port_; }
  std::string address() const { return format_address(options_.host, port_); }

  void stop() {
    if (stopped_) return;
    stopped_ = true;
    listener_->stop();
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
    auto links = std::move(links_);
    links_.clear();
    for (auto& [id, l] : links) l->stop();
  }

  StoreServerStats stats() const {
    StoreServerStats s = stats_;
    s.connections = sessions_.size() - channel_ids_.size() + links_.size();
    s.links = links_.size();
    s.channels = channel_ids_.size();
    s.sharing_waits = state_.sharing_waits();
    s.accept_queues = listener_->queues();
    s.accept_queue_length = listener_->queue_length();
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
    channel_ids_.erase(id);
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

  // A connection's first bytes were a relay link's hello: it becomes a LinkSession, keeping its
  // place in the per-address count.
  void on_link_hello(SessionId id) override {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    std::shared_ptr<Session> session = it->second;
    sessions_.erase(it);
    pending_handshakes_.remove(id);  // a link is a transport: its channels authenticate
    std::string read_so_far;
    auto stream = std::static_pointer_cast<TcpSessionStream>(session->release_stream(&read_so_far));
    auto link = std::make_shared<LinkSession>(*this, std::move(stream->socket()), id,
                                              session->peer(), session->address(),
                                              std::move(read_so_far), options_.max_unsent_bytes);
    links_.emplace(id, link);
    ++stats_.links_opened;
    link->start();
  }

  // LinkHost
  bool open_channel(LinkSession& link, std::shared_ptr<ChannelStream> stream) override {
    // A channel is judged as a connection from the link's address (docs/RELAY.md §3).
    const std::string& address = link.address();
    bool must_authenticate = !options_.auth_token.empty();
    for (const auto& net : options_.allow_unauthenticated)
      if (must_authenticate && net.contains(address)) must_authenticate = false;
    if (sessions_.size() >= options_.max_connections &&
        !make_room(must_authenticate ? pending_handshakes_.oldest() : std::nullopt,
                   "--max-connections")) {
      note_refusal("refusing a connection through the relay link from " + link.peer() + ": " +
                   std::to_string(sessions_.size()) + " open reaches --max-connections (" +
                   std::to_string(options_.max_connections) + ")");
      return false;
    }
    const size_t per_address_limit = options_.max_connections_per_address;
    if (per_address_limit > 0 && per_address_[address] >= per_address_limit &&
        !make_room(must_authenticate ? pending_handshakes_.oldest(address) : std::nullopt,
                   "--max-connections-per-address")) {
      note_refusal("refusing a connection through the relay link from " + link.peer() + ": " +
                   address + " holds " + std::to_string(per_address_[address]) +
                   " (--max-connections-per-address)");
      return false;
    }
    SessionId id = next_id_++;
    std::string peer = link.peer() + "#" + std::to_string(stream->channel());
    auto session = std::make_shared<Session>(*this, std::move(stream), id, std::move(peer), address,
                                             must_authenticate, /*may_be_link=*/false, link.id());
    sessions_.emplace(id, session);
    channel_ids_.insert(id);
    ++per_address_[address];
    if (must_authenticate) pending_handshakes_.add(id, address);
    ++stats_.channels_opened;
    session->start();
    return true;
  }
  void on_link_closed(LinkSession& link) override {
    auto count = per_address_.find(link.address());
    if (count != per_address_.end() && --count->second == 0) per_address_.erase(count);
    links_.erase(link.id());
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
    note_refusal(why);
    std::error_code ignored;
    socket.close(ignored);
  }
  void note_refusal(const std::string& why) {
    ++stats_.refused;
    auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ > std::chrono::seconds(1)) {
      log_->warn("{}; {} refused so far", why, stats_.refused);
      last_refusal_log_ = now;
    }
  }

  void on_accept(tcp::socket socket) {
    if (stopped_) return;
    ++stats_.accepted;
    ::fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);  // as the listener's (listener.cc)
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
        *this, std::make_shared<TcpSessionStream>(std::move(socket)), id, peer.empty() ? "?" : peer,
        peer_addr, must_authenticate, /*may_be_link=*/true);
    sessions_.emplace(id, session);
    ++per_address_[peer_addr];
    if (must_authenticate) pending_handshakes_.add(id, peer_addr);
    session->start();
  }

  asio::io_context& io_;
  StoreServerOptions options_;
  std::shared_ptr<spdlog::logger> log_;
  StoreState state_;
  std::unique_ptr<Listener> listener_;
  asio::steady_timer journal_timer_;
  std::unique_ptr<StoreLog> journal_;               // with --data-dir
  asio::posix::stream_descriptor compaction_wait_;  // the running compaction's pipe
  std::chrono::steady_clock::time_point compaction_started_{};
  uint64_t compaction_log_size_ = 0;
  std::chrono::milliseconds since_compaction_check_{0};
  uint16_t port_ = 0;
  bool stopped_ = false;
  SessionId next_id_ = 1;
  std::unordered_map<SessionId, std::shared_ptr<Session>> sessions_;  // channels included
  std::unordered_map<SessionId, std::shared_ptr<LinkSession>> links_;
  std::unordered_set<SessionId> channel_ids_;            // the sessions that are relay channels
  std::unordered_map<std::string, size_t> per_address_;  // open sessions by client address
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

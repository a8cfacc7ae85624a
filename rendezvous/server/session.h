// Session: one client connection of the store server: a stream (a socket, or a channel of a
// node's relay link) around a ProtocolHandler.
//
// Owns its stream and a write queue with at most one write in flight (Asio's chat example), sent
// as a sequence of buffers: a large value's reply is sent from the store's own buffer, never copied
// (output_queue.h). The protocol itself (decoding, dialects, parked waits, limits) is the
// handler's.
//
// Thread safety: loop thread only. Keeps itself alive through shared_from_this in its handlers.
#pragma once

#include <asio/steady_timer.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cohort/rdzv/server_options.h"
#include "server/flood_log.h"
#include "server/protocol_handler.h"
#include "server/session_stream.h"
#include "server/store_state.h"

namespace spdlog {
class logger;
}

namespace cohort::rdzv {

// What a session needs from its server.
class SessionHost {
 public:
  virtual ~SessionHost() = default;
  virtual StoreState& state() = 0;
  virtual const StoreServerOptions& options() const = 0;
  virtual spdlog::logger& log() = 0;
  // Where sessions count rejections and latencies (null: not counted).
  virtual ServerCounters* counters() = 0;
  // The session closed its socket; `for_limit` when a limit or a protocol error caused it,
  // `unauthenticated` when it had no valid token.
  virtual void on_session_closed(SessionId id, bool for_limit, bool unauthenticated) = 0;
  // A session's unsent and buffered bytes changed by `delta` (see Session::footprint()); the
  // host enforces options().connection_memory_budget over all of them.
  virtual void charge(int64_t delta) = 0;
  // A session closes itself for --max-unsent-bytes (counted in the stats).
  virtual void count_memory_close() = 0;
  // A session closes itself for --first-request-timeout or --idle-timeout (counted in the stats).
  virtual void count_silent_close() = 0;
  // Logs a close that floods bring (flood_log.h): at most a line a second per kind, however many
  // a flood brings at once.
  virtual void log_flood_close(FloodClose kind, const std::string& peer,
                               const std::string& reason) = 0;
  // Whether an open connection from `address` has spoken (see Session::spoke()).
  virtual bool address_has_spoken(const std::string& address) const = 0;
  // Session `id` from `address` has just spoken for the first time (see Session::spoke()).
  virtual void on_session_spoke(SessionId id, const std::string& address) = 0;
  // A TCP session's first bytes are a relay link's hello (relay_wire.h): the host takes its
  // stream and the bytes read so far, and the session is gone without a close.
  virtual void on_link_hello(SessionId id) = 0;
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `host` must outlive every session.
  // `may_be_link`: a TCP connection, whose first bytes may open a relay link instead.
  // `wait_scope`: WAITs of sessions with the same non-zero scope (a relay link's channels) may
  // share one parked wait (StoreState::wait).
  Session(SessionHost& host, std::shared_ptr<SessionStream> stream, SessionId id, std::string peer,
          std::string address, bool must_authenticate, bool may_be_link = false,
          uint64_t wait_scope = 0);

  // The client's address, without the port ("" when unknown), and with it ("?" when unknown).
  const std::string& address() const { return address_; }
  const std::string& peer() const { return peer_; }
  // Whether the client has completed the token handshake (where one is required) or else a
  // request.
  bool spoke() const { return spoke_; }
  // The connection's protocol state (dialect, authentication, parked wait), for the metrics.
  const ProtocolHandler& handler() const { return handler_; }

  void start();
  // Closes the connection without a log line (server shutdown).
  void stop();
  // After on_link_hello(): hands over the stream and the bytes read so far, and ends the session
  // without closing the stream or telling the host.
  std::shared_ptr<SessionStream> release_stream(std::string* read_so_far);
  // The parked WAIT is satisfied: send STOP_WAITING and resume buffered requests.
  void wake();
  // Sends unsolicited bytes (a 1.13 watch notification). Bytes that would take the connection
  // past --max-unsent-bytes are dropped and the connection is closed on a later turn of the loop
  // (this runs inside another client's write, while the state notifies).
  void deliver(const WatchEvent& event);

  // Replies and notifications not yet sent, plus requests read and not yet executed: the memory
  // this session holds.
  size_t footprint() const {
    return handler_.output().size() + writing_bytes_ + handler_.buffered_input();
  }
  // Closes the connection with a log line naming the peer and `reason`, counted as closed for a
  // limit. Call from a handler of its own (not while the state runs a request).
  void close_for_memory(const std::string& reason);
  // Closes a connection that has not completed the token handshake to make room for a newer one
  // (pending_handshakes.h), counted and logged as refused for its token. Same caveat.
  void give_way(const std::string& reason);

 private:
  void do_read();
  void on_read(std::error_code ec, size_t n);
  void process();
  void flush();
  void close(const std::string& reason, bool for_limit, bool unauthenticated = false);
  bool backlogged() const;
  // Replies not yet delivered: queued, being written, or written to a relay that has not yet
  // passed them on (SessionStream::unacknowledged()).
  size_t unsent() const {
    return handler_.output().size() + writing_bytes_ + stream_->unacknowledged();
  }
  // Tells the host how footprint() changed since last time, and the handler what is in flight.
  void account();
  // Arms the --request-timeout timer while half a request is buffered, disarms it otherwise.
  void watch_partial_request();
  // --idle-timeout: checks silence `after` from now (and again until the connection closes).
  void arm_idle_timer(std::chrono::steady_clock::duration after);

  SessionHost& host_;
  std::shared_ptr<SessionStream> stream_;
  asio::any_io_executor executor_;
  asio::steady_timer partial_timer_;
  asio::steady_timer handshake_timer_;  // --handshake-timeout or --first-request-timeout
  asio::steady_timer idle_timer_;
  std::chrono::steady_clock::time_point last_read_;
  bool partial_armed_ = false;
  const SessionId id_;
  const std::string peer_;
  const std::string address_;
  const bool must_authenticate_;
  bool may_be_link_;
  ProtocolHandler handler_;
  // The write in flight: its pieces (kept alive until it completes), their buffers, their bytes.
  std::vector<OutputQueue::Piece> writing_;
  std::vector<asio::const_buffer> writing_buffers_;
  size_t writing_bytes_ = 0;
  bool write_in_flight_ = false;
  bool read_in_flight_ = false;
  bool process_posted_ = false;
  bool flush_posted_ = false;
  bool closed_ = false;
  bool overflowed_ = false;  // past --max-unsent-bytes: closing, further bytes dropped
  bool spoke_ = false;
  size_t accounted_ = 0;  // footprint() as last charged to the host
};

}  // namespace cohort::rdzv

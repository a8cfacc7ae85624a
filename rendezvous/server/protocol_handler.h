// ProtocolHandler: one client connection's side of the store protocol, without a socket.
//
// Bytes go in (read_space + commit); process() decodes every complete request and executes it on
// the StoreState, appending replies to output(). It detects the connection's dialect from the
// first bytes, parks on WAIT (after which only CANCEL_WAIT is processed, so replies keep request
// order) and reports requests over a limit or malformed as a reason to close. Session wraps it
// with a socket; the fuzz targets drive it directly.
//
// Thread safety: none; one connection, one loop thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/rdzv/codec.h"
#include "cohort/rdzv/server_options.h"
#include "server/output_queue.h"
#include "server/server_counters.h"
#include "server/store_state.h"

namespace cohort::rdzv {

// PyTorch 1.13's watch notification, sent unsolicited on its callback connection: u8 type, then
// the key, the old value and the new value as byte strings. Appends it to `out`.
inline void encode_watch_notification(const WatchEvent& e, std::string* out) {
  put_u8(out, e.type);
  put_bytes(out, e.key);
  put_bytes(out, e.old_value);
  put_bytes(out, e.new_value);
}
inline size_t watch_notification_size(const WatchEvent& e) {
  return 1 + 3 * 8 + e.key.size() + e.old_value.size() + e.new_value.size();
}

class ProtocolHandler {
 public:
  // `state`, `options` and `counters` must outlive the handler. `must_authenticate`: the
  // connection must complete the token handshake (auth.h) before any request. `counters`
  // (optional) counts rejections and each request's latency, measured from read_at().
  // `wait_scope`: its one-key WAITs may share a parked wait with those of other handlers of the
  // same non-zero scope (StoreState::wait).
  ProtocolHandler(StoreState& state, const StoreServerOptions& options, SessionId id,
                  bool must_authenticate = false, ServerCounters* counters = nullptr,
                  uint64_t wait_scope = 0);

  // Writable space at the end of the input buffer (at least 512 bytes); then commit() what was
  // put. The buffer may move here, so no read may be in flight into an earlier span.
  std::span<uint8_t> read_space();
  void commit(size_t n);
  // When the bytes that the next process() runs were read: each request's latency counts from
  // here (with counters only).
  void read_at(std::chrono::steady_clock::time_point t) { read_at_ = t; }

  // Executes buffered requests until one is incomplete, a WAIT parks, or output backs up.
  // False when the connection must be closed; close_reason() says why.
  bool process();
  // The last process() stopped with complete requests left because this turn's replies reached
  // kTurnOutputBytes: call it again on a later turn of the loop, after other connections.
  bool yielded() const { return yielded_; }
  // Fairness: a client pipelining many requests yields the loop after this many bytes of
  // replies (a large value counts at its size, though it is shared rather than copied), so that
  // others are served between its turns. Small replies never reach it: thousands fit in a turn.
  static constexpr size_t kTurnOutputBytes = 1 << 20;

  // The parked WAIT is satisfied: appends STOP_WAITING. Returns true when requests that arrived
  // meanwhile are buffered (call process() again, on a later turn of the loop).
  bool wake();
  // Appends a 1.13 watch notification (unsolicited).
  void deliver(const WatchEvent& event) {
    encode_watch_notification(event, notifications_aside_ ? notifications_aside_ : &out_.bytes());
  }

  // Replies not yet sent. The caller takes them out (OutputQueue::take) and sends them.
  OutputQueue& output() { return out_; }
  const OutputQueue& output() const { return out_; }

  bool waiting() const { return waiting_; }
  // "current", "legacy", or "unknown" before the first request.
  std::string_view dialect_name() const {
    return !dialect_known_ ? "unknown" : dialect_ == Dialect::kCurrent ? "current" : "legacy";
  }
  bool has_input() const { return begin_ < end_; }
  // The bytes read and not yet consumed.
  std::span<const uint8_t> buffered() const { return {in_.get() + begin_, end_ - begin_}; }
  size_t buffered_input() const { return end_ - begin_; }
  const std::string& close_reason() const { return close_reason_; }
  // True once the token handshake is done, or when none was needed.
  bool authenticated() const { return auth_state_ == AuthState::kDone && !liveness_only_; }
  // Requests executed so far (the token handshake is not one).
  uint64_t requests() const { return requests_; }
  // True once a 1.13 WATCH_KEY registered a watch: the connection waits for notifications.
  bool watching() const { return watching_; }
  // True when the connection was closed for lack of (valid) authentication.
  bool refused_unauthenticated() const { return refused_unauthenticated_; }
  // Why the connection must close, once a request was refused (process() returned false).
  std::optional<RejectReason> rejected() const { return rejected_; }

  // Replies already taken out of output() and not yet sent (the session's write in flight):
  // they count toward options.max_unsent_bytes, beyond which process() executes nothing more
  // until the client reads.
  void set_unsent_elsewhere(size_t n) { unsent_elsewhere_ = n; }

 private:
  // process() runs each request through ordered guards: next_request() (dialect, held behind a
  // WAIT, backpressure, tag, decode and limits), admit() (a timed-out 1.13 WAIT, liveness-only
  // clients, tagged writes only), then run() (once per tag; fits(), --max-memory) and dispatch().
  // Every refusal goes through reject().
  enum class Step { kRun, kHold, kClose };
  struct Framed {
    size_t bytes = 0;  // of the request, its tag included
    bool tagged = false;
    uint64_t client = 0, request = 0;  // the tag
  };
  // Decodes the next buffered request into req_: kHold when it must wait (incomplete, held
  // behind a WAIT, output backed up), kClose (close_reason_ set) when the connection must close.
  Step next_request(Framed* f);
  // The checks on a whole request before it runs; false when the connection must close.
  bool admit(const Framed& f);
  // Runs req_ (a tagged write once per tag) and consumes its bytes; false when it must close.
  bool run(const Framed& f);
  // --max-memory: false (rejected) when req_ would take the store's keys, values and queued
  // items past it. Checked just before a write runs, so a refused one changes nothing.
  bool fits();
  // Executes one request; false when the connection must close.
  bool dispatch(const Request& req);
  // Appends a GET's or MULTI_GET's byte string for `v` (null: missing, read as empty): a large
  // value's buffer is queued by reference, not copied.
  void put_value(const StoredValue* v);
  // Sets close_reason_ (and refused_unauthenticated_), counts `reason`, and returns false.
  bool reject(RejectReason reason, std::string why);

  StoreState& state_;
  const StoreServerOptions& options_;
  const SessionId id_;
  ServerCounters* const counters_;
  const uint64_t wait_scope_;
  std::chrono::steady_clock::time_point read_at_{};
  std::chrono::steady_clock::time_point parked_at_{};  // read_at_ of the parked WAIT or BARRIER
  Op parked_op_ = Op::kWait;
  // Input buffer. Allocated on first read, never zero-filled, and released when a large one
  // empties: ten thousand idle clients of a rendezvous storm cost kilobytes each, not 16 KiB.
  std::unique_ptr<uint8_t[]> in_;
  size_t capacity_ = 0;
  size_t begin_ = 0;  // first unconsumed byte of in_
  size_t end_ = 0;    // end of valid bytes in in_
  OutputQueue out_;
  size_t unsent_elsewhere_ = 0;
  // While a tagged write runs, notifications to this connection go here, not into the reply
  // that a retry replays (a retry must not notify twice).
  std::string* notifications_aside_ = nullptr;
  // Runs the token handshake on buffered bytes; false when the connection must close. Sets
  // *need_more when it waits for bytes.
  bool authenticate(bool* need_more);
  bool refuse_unauthenticated();  // reject() for lack of authentication
  // Fills reply_ for a WAIT or BARRIER (*answered = false when it parks); false (close_reason_
  // set) when the connection must close.
  bool answer_wait(StoreState::WaitResult r, bool* answered);

  enum class AuthState { kNone, kChallenged, kDone };
  const bool must_authenticate_;
  AuthState auth_state_ = AuthState::kNone;
  std::string challenge_;
  std::string client_nonce_;  // the mutual handshake's (auth.h); empty in the one-way one
  bool refused_unauthenticated_ = false;
  // An unauthenticated PyTorch 2.x client: VALIDATE and PING answered, any other request refused.
  bool liveness_only_ = false;
  bool dialect_known_ = false;
  Dialect dialect_ = Dialect::kLegacy;
  bool waiting_ = false;
  bool yielded_ = false;
  bool watching_ = false;
  uint64_t requests_ = 0;
  std::string close_reason_;
  std::optional<RejectReason> rejected_;
  Request req_;
  Reply reply_;  // reused: its capacity stays
};

}  // namespace cohort::rdzv

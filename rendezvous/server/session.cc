#include "server/session.h"

#include <spdlog/spdlog.h>

#include <asio/post.hpp>

#include "cohort/rdzv/relay_wire.h"

namespace cohort::rdzv {

Session::Session(SessionHost& host, std::shared_ptr<SessionStream> stream, SessionId id,
                 std::string peer, std::string address, bool must_authenticate, bool may_be_link,
                 uint64_t wait_scope)
    : host_(host),
      stream_(std::move(stream)),
      executor_(stream_->executor()),
      partial_timer_(executor_),
      handshake_timer_(executor_),
      idle_timer_(executor_),
      last_read_(std::chrono::steady_clock::now()),
      id_(id),
      peer_(std::move(peer)),
      address_(std::move(address)),
      must_authenticate_(must_authenticate),
      may_be_link_(may_be_link),
      handler_(host.state(), host.options(), id, must_authenticate, host.counters(), wait_scope) {}

void Session::start() {
  // Whoever must authenticate has --handshake-timeout for the handshake; whoever need not,
  // --first-request-timeout for a first request. A connection that never speaks holds a
  // descriptor and a slot for nothing.
  const auto& o = host_.options();
  const auto limit = must_authenticate_ ? o.handshake_timeout : o.first_request_timeout;
  if (limit.count() > 0) {
    handshake_timer_.expires_after(limit);
    handshake_timer_.async_wait([self = shared_from_this(), limit](std::error_code ec) {
      if (ec || self->closed_) return;
      const std::string ms = " (" + std::to_string(limit.count()) + " ms)";
      if (self->must_authenticate_) {
        if (self->handler_.authenticated()) return;
        self->host_.log_flood_close(
            FloodClose::kTimeout, self->peer_,
            "token handshake not completed within --handshake-timeout" + ms);
        self->close({}, true, /*unauthenticated=*/true);
        return;
      }
      // Kept when a connection from the same address has spoken: PyTorch 1.13's TCPStore opens
      // a second connection beside its first that stays silent unless watch_key is called, and
      // its thread spins on a core if that connection is closed.
      if (self->handler_.requests() > 0 || self->host_.address_has_spoken(self->address_)) return;
      self->host_.log_flood_close(FloodClose::kTimeout, self->peer_,
                                  "no request completed within --first-request-timeout" + ms);
      self->host_.count_silent_close();
      self->close({}, false);
    });
  }
  if (o.idle_timeout.count() > 0) arm_idle_timer(o.idle_timeout);
  // A relay that passes replies on may let held requests run and reads resume.
  stream_->on_acknowledged([weak = weak_from_this()] {
    auto self = weak.lock();
    if (!self || self->closed_) return;
    self->account();
    if (self->handler_.has_input() && !self->handler_.waiting()) self->process();
    self->do_read();
  });
  do_read();
}

void Session::arm_idle_timer(std::chrono::steady_clock::duration after) {
  idle_timer_.expires_after(after);
  idle_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (ec || self->closed_) return;
    const auto idle = self->host_.options().idle_timeout;
    const auto silent = std::chrono::steady_clock::now() - self->last_read_;
    // A parked WAIT, a 1.13 watcher, or bytes still to send or execute: not idle, however quiet.
    const bool parked = self->handler_.waiting() || self->handler_.watching() ||
                        self->handler_.has_input() || self->unsent() > 0;
    if (!parked && silent >= idle) {
      self->host_.log_flood_close(FloodClose::kTimeout, self->peer_,
                                  "nothing received for --idle-timeout (" +
                                      std::to_string(idle.count()) + " ms) and nothing parked");
      self->host_.count_silent_close();
      self->close({}, false);
      return;
    }
    self->arm_idle_timer(parked ? std::chrono::steady_clock::duration(idle) : idle - silent);
  });
}

void Session::stop() {
  if (closed_) return;
  closed_ = true;
  host_.charge(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  idle_timer_.cancel();
  stream_->close(/*graceful=*/false);
}

std::shared_ptr<SessionStream> Session::release_stream(std::string* read_so_far) {
  const auto bytes = handler_.buffered();
  read_so_far->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  closed_ = true;
  host_.charge(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  idle_timer_.cancel();
  return std::move(stream_);
}

void Session::watch_partial_request() {
  bool partial = handler_.has_input() && !handler_.waiting();
  if (!partial) {
    if (partial_armed_) partial_timer_.cancel();
    partial_armed_ = false;
    return;
  }
  if (partial_armed_ || host_.options().request_timeout.count() <= 0) return;
  partial_armed_ = true;
  partial_timer_.expires_after(host_.options().request_timeout);
  partial_timer_.async_wait([self = shared_from_this()](std::error_code ec) {
    if (ec || self->closed_) return;
    self->partial_armed_ = false;
    if (self->handler_.has_input() && !self->handler_.waiting()) {
      self->close("request not completed within --request-timeout (" +
                      std::to_string(self->host_.options().request_timeout.count()) + " ms)",
                  true);
    }
  });
}

bool Session::backlogged() const {
  const auto& o = host_.options();
  const size_t in = handler_.buffered_input();
  // Unsent replies at the bound: requests will not run, so reading more only costs memory. A
  // parked WAIT: what follows it waits too, up to the same bound. Otherwise the buffer holds at
  // most one incomplete request, as large as --max-request-bytes allows.
  return unsent() >= o.max_unsent_bytes || (handler_.waiting() && in >= o.max_unsent_bytes) ||
         in > o.max_request_bytes;
}

void Session::account() {
  if (closed_) return;
  handler_.set_unsent_elsewhere(writing_bytes_ + stream_->unacknowledged());
  const size_t now = footprint();
  if (now == accounted_) return;
  const int64_t delta = static_cast<int64_t>(now) - static_cast<int64_t>(accounted_);
  accounted_ = now;
  host_.charge(delta);
}

void Session::close_for_memory(const std::string& reason) {
  close(reason, true);
}

void Session::give_way(const std::string& reason) {
  close(reason, false, /*unauthenticated=*/true);
}

void Session::do_read() {
  if (closed_ || read_in_flight_ || backlogged()) return;
  std::span<uint8_t> space = handler_.read_space();
  read_in_flight_ = true;
  stream_->async_read_some(
      space, [self = shared_from_this()](std::error_code ec, size_t n) { self->on_read(ec, n); });
}

void Session::on_read(std::error_code ec, size_t n) {
  read_in_flight_ = false;
  if (closed_) return;
  if (ec) {
    if (ec == asio::error::eof || ec == asio::error::connection_reset) {
      close({}, false);
    } else {
      close("read failed: " + ec.message(), false);
    }
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  last_read_ = now;
  handler_.read_at(now);
  handler_.commit(n);
  if (may_be_link_) {
    // A relay link says so in its first byte, which no TCPStore dialect starts with.
    may_be_link_ = false;
    if (handler_.buffered()[0] == link::kLinkOpcode) {
      host_.on_link_hello(id_);
      return;
    }
  }
  process();
  do_read();
}

void Session::process() {
  process_posted_ = false;
  if (closed_ || overflowed_) return;
  account();
  if (!handler_.process()) {
    close(handler_.close_reason(), true);
    return;
  }
  if (!spoke_ && (must_authenticate_ ? handler_.authenticated() : handler_.requests() > 0)) {
    spoke_ = true;
    host_.on_session_spoke(id_, address_);
  }
  watch_partial_request();
  flush();
  account();
  // This turn's replies reached the handler's share: the rest runs on a later turn, after the
  // other connections' events.
  if (handler_.yielded() && !process_posted_) {
    process_posted_ = true;
    asio::post(executor_, [self = shared_from_this()] {
      self->process();
      self->do_read();
    });
  }
}

void Session::wake() {
  if (closed_) return;
  bool more = handler_.wake();
  flush();
  account();
  // Requests that arrived during the wait run on a later turn of the loop, never inside the
  // write that woke us.
  if (more && !process_posted_) {
    process_posted_ = true;
    asio::post(executor_, [self = shared_from_this()] {
      self->process();
      self->do_read();
    });
  }
}

void Session::deliver(const WatchEvent& event) {
  if (closed_ || overflowed_) return;
  const uint64_t bound = host_.options().max_unsent_bytes;
  const size_t bytes = watch_notification_size(event);
  if (unsent() + bytes > bound) {
    overflowed_ = true;
    const std::string reason =
        std::to_string(unsent() + bytes) + " bytes unsent would pass --max-unsent-bytes (" +
        std::to_string(bound) + "): the client does not read what it is sent (watch notifications)";
    handler_.output().clear();  // never sent now: give the memory back at once
    account();
    host_.count_memory_close();
    asio::post(executor_, [self = shared_from_this(), reason] { self->close(reason, true); });
    return;
  }
  handler_.deliver(event);
  account();
  // Sent on a later turn: this may run inside this very session's request, whose reply the
  // handler has yet to put after the notification.
  if (!flush_posted_) {
    flush_posted_ = true;
    asio::post(executor_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->flush();
      self->account();
    });
  }
}

void Session::flush() {
  OutputQueue& out = handler_.output();
  if (closed_ || write_in_flight_ || out.empty()) return;
  writing_bytes_ = out.size();
  out.take(&writing_);
  for (const auto& piece : writing_) writing_buffers_.push_back(asio::buffer(piece.view()));
  write_in_flight_ = true;
  stream_->async_write(writing_buffers_, [self = shared_from_this()](std::error_code ec, size_t) {
    self->write_in_flight_ = false;
    // The pieces go, buffers and all: a thousand idle clients that once read
    // a large value hold nothing of it.
    self->writing_.clear();
    self->writing_buffers_.clear();
    self->writing_bytes_ = 0;
    self->account();
    if (self->closed_) return;
    if (ec) {
      self->close({}, false);
      return;
    }
    self->flush();
    self->account();
    // Output drained: buffered requests and reads may resume.
    if (self->handler_.has_input() && !self->handler_.waiting()) self->process();
    self->do_read();
  });
}

void Session::close(const std::string& reason, bool for_limit, bool unauthenticated) {
  if (closed_) return;
  unauthenticated = unauthenticated || handler_.refused_unauthenticated();
  if (reason.empty()) {
  } else if (unauthenticated) {
    host_.log_flood_close(FloodClose::kUnauthenticated, peer_, reason);
  } else if (handler_.rejected() == RejectReason::kMaxMemory) {
    // A client that retries its write reconnects and is refused again, as often as it likes.
    host_.log_flood_close(FloodClose::kMaxMemory, peer_, reason);
  } else {
    host_.log().warn("closing connection from {}: {}", peer_, reason);
  }
  closed_ = true;
  host_.charge(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  idle_timer_.cancel();
  stream_->close(/*graceful=*/true);
  host_.on_session_closed(id_, for_limit, unauthenticated);
}

}  // namespace cohort::rdzv

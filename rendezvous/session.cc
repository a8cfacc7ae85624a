#include "session.h"

#include <spdlog/spdlog.h>

#include <asio/post.hpp>
#include <asio/write.hpp>

namespace cohort::rdzv {
namespace {

constexpr size_t kKeepWriteBuffer = 64 * 1024;

}  // namespace

Session::Session(SessionHost& host, asio::ip::tcp::socket socket, SessionId id, std::string peer,
                 std::string address, bool must_authenticate)
    : host_(host),
      socket_(std::move(socket)),
      partial_timer_(socket_.get_executor()),
      handshake_timer_(socket_.get_executor()),
      id_(id),
      peer_(std::move(peer)),
      address_(std::move(address)),
      handler_(host.state(), host.options(), id, must_authenticate) {}

void Session::start() {
  const auto limit = host_.options().handshake_timeout;
  if (!handler_.authenticated() && limit.count() > 0) {
    handshake_timer_.expires_after(limit);
    handshake_timer_.async_wait([self = shared_from_this(), limit](std::error_code ec) {
      if (ec || self->closed_ || self->handler_.authenticated()) return;
      self->close("token handshake not completed within --handshake-timeout (" +
                      std::to_string(limit.count()) + " ms)",
                  true, /*unauthenticated=*/true);
    });
  }
  do_read();
}

void Session::stop() {
  if (closed_) return;
  closed_ = true;
  host_.charge(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  std::error_code ignored;
  socket_.close(ignored);
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
  handler_.set_unsent_elsewhere(writing_.size());
  const size_t now = footprint();
  if (now == accounted_) return;
  const int64_t delta = static_cast<int64_t>(now) - static_cast<int64_t>(accounted_);
  accounted_ = now;
  host_.charge(delta);
}

void Session::close_for_memory(const std::string& reason) {
  close(reason, true);
}

void Session::do_read() {
  if (closed_ || read_in_flight_ || backlogged()) return;
  std::span<uint8_t> space = handler_.read_space();
  read_in_flight_ = true;
  socket_.async_read_some(
      asio::buffer(space.data(), space.size()),
      [self = shared_from_this()](std::error_code ec, size_t n) { self->on_read(ec, n); });
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
  handler_.commit(n);
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
  watch_partial_request();
  flush();
  account();
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
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->process();
      self->do_read();
    });
  }
}

void Session::deliver(std::string_view bytes) {
  if (closed_ || overflowed_) return;
  const uint64_t bound = host_.options().max_unsent_bytes;
  if (unsent() + bytes.size() > bound) {
    overflowed_ = true;
    const std::string reason =
        std::to_string(unsent() + bytes.size()) + " bytes unsent would pass --max-unsent-bytes (" +
        std::to_string(bound) + "): the client does not read what it is sent (watch notifications)";
    std::string().swap(handler_.output());  // never sent now: give the memory back at once
    account();
    host_.count_memory_close();
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), reason] { self->close(reason, true); });
    return;
  }
  handler_.deliver(bytes);
  account();
  // Sent on a later turn: this may run inside this very session's request, whose reply the
  // handler has yet to put after the notification.
  if (!flush_posted_) {
    flush_posted_ = true;
    asio::post(socket_.get_executor(), [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->flush();
      self->account();
    });
  }
}

void Session::flush() {
  std::string& out = handler_.output();
  if (closed_ || write_in_flight_ || out.empty()) return;
  writing_.swap(out);
  out.clear();
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](std::error_code ec, size_t) {
                      self->write_in_flight_ = false;
                      // A large reply's buffer is given back, not kept for the next one: a
                      // thousand idle clients that once read a 10 MB value hold nothing.
                      if (self->writing_.capacity() > kKeepWriteBuffer) {
                        std::string().swap(self->writing_);
                      } else {
                        self->writing_.clear();
                      }
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
  if (!reason.empty()) host_.log().warn("closing connection from {}: {}", peer_, reason);
  closed_ = true;
  host_.charge(-static_cast<int64_t>(accounted_));
  accounted_ = 0;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  host_.on_session_closed(id_, for_limit, unauthenticated || handler_.refused_unauthenticated());
}

}  // namespace cohort::rdzv

#include "session.h"

#include <spdlog/spdlog.h>

#include <asio/post.hpp>
#include <asio/write.hpp>

namespace cohort::rdzv {

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
  return handler_.output().size() + writing_.size() > ProtocolHandler::kMaxQueuedOutput ||
         handler_.buffered_input() > host_.options().max_request_bytes;
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
  if (closed_) return;
  if (!handler_.process()) {
    close(handler_.close_reason(), true);
    return;
  }
  watch_partial_request();
  flush();
}

void Session::wake() {
  if (closed_) return;
  bool more = handler_.wake();
  flush();
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
  if (closed_) return;
  handler_.deliver(bytes);
  flush();
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
                      self->writing_.clear();
                      if (self->closed_) return;
                      if (ec) {
                        self->close({}, false);
                        return;
                      }
                      self->flush();
                      // Output drained: buffered requests and reads may resume.
                      if (self->handler_.has_input() && !self->handler_.waiting()) self->process();
                      self->do_read();
                    });
}

void Session::close(const std::string& reason, bool for_limit, bool unauthenticated) {
  if (closed_) return;
  if (!reason.empty()) host_.log().warn("closing connection from {}: {}", peer_, reason);
  closed_ = true;
  partial_timer_.cancel();
  handshake_timer_.cancel();
  std::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  host_.on_session_closed(id_, for_limit, unauthenticated || handler_.refused_unauthenticated());
}

}  // namespace cohort::rdzv

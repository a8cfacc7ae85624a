#include "server/link_session.h"

#include <spdlog/spdlog.h>

#include <array>
#include <asio/post.hpp>
#include <asio/write.hpp>
#include <cstring>

#include "cohort/rdzv/relay_wire.h"

namespace cohort::rdzv {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
// A relay that goes on sending this much to a channel it was asked to pause is broken; the
// channel is closed rather than buffered without end.
constexpr size_t kPauseOvershoot = 16 << 20;

}  // namespace

// ---- LinkSession ------------------------------------------------------------------------------

LinkSession::LinkSession(LinkHost& host, asio::ip::tcp::socket socket, uint64_t id,
                         std::string peer, std::string address, std::string read_so_far,
                         uint64_t max_unsent_bytes)
    : host_(host),
      socket_(std::move(socket)),
      id_(id),
      peer_(std::move(peer)),
      address_(std::move(address)),
      max_unsent_bytes_(max_unsent_bytes),
      in_(std::move(read_so_far)) {}

void LinkSession::start() {
  std::string error;
  if (!handle_input(&error)) {
    close_link(error);
    return;
  }
  do_read();
}

void LinkSession::stop() {
  if (closed_) return;
  closed_ = true;
  std::error_code ignored;
  socket_.close(ignored);
  auto channels = std::move(channels_);
  channels_.clear();
  for (auto& [n, ch] : channels) ch->on_end();
}

void LinkSession::do_read() {
  if (closed_) return;
  // Wait for readability, then read into one buffer the loop shares: thousands of idle links
  // hold no read buffer of their own (only a partial frame's bytes, between reads).
  socket_.async_wait(asio::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](std::error_code ec) { self->on_readable(ec); });
}

void LinkSession::on_readable(std::error_code ec) {
  if (closed_) return;
  static thread_local std::array<char, kReadChunk> scratch;
  size_t n = 0;
  if (!ec) {
    socket_.non_blocking(true, ec);
    if (!ec) n = socket_.read_some(asio::buffer(scratch), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      do_read();
      return;
    }
  }
  if (ec) {
    close_link(ec == asio::error::eof || ec == asio::error::connection_reset
                   ? std::string()
                   : "read failed: " + ec.message());
    return;
  }
  in_.append(scratch.data(), n);
  std::string error;
  if (!handle_input(&error)) {
    close_link(error);
    return;
  }
  do_read();
}

bool LinkSession::handle_input(std::string* error) {
  auto pending = [this] {
    return std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(in_.data()) + in_pos_,
                                    in_.size() - in_pos_);
  };
  if (!welcomed_) {
    switch (link::check_hello(pending())) {
      case link::HelloStatus::kNeedMore:
        return true;
      case link::HelloStatus::kBad:
        *error = "not a relay link this cohortd knows (wrong magic or version)";
        return false;
      case link::HelloStatus::kComplete:
        break;
    }
    in_pos_ += link::kHelloBytes;
    welcomed_ = true;
    out_ += link::welcome(max_unsent_bytes_);
    flush();
  }
  while (!closed_) {
    link::Frame f;
    DecodeResult r = link::decode_frame(pending(), &f);
    if (r.status == DecodeStatus::kNeedMore) break;
    if (r.status == DecodeStatus::kBad) {
      *error = r.error;
      return false;
    }
    if (!handle_frame(static_cast<uint8_t>(f.kind), f.channel, f.payload, error)) return false;
    in_pos_ += r.consumed;
  }
  if (in_pos_ == in_.size()) {
    // Empty: give a large buffer back (idle links hold nothing).
    if (in_.capacity() > 4096) {
      std::string().swap(in_);
    } else {
      in_.clear();
    }
    in_pos_ = 0;
  } else if (in_pos_ > 0) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  return true;
}

bool LinkSession::handle_frame(uint8_t kind, uint32_t channel, std::string_view payload,
                               std::string* error) {
  using link::FrameKind;
  auto it = channels_.find(channel);
  switch (static_cast<FrameKind>(kind)) {
    case FrameKind::kOpen: {
      if (it != channels_.end()) {
        *error = "OPEN of channel " + std::to_string(channel) + ", which is open";
        return false;
      }
      auto stream =
          std::make_shared<ChannelStream>(weak_from_this(), channel, socket_.get_executor());
      channels_.emplace(channel, stream);
      if (!host_.open_channel(*this, stream)) {
        channels_.erase(channel);
        send_frame(static_cast<uint8_t>(FrameKind::kClose), channel);
      }
      return true;
    }
    case FrameKind::kData:
      // Bytes for a channel that has closed meanwhile go nowhere, as they would on a socket.
      if (it != channels_.end()) it->second->on_data(payload);
      return true;
    case FrameKind::kClose:
      if (it != channels_.end()) it->second->on_end();
      return true;
    case FrameKind::kAck: {
      link::Frame f{FrameKind::kAck, channel, payload};
      if (it != channels_.end() && !it->second->on_ack(link::ack_bytes(f))) {
        *error = "ACK of more bytes than channel " + std::to_string(channel) + " was sent";
        return false;
      }
      return true;
    }
    case FrameKind::kPause:
    case FrameKind::kResume:
      *error = std::string(link::frame_kind_name(static_cast<FrameKind>(kind))) +
               " from a relay (only cohortd sends it)";
      return false;
  }
  return true;
}

void LinkSession::send_frame(uint8_t kind, uint32_t channel) {
  if (closed_) return;
  link::put_frame(&out_, static_cast<link::FrameKind>(kind), channel);
  flush_soon();
}

void LinkSession::send_data(uint32_t channel, std::string_view bytes) {
  if (closed_) return;
  link::put_data(&out_, channel, bytes);
  flush_soon();
}

void LinkSession::flush_soon() {
  // Everything the channels write in this turn of the loop (the replies to a batch of frames,
  // a wake of a whole node) goes in one write.
  if (flush_posted_ || write_in_flight_) return;
  flush_posted_ = true;
  asio::post(socket_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    self->flush();
  });
}

void LinkSession::flush() {
  if (closed_ || write_in_flight_ || out_.empty()) return;
  writing_.swap(out_);
  out_.clear();
  write_in_flight_ = true;
  asio::async_write(socket_, asio::buffer(writing_),
                    [self = shared_from_this()](std::error_code ec, size_t) {
                      self->write_in_flight_ = false;
                      self->writing_.clear();
                      if (self->closed_) return;
                      if (ec) {
                        self->close_link("write failed: " + ec.message());
                        return;
                      }
                      self->flush();
                      self->release_blocked_writes();
                    });
}

void LinkSession::release_blocked_writes() {
  if (blocked_writes_.empty() || out_.size() >= kOutputLimit) return;
  auto blocked = std::move(blocked_writes_);
  blocked_writes_.clear();
  for (uint32_t n : blocked) {
    auto it = channels_.find(n);
    if (it != channels_.end()) it->second->maybe_finish_write();
  }
}

void LinkSession::close_link(const std::string& reason) {
  if (closed_) return;
  if (!reason.empty()) host_.log().warn("closing relay link from {}: {}", peer_, reason);
  stop();
  host_.on_link_closed(*this);
}

// ---- ChannelStream ----------------------------------------------------------------------------

void ChannelStream::async_read_some(std::span<uint8_t> into, Handler done) {
  read_into_ = into;
  read_done_ = std::move(done);
  fulfil_read();
}

void ChannelStream::fulfil_read() {
  if (!read_done_) return;
  const size_t unread = in_.size() - in_pos_;
  if (unread == 0) {
    if (ended_ || closed_) {
      asio::post(executor_, [done = std::move(read_done_)] { done(asio::error::eof, 0); });
      read_done_ = nullptr;
    }
    return;
  }
  const size_t n = std::min(unread, read_into_.size());
  std::memcpy(read_into_.data(), in_.data() + in_pos_, n);
  in_pos_ += n;
  if (in_pos_ == in_.size()) {
    if (in_.capacity() > 4096) {
      std::string().swap(in_);
    } else {
      in_.clear();
    }
    in_pos_ = 0;
  } else if (in_pos_ > LinkSession::kChannelWindow) {
    in_.erase(0, in_pos_);
    in_pos_ = 0;
  }
  asio::post(executor_, [done = std::move(read_done_), n] { done({}, n); });
  read_done_ = nullptr;
  if (we_paused_ && in_.size() - in_pos_ < LinkSession::kChannelWindow / 2) {
    we_paused_ = false;
    if (auto link = link_.lock()) link->send_frame(uint8_t(link::FrameKind::kResume), channel_);
  }
}

void ChannelStream::on_data(std::string_view bytes) {
  if (closed_ || ended_) return;
  in_.append(bytes);
  const size_t unread = in_.size() - in_pos_;
  if (unread >= LinkSession::kChannelWindow && !we_paused_) {
    we_paused_ = true;
    if (auto link = link_.lock()) link->send_frame(uint8_t(link::FrameKind::kPause), channel_);
  }
  if (unread > LinkSession::kChannelWindow + kPauseOvershoot) {
    // The relay ignores PAUSE: end the channel, as if its worker had gone.
    if (auto link = link_.lock()) {
      link->host_.log().warn("relay link from {}: channel {} sent {} bytes past PAUSE; closing it",
                             link->peer(), channel_, unread);
    }
    in_.clear();
    in_pos_ = 0;
    on_end();
    return;
  }
  fulfil_read();
}

void ChannelStream::on_end() {
  ended_ = true;
  fulfil_read();
  maybe_finish_write();
}

bool ChannelStream::on_ack(uint64_t bytes) {
  if (bytes > sent_ - acked_) return false;
  acked_ += bytes;
  if (on_acked_ && !closed_) asio::post(executor_, on_acked_);
  return true;
}

void ChannelStream::async_write(const std::vector<asio::const_buffer>& buffers, Handler done) {
  write_done_ = std::move(done);
  write_bytes_ = asio::buffer_size(buffers);
  auto link = link_.lock();
  if (link && !link->closed_ && !closed_ && !ended_) {
    // Copied into the link's output (a large value shared with the store is copied here).
    for (const auto& b : buffers)
      link->send_data(channel_, std::string_view(static_cast<const char*>(b.data()), b.size()));
    sent_ += write_bytes_;
  }
  maybe_finish_write();
}

void ChannelStream::maybe_finish_write() {
  if (!write_done_) return;
  auto link = link_.lock();
  const bool gone = !link || link->closed_ || closed_;
  if (!gone) {
    if (link->out_.size() >= LinkSession::kOutputLimit) {
      link->blocked_writes_.insert(channel_);
      return;
    }
  }
  std::error_code ec = gone ? std::error_code(asio::error::broken_pipe) : std::error_code();
  asio::post(executor_, [done = std::move(write_done_), ec, n = write_bytes_] { done(ec, n); });
  write_done_ = nullptr;
}

void ChannelStream::close(bool graceful) {
  (void)graceful;  // the relay delivers what it has before it closes the worker either way
  if (closed_) return;
  closed_ = true;
  on_acked_ = nullptr;  // it holds the session
  if (read_done_) {
    asio::post(executor_,
               [done = std::move(read_done_)] { done(asio::error::operation_aborted, 0); });
    read_done_ = nullptr;
  }
  maybe_finish_write();
  if (auto link = link_.lock()) {
    if (!ended_) link->send_frame(uint8_t(link::FrameKind::kClose), channel_);
    link->forget(channel_);
  }
}

}  // namespace cohort::rdzv

// SessionStream: what a store Session reads from and writes to. A TCP socket (TcpSessionStream),
// or one channel of a relay link (relay_link.h), so that a worker behind a node's relay gets the
// very session, limits and timers included, that a direct connection gets.
//
// Thread safety: the loop thread only. At most one read and one write in flight at a time; their
// handlers run on the loop, never inside the call that started them.
#pragma once

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/ip/tcp.hpp>
#include <functional>
#include <span>
#include <string_view>
#include <system_error>
#include <vector>

namespace cohort::rdzv {

class SessionStream {
 public:
  using Handler = std::function<void(std::error_code, size_t)>;
  virtual ~SessionStream() = default;
  // Reads at least one byte into `into`; asio::error::eof when the peer has closed.
  virtual void async_read_some(std::span<uint8_t> into, Handler done) = 0;
  // Writes all of `buffers`, in order; they (and what they point to) must stay valid until
  // `done` runs.
  virtual void async_write(const std::vector<asio::const_buffer>& buffers, Handler done) = 0;
  // Ends the stream. `graceful`: the peer may still get what was already written, then an end of
  // stream; otherwise the connection is simply dropped (server shutdown).
  virtual void close(bool graceful) = 0;
  virtual asio::any_io_executor executor() = 0;
  // Bytes whose write has finished but which have not reached the peer yet, as far as the stream
  // knows (a relay channel: not yet acknowledged by the relay; a socket: 0, the kernel's buffers
  // are not counted). They count as unsent for --max-unsent-bytes.
  virtual size_t unacknowledged() const { return 0; }
  // `fn` runs (on the loop, never inside a call of the session's) when unacknowledged() drops.
  virtual void on_acknowledged(std::function<void()> fn) { (void)fn; }
};

class TcpSessionStream final : public SessionStream {
 public:
  explicit TcpSessionStream(asio::ip::tcp::socket socket) : socket_(std::move(socket)) {}
  void async_read_some(std::span<uint8_t> into, Handler done) override;
  void async_write(const std::vector<asio::const_buffer>& buffers, Handler done) override;
  void close(bool graceful) override;
  asio::any_io_executor executor() override { return socket_.get_executor(); }
  // The socket, for a connection that turns out to be a relay link (server.cc).
  asio::ip::tcp::socket& socket() { return socket_; }

 private:
  asio::ip::tcp::socket socket_;
};

}  // namespace cohort::rdzv

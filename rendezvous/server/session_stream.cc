#include "server/session_stream.h"

#include <asio/write.hpp>

namespace cohort::rdzv {

void TcpSessionStream::async_read_some(std::span<uint8_t> into, Handler done) {
  socket_.async_read_some(asio::buffer(into.data(), into.size()), std::move(done));
}

void TcpSessionStream::async_write(const std::vector<asio::const_buffer>& buffers, Handler done) {
  asio::async_write(socket_, buffers, std::move(done));
}

void TcpSessionStream::close(bool graceful) {
  std::error_code ignored;
  if (graceful) socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

}  // namespace cohort::rdzv

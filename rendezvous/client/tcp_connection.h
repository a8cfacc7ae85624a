// TcpConnection: one blocking-with-deadlines TCP connection to a store server, for TcpStore.
// Non-blocking socket + poll(), so every read and write honours a deadline. Not thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cohort/rdzv/codec.h"

namespace cohort::detail {

using Clock = std::chrono::steady_clock;

// The peer closed or reset the connection, or a send failed. The stream is unusable.
class ConnectionLost : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A deadline passed while waiting for bytes. The stream position is unknown unless the caller
// knows which reply it is still owed.
class ReplyTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class TcpConnection {
 public:
  // Connects to host:port, retrying refused, reset and unreachable attempts with exponential
  // backoff and jitter until `deadline`. Throws std::runtime_error with the last error.
  // Stops early (like a timeout) once *abandon is true; so do the connection's reads and writes
  // (ConnectionLost), within 20 ms, however long their deadline. `abandon` must
  // outlive the connection.
  static TcpConnection connect(const std::string& host, int port, Clock::time_point deadline,
                               const std::atomic<bool>* abandon = nullptr);

  TcpConnection(TcpConnection&& other) noexcept;
  TcpConnection& operator=(TcpConnection&& other) noexcept;
  ~TcpConnection();

  int fd() const { return fd_; }
  void send_all(std::string_view bytes, Clock::time_point deadline);
  uint8_t read_u8(Clock::time_point deadline);
  uint32_t read_u32(Clock::time_point deadline);
  int64_t read_i64(Clock::time_point deadline);
  // Exactly n bytes.
  std::string read_exact(size_t n, Clock::time_point deadline);
  // A u64-length-prefixed string; lengths above `max` are treated as a broken stream.
  std::string read_bytes(Clock::time_point deadline, uint64_t max = 1ull << 32);
  // The reply to a request of `op` (with `keys` keys: MULTI_GET's reply has one string per key),
  // decoded by rdzv::decode_reply. The views in *out point into this connection's buffer and stay
  // valid until its next read. Byte strings longer than `max` are treated as a broken stream.
  void read_reply(rdzv::Op op, size_t keys, Clock::time_point deadline, rdzv::Reply* out,
                  uint64_t max = 1ull << 32);

 private:
  TcpConnection(int fd, const std::atomic<bool>* abandon) : fd_(fd), abandon_(abandon) {}
  // Ensures at least n unread bytes are buffered.
  void fill(size_t n, Clock::time_point deadline);

  int fd_ = -1;
  const std::atomic<bool>* abandon_ = nullptr;
  std::vector<char> buf_;
  size_t pos_ = 0;
};

}  // namespace cohort::detail

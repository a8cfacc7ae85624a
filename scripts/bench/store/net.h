// Socket helpers for the store benchmark: an address, an owned descriptor, blocking setup I/O.
//
// The load generators use raw non-blocking sockets and epoll so that the generator stays cheap and
// behaves the same against every server; these helpers cover the parts outside the hot loops.
// Errors throw cohort::Error naming the address and the system error. Thread-safe (no state).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace cohort::bench {

// A resolved TCP address, and how to print it.
struct Endpoint {
  sockaddr_storage addr{};
  socklen_t len = 0;
  std::string text;  // "host:port"
};

// Resolves "host:port" (numeric or a name; IPv6 as "[::1]:29500"). Throws cohort::Error.
Endpoint resolve_endpoint(const std::string& host_port);

// An owned file descriptor; closes on destruction. Move-only.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset();

 private:
  int fd_ = -1;
};

// A blocking, connected TCP socket with TCP_NODELAY, or throws after `timeout`.
Fd connect_blocking(const Endpoint& ep, std::chrono::milliseconds timeout);

// Sends all of `bytes` / reads exactly `n` bytes on a blocking socket within `timeout`; throws on
// error, end of stream or timeout (`what` names the step in the message).
void send_all(int fd, std::string_view bytes, std::chrono::milliseconds timeout, const char* what);
std::string recv_exact(int fd, size_t n, std::chrono::milliseconds timeout, const char* what);

void set_nonblocking(int fd);
void set_nodelay(int fd);

// strerror(err) as a std::string.
std::string errno_text(int err);

}  // namespace cohort::bench

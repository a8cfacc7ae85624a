// Test helper: a bare TCP client that sends exact bytes and reads exact replies with deadlines.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>

namespace cohort::testing {

class RawClient {
 public:
  explicit RawClient(int port, const char* host = "127.0.0.1") {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, host, &a.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0)
      throw std::runtime_error("connect failed");
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  RawClient(RawClient&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawClient(const RawClient&) = delete;
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  int fd() const { return fd_; }

  void send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) throw std::runtime_error("send failed");
      off += static_cast<size_t>(n);
    }
  }

  // Reads exactly n bytes; nullopt on EOF/reset or when the deadline passes first.
  std::optional<std::string> read(
      size_t n, std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (out.size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char buf[65536];
      ssize_t got = ::recv(fd_, buf, std::min(sizeof(buf), n - out.size()), 0);
      if (got <= 0) return std::nullopt;
      out.append(buf, static_cast<size_t>(got));
    }
    return out;
  }

  // True once the server has closed the connection (EOF or reset) within the timeout.
  bool closed_by_peer(std::chrono::milliseconds timeout = std::chrono::milliseconds(5000)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      ssize_t got = ::recv(fd_, buf, sizeof(buf), 0);
      if (got <= 0) return true;
    }
  }

  // True when nothing arrives within `quiet`.
  bool silent_for(std::chrono::milliseconds quiet) {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(quiet.count())) == 0;
  }

 private:
  int fd_ = -1;
};

}  // namespace cohort::testing

#include "net.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "cohort/error.h"

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) throw Error(std::string("poll: ") + errno_text(errno));
  }
}

}  // namespace

std::string errno_text(int err) {
  return std::strerror(err);
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Endpoint resolve_endpoint(const std::string& host_port) {
  auto colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    throw Error("expected host:port, got '" + host_port + "'");
  }
  std::string host = host_port.substr(0, colon);
  std::string port = host_port.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) {
    throw Error("cannot resolve '" + host_port + "': " + ::gai_strerror(rc));
  }
  Endpoint ep;
  std::memcpy(&ep.addr, res->ai_addr, res->ai_addrlen);
  ep.len = res->ai_addrlen;
  ep.text = host_port;
  ::freeaddrinfo(res);
  return ep;
}

void set_nonblocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw Error("fcntl(O_NONBLOCK): " + errno_text(errno));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

Fd connect_blocking(const Endpoint& ep, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  Fd fd(::socket(ep.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw Error("socket: " + errno_text(errno));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ep.addr), ep.len) != 0) {
    if (errno != EINPROGRESS) throw Error("connect to " + ep.text + ": " + errno_text(errno));
    if (!wait_fd(fd.get(), POLLOUT, deadline)) throw Error("connect to " + ep.text + ": timeout");
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) throw Error("connect to " + ep.text + ": " + errno_text(err));
  }
  int flags = ::fcntl(fd.get(), F_GETFL, 0);
  ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  set_nodelay(fd.get());
  return fd;
}

void send_all(int fd, std::string_view bytes, std::chrono::milliseconds timeout, const char* what) {
  auto deadline = Clock::now() + timeout;
  while (!bytes.empty()) {
    if (!wait_fd(fd, POLLOUT, deadline)) throw Error(std::string(what) + ": send timed out");
    ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(std::string(what) + ": send: " + errno_text(errno));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

std::string recv_exact(int fd, size_t n, std::chrono::milliseconds timeout, const char* what) {
  auto deadline = Clock::now() + timeout;
  std::string out(n, '\0');
  size_t have = 0;
  while (have < n) {
    if (!wait_fd(fd, POLLIN, deadline)) throw Error(std::string(what) + ": no reply (timeout)");
    ssize_t r = ::recv(fd, out.data() + have, n - have, MSG_DONTWAIT);
    if (r == 0) throw Error(std::string(what) + ": the server closed the connection");
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw Error(std::string(what) + ": recv: " + errno_text(errno));
    }
    have += static_cast<size_t>(r);
  }
  return out;
}

}  // namespace cohort::bench

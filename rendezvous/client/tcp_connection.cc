#include "client/tcp_connection.h"
#include "cohort/error.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <thread>

#include "cohort/base/deadline.h"
#include "cohort/base/net.h"
#include "cohort/base/random.h"

namespace cohort::detail {
namespace {

// How often a wait looks at its owner's abandon flag: a connection being abandoned (an agent
// stopping) is given up within this, even while a server that accepted it never answers.
constexpr int kAbandonCheckMs = 20;

// Waits for `events` on fd; false when the deadline passed. Throws ConnectionLost once *abandon
// is true.
bool wait_fd(int fd, short events, Clock::time_point deadline,
             const std::atomic<bool>* abandon = nullptr) {
  for (;;) {
    if (abandon != nullptr && abandon->load()) throw ConnectionLost("abandoned by its owner");
    pollfd p{fd, events, 0};
    int ms = poll_ms_left(deadline);
    if (abandon != nullptr) ms = std::min(ms, kAbandonCheckMs);
    int rc = ::poll(&p, 1, ms);
    if (rc > 0) return true;
    if (rc == 0 && (abandon == nullptr || Clock::now() >= deadline)) return false;
    if (rc < 0 && errno != EINTR)
      throw ConnectionLost(std::string("poll: ") + std::strerror(errno));
  }
}

// One non-blocking connect attempt to one address; returns the fd or -1 with errno set.
int try_connect(const addrinfo* ai, Clock::time_point deadline, const std::atomic<bool>* abandon) {
  int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
  if (fd < 0) return -1;
  if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) {
      int e = errno;
      ::close(fd);
      errno = e;
      return -1;
    }
    bool connected = false;
    try {
      connected = wait_fd(fd, POLLOUT, deadline, abandon);
    } catch (const ConnectionLost&) {
      ::close(fd);
      throw;
    }
    if (!connected) {
      ::close(fd);
      errno = ETIMEDOUT;
      return -1;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      ::close(fd);
      errno = err;
      return -1;
    }
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

TcpConnection TcpConnection::connect(const std::string& host_in, int port,
                                     Clock::time_point deadline, const std::atomic<bool>* abandon) {
  std::string host = strip_brackets(host_in);
  std::string last_error = "no attempt made";
  auto backoff = std::chrono::milliseconds(10);
  std::minstd_rand rng(static_cast<std::minstd_rand::result_type>(random_u64()));
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc != 0) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        // Bound each attempt so a black-holed address does not eat the whole deadline.
        auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(5));
        int fd = -1;
        try {
          fd = try_connect(ai, attempt_deadline, abandon);
        } catch (const ConnectionLost&) {
          ::freeaddrinfo(res);
          throw IoError("connect abandoned");
        }
        if (fd >= 0) {
          ::freeaddrinfo(res);
          return TcpConnection(fd, abandon);
        }
        int e = errno;
        last_error = std::string(std::strerror(e)) + " (errno " + std::to_string(e) + ")";
      }
      ::freeaddrinfo(res);
    }
    if (Clock::now() >= deadline) break;
    // Exponential backoff with ±50% jitter, so a thousand clients do not retry in lockstep.
    auto jittered = std::chrono::milliseconds(
        std::uniform_int_distribution<int64_t>(backoff.count() / 2, backoff.count() * 3 / 2)(rng));
    auto wake = std::min(deadline, Clock::now() + jittered);
    // Sleep in short slices so that an abandoning owner is heard promptly.
    while (Clock::now() < wake) {
      if (abandon != nullptr && abandon->load()) throw IoError("connect abandoned");
      std::this_thread::sleep_until(std::min(wake, Clock::now() + std::chrono::milliseconds(20)));
    }
    if (abandon != nullptr && abandon->load()) throw IoError("connect abandoned");
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  throw IoError(last_error);
}

TcpConnection::TcpConnection(TcpConnection&& o) noexcept
    : fd_(o.fd_), abandon_(o.abandon_), buf_(std::move(o.buf_)), pos_(o.pos_) {
  o.fd_ = -1;
}

TcpConnection& TcpConnection::operator=(TcpConnection&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    abandon_ = o.abandon_;
    buf_ = std::move(o.buf_);
    pos_ = o.pos_;
    o.fd_ = -1;
  }
  return *this;
}

TcpConnection::~TcpConnection() {
  if (fd_ >= 0) ::close(fd_);
}

void TcpConnection::send_all(std::string_view bytes, Clock::time_point deadline) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd_, POLLOUT, deadline, abandon_)) throw ReplyTimeout("send timed out");
      continue;
    }
    throw ConnectionLost(std::string("send failed: ") + std::strerror(errno));
  }
}

void TcpConnection::fill(size_t n, Clock::time_point deadline) {
  if (buf_.size() - pos_ >= n) return;
  if (pos_ > 0) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(pos_));
    pos_ = 0;
  }
  while (buf_.size() < n) {
    size_t old = buf_.size();
    size_t want = std::max<size_t>(n - old, 4096);
    buf_.resize(old + want);
    ssize_t got = ::recv(fd_, buf_.data() + old, want, 0);
    if (got > 0) {
      buf_.resize(old + static_cast<size_t>(got));
      continue;
    }
    buf_.resize(old);
    if (got == 0) throw ConnectionLost("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd_, POLLIN, deadline, abandon_))
        throw ReplyTimeout("no reply before the deadline");
      continue;
    }
    throw ConnectionLost(std::string("recv failed: ") + std::strerror(errno));
  }
}

uint8_t TcpConnection::read_u8(Clock::time_point deadline) {
  fill(1, deadline);
  return static_cast<uint8_t>(buf_[pos_++]);
}

uint32_t TcpConnection::read_u32(Clock::time_point deadline) {
  fill(4, deadline);
  uint32_t v;
  std::memcpy(&v, buf_.data() + pos_, 4);
  pos_ += 4;
  return v;
}

int64_t TcpConnection::read_i64(Clock::time_point deadline) {
  fill(8, deadline);
  int64_t v;
  std::memcpy(&v, buf_.data() + pos_, 8);
  pos_ += 8;
  return v;
}

std::string TcpConnection::read_exact(size_t n, Clock::time_point deadline) {
  fill(n, deadline);
  std::string s(buf_.data() + pos_, n);
  pos_ += n;
  return s;
}

std::string TcpConnection::read_bytes(Clock::time_point deadline, uint64_t max) {
  uint64_t n = static_cast<uint64_t>(read_i64(deadline));
  if (n > max) throw ConnectionLost("reply announces " + std::to_string(n) + " bytes");
  fill(n, deadline);
  std::string s(buf_.data() + pos_, n);
  pos_ += n;
  return s;
}

void TcpConnection::read_reply(rdzv::Op op, size_t keys, Clock::time_point deadline,
                               rdzv::Reply* out, uint64_t max) {
  size_t want = 1;
  for (;;) {
    fill(want, deadline);
    std::span<const uint8_t> in(reinterpret_cast<const uint8_t*>(buf_.data() + pos_),
                                buf_.size() - pos_);
    rdzv::DecodeResult r = rdzv::decode_reply(op, keys, in, out, max);
    if (r.status == rdzv::DecodeStatus::kComplete) {
      pos_ += r.consumed;
      return;
    }
    if (r.status == rdzv::DecodeStatus::kBad) throw ConnectionLost(r.error);
    want = r.consumed;  // at least one byte more than buffered
  }
}

}  // namespace cohort::detail

#include "cpu/tcp_mesh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "cohort/base/net.h"
#include "cohort/error.h"

namespace cohort::detail {
namespace {

constexpr uint64_t kHelloMagic = 0x6f6c6c65682d6863ULL;  // "ch-hello"

struct Hello {
  uint64_t magic;
  uint64_t token;
  uint32_t index;
  uint32_t reserved;
};

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

std::string errno_text() {
  return std::strerror(errno);
}

int ms_left(const Call& call) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(call.deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1000));
}

addrinfo* resolve(const std::string& host, const std::string& port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    throw Error("cohort: cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  return res;
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

std::string format_address(const sockaddr* sa) {
  char host[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    port = ntohs(in6->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(port);
  }
  auto* in = reinterpret_cast<const sockaddr_in*>(sa);
  ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
  port = ntohs(in->sin_port);
  return std::string(host) + ":" + std::to_string(port);
}

void split_address(const std::string& addr, std::string* host, std::string* port) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos) throw Error("cohort: malformed peer address '" + addr + "'");
  *host = addr.substr(0, colon);
  *port = addr.substr(colon + 1);
  *host = strip_brackets(*host);
}

// Blocking-with-deadline write/read of a small message on a (non-blocking) socket.
bool io_all(int fd, void* buf, size_t n, bool write, const Call& call) {
  char* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = write ? ::send(fd, p + done, n - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : ::recv(fd, p + done, n - done, MSG_DONTWAIT);
    if (r > 0) {
      done += static_cast<size_t>(r);
      continue;
    }
    if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return false;
    if (Clock::now() >= call.deadline) return false;
    pollfd pfd{fd, static_cast<short>(write ? POLLOUT : POLLIN), 0};
    ::poll(&pfd, 1, std::max(1, ms_left(call)));
  }
  return true;
}

int connect_with_deadline(const std::string& addr, int peer_rank, const Call& call) {
  std::string host, port;
  split_address(addr, &host, &port);
  std::string last = "no attempt";
  while (true) {
    addrinfo* res = resolve(host, port, false);
    for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
      Fd fd(
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (fd.get() < 0) continue;
      if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
        last = errno_text();
        continue;
      }
      pollfd pfd{fd.get(), POLLOUT, 0};
      while (::poll(&pfd, 1, std::max(1, ms_left(call))) == 0 && Clock::now() < call.deadline) {
      }
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
      if ((pfd.revents & POLLOUT) != 0 && err == 0) {
        ::freeaddrinfo(res);
        return fd.release();
      }
      last = err != 0 ? std::strerror(err) : "connect timed out";
    }
    ::freeaddrinfo(res);
    if (Clock::now() >= call.deadline) {
      throw PeerFailure(
          peer_rank, true,
          "cannot connect to rank " + std::to_string(peer_rank) + " at " + addr + ": " + last);
    }
    // Refused: the peer's listener may not exist yet. Retry shortly, bounded by the deadline.
    pollfd none{-1, 0, 0};
    ::poll(&none, 0, std::min(10, ms_left(call)));
  }
}

}  // namespace

TcpMesh::TcpMesh(std::vector<int> members, int index)
    : members_(std::move(members)), index_(index) {
  pairs_.resize(members_.size());
}

void TcpMesh::shutdown_all() noexcept {
  for (auto& p : pairs_) {
    if (p) p->shutdown();
  }
}

std::unique_ptr<TcpMesh> TcpMesh::connect(Store& store, const std::string& key_prefix,
                                          std::vector<int> members, int index,
                                          const std::string& listen_host, uint64_t token,
                                          const Call& call) {
  std::unique_ptr<TcpMesh> mesh(new TcpMesh(std::move(members), index));
  const int n = mesh->size();
  if (n == 1) return mesh;

  // Listen on an ephemeral port of listen_host.
  addrinfo* res = resolve(listen_host, "0", true);
  Fd listener;
  std::string bound;
  for (addrinfo* ai = res; ai != nullptr && listener.get() < 0; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
    if (fd.get() < 0) continue;
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd.get(), n + 16) != 0) {
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    bound = format_address(reinterpret_cast<sockaddr*>(&ss));
    listener.reset(fd.release());
  }
  ::freeaddrinfo(res);
  if (listener.get() < 0) {
    throw Error("cohort: cannot listen on " + listen_host +
                " for the process group's TCP links: " + errno_text());
  }
  store.set(key_prefix + "/" + std::to_string(index), bound);

  // Connect to every earlier member.
  for (int j = 0; j < index; ++j) {
    const std::string key = key_prefix + "/" + std::to_string(j);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(call.deadline - Clock::now());
    try {
      store.wait(std::vector<std::string>{key}, std::max(left, std::chrono::milliseconds(1)));
    } catch (const StoreTimeoutError&) {
      throw PeerFailure(
          mesh->global_rank(j), true,
          "rank " + std::to_string(mesh->global_rank(j)) + " did not publish its address in time");
    }
    const int fd = connect_with_deadline(store.get(key), mesh->global_rank(j), call);
    Hello hello{kHelloMagic, token, static_cast<uint32_t>(index), 0};
    if (!io_all(fd, &hello, sizeof(hello), true, call)) {
      ::close(fd);
      throw PeerFailure(mesh->global_rank(j), false,
                        "rank " + std::to_string(mesh->global_rank(j)) + " dropped the connection");
    }
    set_nodelay(fd);
    mesh->pairs_[j] = std::make_unique<TcpPair>(fd, mesh->global_rank(j));
  }

  // Accept every later member.
  int missing = n - 1 - index;
  while (missing > 0) {
    if (Clock::now() >= call.deadline) {
      int first = -1;
      for (int j = index + 1; j < n && first < 0; ++j) {
        if (!mesh->pairs_[j]) first = mesh->global_rank(j);
      }
      throw PeerFailure(first, true, "rank " + std::to_string(first) + " did not connect in time");
    }
    pollfd pfd{listener.get(), POLLIN, 0};
    if (::poll(&pfd, 1, std::max(1, ms_left(call))) <= 0) continue;
    Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (fd.get() < 0) continue;
    Hello hello{};
    Call hello_call = call;
    hello_call.deadline = std::min(call.deadline, Clock::now() + std::chrono::seconds(10));
    if (!io_all(fd.get(), &hello, sizeof(hello), false, hello_call)) continue;
    if (hello.magic != kHelloMagic || hello.token != token ||
        hello.index <= static_cast<uint32_t>(index) || hello.index >= static_cast<uint32_t>(n) ||
        mesh->pairs_[hello.index]) {
      continue;  // stale or foreign: drop it
    }
    set_nodelay(fd.get());
    mesh->pairs_[hello.index] =
        std::make_unique<TcpPair>(fd.release(), mesh->global_rank(static_cast<int>(hello.index)));
    --missing;
  }
  return mesh;
}

}  // namespace cohort::detail

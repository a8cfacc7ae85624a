// Test helper: a TCP port on 127.0.0.1 that was free a moment ago (for servers that need a number
// known in advance: torchrun's static rendezvous, a store restarted on the same port).
//
// The port is drawn at random BELOW the kernel's ephemeral range (ip_local_port_range, 32768 up
// by default). Servers that bind port 0 and outgoing connections take their ports from that range,
// so the tests that CI runs side by side cannot take our port between this call and its use, as
// they could when we asked the kernel for a port and released it (an agent then found another
// test's store on its endpoint and hung).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <random>

namespace cohort::testing {

namespace detail {

// Binds 127.0.0.1:port (0: any) without SO_REUSEADDR; returns the port bound, or 0.
inline int bind_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  int bound = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    socklen_t len = sizeof(a);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) bound = ntohs(a.sin_port);
  }
  ::close(fd);
  return bound;
}

inline int ephemeral_range_start() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768;
  in >> lo;
  return lo;
}

}  // namespace detail

inline int free_port() {
  constexpr int kLowest = 10000;
  const int below = detail::ephemeral_range_start();
  if (below - kLowest >= 1000) {
    static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    std::uniform_int_distribution<int> pick(kLowest, below - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = pick(rng);
      if (detail::bind_loopback(port) == port) return port;
    }
  }
  return detail::bind_loopback(0);  // an unusual range: the kernel's choice
}

}  // namespace cohort::testing

#include "cohort/base/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "cohort/base/parse.h"
#include "cohort/error.h"

namespace cohort {
namespace {

std::string numeric(const sockaddr* sa, socklen_t len) {
  char buf[NI_MAXHOST];
  if (::getnameinfo(sa, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return {};
  return buf;
}

std::set<std::string> resolve_all(const std::string& host) {
  std::set<std::string> out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) out.insert(numeric(ai->ai_addr, ai->ai_addrlen));
  ::freeaddrinfo(res);
  return out;
}

}  // namespace

std::string HostPort::to_string() const {
  return format_host_port(host, port);
}

std::string format_host_port(std::string_view host, int port) {
  std::string h(host);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return h + ":" + std::to_string(port);
}

std::string strip_brackets(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    return std::string(host.substr(1, host.size() - 2));
  return std::string(host);
}

HostPort parse_host_port(std::string_view text_view, int default_port) {
  const std::string text(text_view);
  HostPort e;
  e.port = default_port;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) throw UsageError("'" + text + "': '[' without ']'");
    e.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') throw UsageError("'" + text + "': expected ':' after ']'");
      port = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    e.host = text;  // a bare IPv6 literal
  } else {
    auto colon = text.find(':');
    e.host = text.substr(0, colon);
    if (colon != std::string::npos) port = text.substr(colon + 1);
  }
  if (e.host.empty()) throw UsageError("'" + text + "': no host");
  if (!port.empty()) {
    auto v = parse_int64(port);
    if (!v || *v < 0 || *v > 65535)
      throw UsageError("'" + text + "': port '" + port + "' is not 0..65535");
    e.port = static_cast<int>(*v);
  }
  return e;
}

bool is_loopback_host(std::string_view host) {
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "[::1]";
}

std::string local_address_towards(const std::string& host_text, int port) {
  const std::string host = strip_brackets(host_text);
  const std::string where = format_host_port(host, port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw IoError("cannot resolve " + where + ": " + ::gai_strerror(rc));
  std::string err = "no address";
  int code = 0;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len);
      ::close(fd);
      ::freeaddrinfo(res);
      return numeric(reinterpret_cast<sockaddr*>(&local), len);
    }
    code = errno;
    err = std::string(std::strerror(code)) + " (errno " + std::to_string(code) + ")";
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw IoError("no route to " + where + ": " + err, code);
}

bool is_local_host(const std::string& host_text) {
  const std::string host = strip_brackets(host_text);
  if (is_loopback_host(host)) return true;
  std::set<std::string> targets = resolve_all(host);
  if (targets.empty()) return false;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) != 0) return false;
  bool local = false;
  for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
    if (!i->ifa_addr) continue;
    int fam = i->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    socklen_t len = fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    local = targets.contains(numeric(i->ifa_addr, len));
  }
  ::freeifaddrs(ifs);
  return local;
}

Reachability probe_tcp(const std::string& host_text, int port, std::chrono::milliseconds timeout) {
  Reachability r;
  const std::string host = strip_brackets(host_text);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    r.kind = Reachability::kNoName;
    r.detail = ::gai_strerror(rc);
    return r;
  }
  r.address = numeric(res->ai_addr, res->ai_addrlen);
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    ::freeaddrinfo(res);
    r.detail = std::strerror(errno);
    return r;
  }
  int err = 0;
  if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, static_cast<int>(timeout.count())) == 1) {
        socklen_t len = sizeof(err);
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      } else {
        err = ETIMEDOUT;
      }
    }
  }
  ::close(fd);
  ::freeaddrinfo(res);
  r.detail = err == 0 ? "connected" : std::strerror(err);
  if (err == 0) {
    r.kind = Reachability::kListening;
  } else if (err == ECONNREFUSED) {
    r.kind = Reachability::kRefused;
  } else if (err == EHOSTUNREACH || err == ENETUNREACH || err == EADDRNOTAVAIL) {
    r.kind = Reachability::kUnreachable;
  } else {
    r.kind = Reachability::kTimeout;
  }
  return r;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace cohort

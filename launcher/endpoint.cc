#include "endpoint.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>

namespace cohort::launch {
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

std::string Endpoint::to_string() const {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(port);
}

Endpoint parse_endpoint(const std::string& text, int default_port) {
  Endpoint e;
  e.port = default_port;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos) throw std::invalid_argument("'" + text + "': '[' without ']'");
    e.host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':')
        throw std::invalid_argument("'" + text + "': expected ':' after ']'");
      port = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    e.host = text;  // a bare IPv6 literal
  } else {
    auto colon = text.find(':');
    e.host = text.substr(0, colon);
    if (colon != std::string::npos) port = text.substr(colon + 1);
  }
  if (e.host.empty()) throw std::invalid_argument("'" + text + "': no host");
  if (!port.empty()) {
    try {
      size_t used = 0;
      e.port = std::stoi(port, &used);
      if (used != port.size() || e.port < 0 || e.port > 65535) throw std::invalid_argument(port);
    } catch (const std::exception&) {
      throw std::invalid_argument("'" + text + "': port '" + port + "' is not 0..65535");
    }
  }
  return e;
}

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string local_address_towards(const Endpoint& to) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(to.host.c_str(), std::to_string(to.port).c_str(), &hints, &res);
  if (rc != 0) {
    throw std::runtime_error("cannot resolve " + to.to_string() + ": " + ::gai_strerror(rc));
  }
  std::string err = "no address";
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
    err = std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")";
    ::close(fd);
  }
  ::freeaddrinfo(res);
  throw std::runtime_error("no route to " + to.to_string() + ": " + err);
}

bool is_local_host(const std::string& host) {
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

}  // namespace cohort::launch

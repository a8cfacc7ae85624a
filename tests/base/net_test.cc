// host:port text (IPv6 literals in brackets), loopback and local addresses, the route towards an
// address and a TCP probe, on loopback only (no name is looked up in DNS).
#include "cohort/base/net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cohort/error.h"

namespace cohort {
namespace {

using namespace std::chrono_literals;

std::string usage_error(std::string_view text) {
  try {
    parse_host_port(text, 1);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(Net, HostPortInEveryForm) {
  HostPort a = parse_host_port("node1:29400", 29500);
  EXPECT_EQ(a.host, "node1");
  EXPECT_EQ(a.port, 29400);
  a = parse_host_port("node1", 29500);
  EXPECT_EQ(a.port, 29500);  // the default
  a = parse_host_port("[fe80::1]:80", 1);
  EXPECT_EQ(a.host, "fe80::1");
  EXPECT_EQ(a.port, 80);
  a = parse_host_port("[::1]", 7);
  EXPECT_EQ(a.host, "::1");
  EXPECT_EQ(a.port, 7);
  a = parse_host_port("fe80::2", 9);  // a bare IPv6 literal is taken whole
  EXPECT_EQ(a.host, "fe80::2");
  EXPECT_EQ(a.port, 9);
  EXPECT_EQ(parse_host_port("h:0", 1).port, 0);
  EXPECT_EQ(parse_host_port("h:65535", 1).port, 65535);
  EXPECT_EQ(parse_host_port("h:+80", 1).port, 80);
}

TEST(Net, BadHostPortTextIsNamed) {
  EXPECT_EQ(usage_error("[::1:80"), "'[::1:80': '[' without ']'");
  EXPECT_EQ(usage_error("[::1]80"), "'[::1]80': expected ':' after ']'");
  EXPECT_EQ(usage_error(":80"), "':80': no host");
  EXPECT_EQ(usage_error(""), "'': no host");
  EXPECT_EQ(usage_error("[]:80"), "'[]:80': no host");
  EXPECT_EQ(usage_error("h:65536"), "'h:65536': port '65536' is not 0..65535");
  EXPECT_EQ(usage_error("h:-1"), "'h:-1': port '-1' is not 0..65535");
  EXPECT_EQ(usage_error("h:http"), "'h:http': port 'http' is not 0..65535");
  EXPECT_EQ(usage_error("[::1]:"), "");  // an empty port is the default
}

TEST(Net, FormattingPutsIpv6InBrackets) {
  EXPECT_EQ(format_host_port("node1", 80), "node1:80");
  EXPECT_EQ(format_host_port("::1", 80), "[::1]:80");
  EXPECT_EQ((HostPort{"fe80::1", 5}).to_string(), "[fe80::1]:5");
  EXPECT_EQ(parse_host_port(format_host_port("::1", 80), 1).host, "::1");  // round trip
  EXPECT_EQ(strip_brackets("[::1]"), "::1");
  EXPECT_EQ(strip_brackets("::1"), "::1");
  EXPECT_EQ(strip_brackets("["), "[");
}

TEST(Net, LoopbackAndLocalHosts) {
  for (const char* h : {"localhost", "127.0.0.1", "127.1.2.3", "::1", "[::1]"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"10.0.0.1", "localhost.example", "128.0.0.1", "::2"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_TRUE(is_local_host("[::1]"));
  EXPECT_FALSE(is_local_host("192.0.2.1"));  // TEST-NET-1 (RFC 5737): on no interface here
  EXPECT_FALSE(is_local_host(""));
  EXPECT_FALSE(hostname().empty());
}

TEST(Net, TheLocalAddressTowardsLoopbackIsLoopback) {
  EXPECT_EQ(local_address_towards("127.0.0.1", 9), "127.0.0.1");
  try {
    local_address_towards("", 9);
    ADD_FAILURE() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("cannot resolve :9: ", 0), 0u) << e.what();
  }
}

// A socket bound to a free loopback port; listening or not.
struct LoopbackSocket {
  explicit LoopbackSocket(bool listen) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0) return;
    if (listen) ::listen(fd, 1);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~LoopbackSocket() { ::close(fd); }
  int fd = -1;
  int port = 0;
};

TEST(Net, AProbeTellsListeningFromRefused) {
  LoopbackSocket listening(true), bound(false);  // bound: the port is held, nothing listens
  ASSERT_GT(listening.port, 0);
  ASSERT_GT(bound.port, 0);
  Reachability r = probe_tcp("127.0.0.1", listening.port, 5s);
  EXPECT_EQ(r.kind, Reachability::kListening) << r.detail;
  EXPECT_EQ(r.address, "127.0.0.1");
  EXPECT_EQ(r.detail, "connected");
  r = probe_tcp("127.0.0.1", bound.port, 5s);
  EXPECT_EQ(r.kind, Reachability::kRefused) << r.detail;
  r = probe_tcp("", 80, 5s);
  EXPECT_EQ(r.kind, Reachability::kNoName);
  EXPECT_FALSE(r.detail.empty());
  EXPECT_EQ(r.address, "");
}

}  // namespace
}  // namespace cohort

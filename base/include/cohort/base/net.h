// Addresses: host:port text (IPv6 literals in brackets), this machine's name and addresses.
//
// One copy of what the launcher, the store's clients and the worker runtime all need. Pure
// functions; thread-safe.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

namespace cohort {

struct HostPort {
  std::string host;  // without brackets
  int port = 0;
  // "[v6]:port" or "host:port".
  std::string to_string() const;
};

// Parses "host", "host:port", "[v6]:port" or "[v6]"; a bare IPv6 literal ("::1") is taken whole.
// A missing port is `default_port`. Throws UsageError naming the problem.
HostPort parse_host_port(std::string_view text, int default_port);

// "::1" for "[::1]"; anything else unchanged.
std::string strip_brackets(std::string_view host);

// "[v6]:port" for an IPv6 literal, "host:port" otherwise.
std::string format_host_port(std::string_view host, int port);

// localhost, 127.0.0.0/8 or ::1.
bool is_loopback_host(std::string_view host);

// True when `host` names or resolves to an address of this machine.
bool is_local_host(const std::string& host);

// The local address the kernel would use to reach host:port (a UDP connect: no packet is sent).
// Throws IoError naming the address and the system's error when there is no route or the name
// does not resolve.
std::string local_address_towards(const std::string& host, int port);

// What one TCP connection attempt to host:port found (a probe: connected and closed at once).
struct Reachability {
  enum Kind {
    kListening,    // something accepted the connection
    kRefused,      // the host answered: nothing listens there (yet)
    kUnreachable,  // no route, host or network unreachable: this address cannot work from here
    kNoName,       // the name does not resolve
    kTimeout,      // no answer within the time (a firewall dropping packets, or a slow network)
  };
  Kind kind = kTimeout;
  std::string address;  // what the name resolved to ("" when it did not)
  std::string detail;   // the system's words ("No route to host")
};
Reachability probe_tcp(const std::string& host, int port, std::chrono::milliseconds timeout);

// gethostname(), or "localhost" when it fails.
std::string hostname();

}  // namespace cohort

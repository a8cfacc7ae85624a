// Addresses: parsing host:port endpoints (IPv6 literals in brackets), finding the address this
// node advertises, and deciding whether this agent hosts the rendezvous store.
#pragma once

#include <optional>
#include <string>

namespace cohort::launch {

struct Endpoint {
  std::string host;  // without brackets
  int port = 0;
  std::string to_string() const;  // "[v6]:port" or "host:port"
};

// Parses "host", "host:port", "[v6]:port" or "[v6]"; a bare IPv6 literal ("::1") is taken whole.
// Throws std::invalid_argument naming the problem.
Endpoint parse_endpoint(const std::string& text, int default_port);

bool is_loopback_host(const std::string& host);

// The local address the kernel would use to reach `to` (a UDP connect: no packet is sent).
// Throws std::runtime_error with the address and the system error when there is no route.
std::string local_address_towards(const Endpoint& to);

// True when `host` names or resolves to an address of this machine.
bool is_local_host(const std::string& host);

}  // namespace cohort::launch

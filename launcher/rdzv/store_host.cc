#include "rdzv/store_host.h"

#include "cohort/base/net.h"
#include "cohort/error.h"
#include "cohort/rdzv/auth.h"

namespace cohort::launch {

std::unique_ptr<rdzv::StoreServerThread> host_store(const std::string& host, int port,
                                                    const StoreSecurity& security) {
  rdzv::StoreServerOptions so;
  so.host = host;
  so.port = static_cast<uint16_t>(port);
  so.auth_token = security.token;
  so.allow_unauthenticated = auth::parse_cidrs(security.allow_from_cidrs);
  // This job's own store: every rank of a big node may connect from one address, and through
  // relays (docs/RELAY.md) a job's workers are channels, not descriptors: a 100,000-rank job of
  // PyTorch 1.13 workers (two connections each) needs 200,000 of them.
  so.max_connections_per_address = 0;
  so.max_connections = 1'000'000;
  return std::make_unique<rdzv::StoreServerThread>(so);
}

void check_reachable(const std::string& host, int port, const std::string& flag) {
  Reachability r = probe_tcp(host, port, std::chrono::seconds(3));
  if (r.kind != Reachability::kUnreachable && r.kind != Reachability::kNoName) return;
  const std::string where = format_host_port(host, port);
  throw StoreError(
      "cannot reach the store at " + where +
          (r.address.empty() || r.address == strip_brackets(host) ? std::string()
                                                                  : " (" + r.address + ")") +
          ": " + r.detail + "; check " + flag + " and the route to that address",
      "", where);
}

std::string listen_address_for(const std::string& addr) {
  const std::string host = strip_brackets(addr);
  if (is_loopback_host(host)) return host == "localhost" ? "127.0.0.1" : host;
  return host.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

std::string local_dial_address(const std::string& listen_host) {
  if (listen_host == "0.0.0.0") return "127.0.0.1";
  if (listen_host == "::") return "::1";
  return listen_host;
}

}  // namespace cohort::launch

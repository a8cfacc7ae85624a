// Hosting a store inside cohortrun (node 0 of a static job, the agent that owns a c10d endpoint,
// the per-round store of an elastic job's workers): cohortd's server on a thread of its own, with
// the job's token and unauthenticated networks applied.
#pragma once

#include <memory>
#include <string>

#include "cohort/rdzv/server.h"

namespace cohort::launch {

struct StoreSecurity {
  std::string token;             // --auth-token-file's token ("" = none)
  std::string allow_from_cidrs;  // --allow-unauthenticated-from
};

// Listens on host:port (port 0: a free one). Throws cohort::Error naming the address and the
// system error (a port in use, say).
std::unique_ptr<rdzv::StoreServerThread> host_store(const std::string& host, int port,
                                                    const StoreSecurity& security);

// The address to listen on for clients of `addr`: `addr` itself when it is a loopback address
// (a one-machine job listens there only), else every interface of its family.
std::string listen_address_for(const std::string& addr);

// Fails at once, with StoreError naming the address, the system's words and `flag`, when host:port
// cannot be reached from here at all (no route, an unknown name). A store not listening yet, or a
// slow answer, is not an error: the connection retries.
void check_reachable(const std::string& host, int port, const std::string& flag);

// The address a client on this machine dials to reach a server listening on `listen_host`.
std::string local_dial_address(const std::string& listen_host);

}  // namespace cohort::launch

// A fresh network namespace for the benchmark: its own loopback, accept queues and port space,
// and no route to the machine's nameserver (PyTorch's libuv store resolves client addresses on
// its event loop; a nameserver that does not answer stalls it for seconds per connection).
// Sysctls set here (somaxconn) change this namespace only; nothing of the host is touched.
#pragma once

#include <string>

namespace cohort::bench {

struct NetnsResult {
  bool entered = false;
  std::string note;  // what was done, or why not
};

// Moves this process into a new network namespace (needs CAP_SYS_ADMIN), brings its loopback
// up, and sets net.core.somaxconn to `somaxconn` when it is positive. Children inherit it.
NetnsResult enter_fresh_netns(int somaxconn);

// net.core.somaxconn of the current namespace (-1 when unreadable).
int read_somaxconn();

}  // namespace cohort::bench

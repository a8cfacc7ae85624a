// Test tool: a node's store relay in a process of its own, for tests that drive it from outside
// (tests/interop/store_relay_differential.py).
//   relay_host STORE_HOST STORE_PORT [LISTEN_HOST]
// Prints "host:port" where workers connect, then relays until stdin closes or SIGTERM/SIGINT.
// Exits 1 with the reason when the relay cannot work with that store.
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "cohort/rdzv/relay.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: relay_host STORE_HOST STORE_PORT [LISTEN_HOST]\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the relay's thread, which inherits it
  const int signals = ::signalfd(-1, &stop, SFD_CLOEXEC);
  cohort::rdzv::StoreRelayOptions o;
  o.store_host = argv[1];
  o.store_port = std::stoi(argv[2]);
  if (argc > 3) o.listen_host = argv[3];
  try {
    cohort::rdzv::StoreRelayThread relay(o);
    std::printf("%s:%d\n", relay.host().c_str(), relay.port());
    std::fflush(stdout);
    for (;;) {
      pollfd p[2] = {{0, POLLIN, 0}, {signals, POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) continue;
      if (p[1].revents != 0) break;
      char buf[256];
      if (p[0].revents != 0 && ::read(0, buf, sizeof(buf)) <= 0) break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "relay_host: %s\n", e.what());
    return 1;
  }
  return 0;
}

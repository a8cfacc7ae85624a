#include "netns.h"

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace cohort::bench {

int read_somaxconn() {
  std::ifstream f("/proc/sys/net/core/somaxconn");
  int v = -1;
  f >> v;
  return f ? v : -1;
}

NetnsResult enter_fresh_netns(int somaxconn) {
  NetnsResult r;
  if (::unshare(CLONE_NEWNET) != 0) {
    r.note = std::string("no fresh network namespace (unshare: ") + std::strerror(errno) +
             "): running in this one";
    return r;
  }
  r.entered = true;
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (fd < 0 || ::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0 ||
      (ifr.ifr_flags |= IFF_UP, ::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)) {
    r.note = std::string("fresh network namespace, but lo stays down: ") + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return r;
  }
  ::close(fd);
  r.note = "fresh network namespace";
  if (somaxconn > 0) {
    std::ofstream f("/proc/sys/net/core/somaxconn");
    f << somaxconn;
    f.close();
    r.note += f ? ", net.core.somaxconn=" + std::to_string(somaxconn) + " in it"
                : ", net.core.somaxconn could not be set";
  }
  r.note += " (net.core.somaxconn " + std::to_string(read_somaxconn()) + ")";
  return r;
}

}  // namespace cohort::bench

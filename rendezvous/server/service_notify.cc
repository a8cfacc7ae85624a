#include "server/service_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace cohort::rdzv {

std::string notify_service_manager(const std::string& state) {
  const char* name = std::getenv("NOTIFY_SOCKET");
  if (name == nullptr || name[0] == '\0') return "";
  const std::string path(name);
  if (path[0] != '/' && path[0] != '@') {
    return "NOTIFY_SOCKET=" + path + " is neither an absolute path nor an abstract socket (@name)";
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const bool abstract = path[0] == '@';
  // A path's address ends in a NUL byte; an abstract one is counted to its last byte exactly.
  const size_t used = path.size() + (abstract ? 0 : 1);
  if (used > sizeof(addr.sun_path)) return "NOTIFY_SOCKET=" + path + " is too long";
  std::memcpy(addr.sun_path, path.data(), path.size());
  if (abstract) addr.sun_path[0] = '\0';  // no file: a leading NUL byte
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + used);
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::string("socket(AF_UNIX): ") + std::strerror(errno);
  const ssize_t sent = ::sendto(fd, state.data(), state.size(), MSG_NOSIGNAL,
                                reinterpret_cast<const sockaddr*>(&addr), len);
  const int err = errno;
  ::close(fd);
  if (sent < 0) return "sendto NOTIFY_SOCKET=" + path + ": " + std::strerror(err);
  return "";
}

}  // namespace cohort::rdzv

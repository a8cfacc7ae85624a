#include "probe_server.h"

#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "cohort/base/hang_probe.h"
#include "cohort/base/heartbeat_line.h"
#include "cohort/base/worker_env_names.h"
#include "collective_progress.h"

namespace cohort::detail {
namespace {

// The descriptor COHORT_CONTROL_FD names, when it is a socket; else -1.
int control_fd() {
  const char* v = std::getenv(worker_env::kControlFd);
  if (v == nullptr) return -1;
  int fd = -1;
  const std::string_view s(v);
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), fd);
  struct stat st {};
  if (ec != std::errc() || ptr != s.data() + s.size() || fd < 0 || ::fstat(fd, &st) != 0 ||
      !S_ISSOCK(st.st_mode))
    return -1;
  return fd;
}

bool send_all(int fd, const std::string& text) {
  size_t at = 0;
  while (at < text.size()) {
    // MSG_NOSIGNAL: a cohortrun that went away is an error here, not a SIGPIPE.
    const ssize_t n = ::send(fd, text.data() + at, text.size() - at, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += static_cast<size_t>(n);
  }
  return true;
}

std::string answer(int64_t id) {
  hang_probe::ProbeAnswer a;
  a.id = id;
  a.pid = static_cast<int>(::getpid());
  snapshot_all_groups(&a.groups, &a.collectives);
  // After the snapshot: a collective entered while it was taken did not start after the answer.
  a.time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  return hang_probe::encode_answer(a);
}

void serve(int fd) {
  std::string pending;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // cohortrun closed its end
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (auto id = hang_probe::parse_request(line)) {
        if (!send_all(fd, answer(*id))) return;
      }
    }
    if (pending.size() > 4096) pending.clear();  // not our protocol: never grows without bound
  }
}

}  // namespace

void start_probe_server_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int fd = control_fd();
    if (fd < 0) return;
    std::thread(serve, fd).detach();
    say_hello({heartbeat_pipe::kProbeFeature});
  });
}

}  // namespace cohort::detail

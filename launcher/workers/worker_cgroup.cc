#include "workers/worker_cgroup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "cohort/base/deadline.h"

namespace cohort::launch {
namespace {

// The mount point of the cgroup v2 hierarchy ("" when none), from /proc/self/mountinfo:
// "36 25 0:31 / /sys/fs/cgroup rw,nosuid,... shared:9 - cgroup2 cgroup2 rw,...".
std::string cgroup2_mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, root, mount;
    head >> id >> parent >> dev >> root >> mount;
    if (root == "/") return mount;  // a bind mount of a subtree would not be the hierarchy's root
  }
  return {};
}

// This process's cgroup in the v2 hierarchy ("/user.slice/..."), from the "0::" line of
// /proc/self/cgroup; "" when it has none.
std::string own_cgroup() {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return {};
}

bool write_text(const std::string& file, const char* text) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::write(fd, text, std::strlen(text));
  ::close(fd);
  return n == static_cast<ssize_t>(std::strlen(text));
}

// "populated 1" in the cgroup.events read through `fd`; false when it cannot be read (gone).
bool populated_in(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* at = std::strstr(buf, "populated ");
  return at != nullptr && at[10] != '0';
}

bool is_populated(const std::string& dir) {
  const int fd = ::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool populated = populated_in(fd);
  ::close(fd);
  return populated;
}

// Waits (up to `wait_ms`) until the cgroup is empty. cgroup.events wakes a poll for POLLPRI on
// each change (Documentation/admin-guide/cgroup-v2.rst); reading it again re-arms the poll.
bool wait_empty(const std::string& dir, int wait_ms) {
  const int fd = ::open((dir + "/cgroup.events").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // gone
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  bool populated = populated_in(fd);
  while (populated) {
    const int left_ms = poll_ms_left(deadline);
    if (left_ms == 0) break;
    pollfd p{fd, POLLPRI, 0};
    ::poll(&p, 1, std::min(left_ms, 100));
    populated = populated_in(fd);
  }
  ::close(fd);
  return !populated;
}

}  // namespace

std::unique_ptr<WorkerCgroup> WorkerCgroup::create(const std::string& name, std::string* why) {
  const std::string mount = cgroup2_mount();
  if (mount.empty()) {
    *why = "no cgroup v2 hierarchy is mounted";
    return nullptr;
  }
  const std::string own = own_cgroup();
  if (own.empty()) {
    *why = "this process is in no cgroup v2";
    return nullptr;
  }
  const std::string parent = mount + (own == "/" ? "" : own);
  if (::access((parent + "/cgroup.kill").c_str(), F_OK) != 0 && own != "/") {
    *why = "the kernel has no cgroup.kill (Linux 5.14 or later)";
    return nullptr;
  }
  // Moving a process needs write access to cgroup.procs of the common ancestor: our own cgroup.
  if (::access((parent + "/cgroup.procs").c_str(), W_OK) != 0) {
    *why = "cannot write " + parent + "/cgroup.procs (" + std::strerror(errno) +
           "): not root, and the cgroup is not delegated to this user";
    return nullptr;
  }
  const std::string path = parent + "/cohortrun-" + name;
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    *why = "cannot create " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  if (::access((path + "/cgroup.kill").c_str(), W_OK) != 0) {
    *why = "the kernel has no cgroup.kill (Linux 5.14 or later)";
    ::rmdir(path.c_str());
    return nullptr;
  }
  const int fd = ::open((path + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot open " + path + "/cgroup.procs: " + std::strerror(errno);
    ::rmdir(path.c_str());
    return nullptr;
  }
  return std::unique_ptr<WorkerCgroup>(new WorkerCgroup(path, fd));
}

WorkerCgroup::~WorkerCgroup() {
  ::close(procs_fd_);
  kill_cgroup(path_, 1000);
}

int WorkerCgroup::kill_and_wait(std::chrono::milliseconds wait) const {
  if (!is_populated(path_)) return 0;
  const int fd = ::open((path_ + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC);
  int count = 0;
  if (fd >= 0) {
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      count += static_cast<int>(std::count(buf, buf + n, '\n'));
    ::close(fd);
  }
  write_text(path_ + "/cgroup.kill", "1");
  wait_empty(path_, static_cast<int>(wait.count()));
  return count;
}

bool WorkerCgroup::populated() const {
  return is_populated(path_);
}

bool kill_cgroup(const std::string& path, int wait_ms) {
  if (::access(path.c_str(), F_OK) != 0) return true;
  if (is_populated(path) && !write_text(path + "/cgroup.kill", "1")) return false;
  if (!wait_empty(path, wait_ms)) return false;
  return ::rmdir(path.c_str()) == 0 || errno == ENOENT;
}

}  // namespace cohort::launch

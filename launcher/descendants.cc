#include "descendants.h"

#include "proc_file.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace cohort::launch {
namespace {

struct Child {
  pid_t pid;
  char state;  // 'Z' for a zombie
  pid_t pgid;
};

// The children of this process, from /proc/<pid>/stat (parent pid, state, process group).
std::vector<Child> children() {
  std::vector<Child> out;
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = ::readdir(proc)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 1) continue;
    const std::string stat = read_proc_file(std::string("/proc/") + e->d_name + "/stat");
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream ss(stat.substr(close_paren + 2));
    char state = '?';
    long ppid = 0, pgid = 0;
    ss >> state >> ppid >> pgid;
    if (ppid == self)
      out.push_back(Child{static_cast<pid_t>(pid), state, static_cast<pid_t>(pgid)});
  }
  ::closedir(proc);
  return out;
}

}  // namespace

bool become_child_subreaper() {
  return ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
}

void reap_stray_zombies(const std::set<pid_t>& keep) {
  for (const Child& c : children()) {
    if (keep.contains(c.pid) || c.state != 'Z') continue;
    ::waitpid(c.pid, nullptr, WNOHANG);
  }
}

int kill_stray_children(const std::set<pid_t>& keep, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int killed = 0;
  for (;;) {
    bool any = false;
    for (const Child& c : children()) {
      if (keep.contains(c.pid)) continue;
      any = true;
      if (c.state != 'Z') {
        if (c.pgid == c.pid) ::kill(-c.pid, SIGKILL);  // it leads a group: all of it
        ::kill(c.pid, SIGKILL);
        ++killed;
      }
      ::waitpid(c.pid, nullptr, 0);  // SIGKILL is not ignorable: this returns promptly
    }
    if (!any || std::chrono::steady_clock::now() >= deadline) return killed;
    // The deaths just reaped may have handed their own children to us: look again.
  }
}

}  // namespace cohort::launch

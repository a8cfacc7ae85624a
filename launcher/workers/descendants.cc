#include "workers/descendants.h"

#include "workers/proc_file.h"

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

// One process's parent, state and process group from /proc/<pid>/stat; false when it is gone.
bool read_child(pid_t pid, Child* out, pid_t* ppid) {
  const std::vector<std::string> f = proc_stat_fields(pid);  // f[0] is field 3, the state
  if (f.size() < 3 || f[0].empty()) return false;
  *out = Child{pid, f[0][0], static_cast<pid_t>(std::strtol(f[2].c_str(), nullptr, 10))};
  *ppid = static_cast<pid_t>(std::strtol(f[1].c_str(), nullptr, 10));
  return true;
}

// The pids listed in the /proc/self/task/<tid>/children files (Linux 3.5, CONFIG_PROC_CHILDREN):
// each thread's children, so only this process's own, however many processes the machine has.
// False when the kernel has no such files.
bool children_from_task_lists(std::vector<pid_t>* pids) {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) return false;
  bool any_file = false;
  while (dirent* e = ::readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/children";
    if (::access(path.c_str(), R_OK) != 0) continue;
    any_file = true;
    std::istringstream list(read_proc_file(path));
    for (long pid; list >> pid;) pids->push_back(static_cast<pid_t>(pid));
  }
  ::closedir(tasks);
  return any_file;
}

// Every pid on the machine: the fallback, one stat read per process.
std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = ::readdir(proc)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end == '\0' && pid > 1) out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(proc);
  return out;
}

// The children of this process with their state and group. cohortrun scans for strays after
// every group and on every SIGCHLD, so the scan reads only its own children's files where the
// kernel lists them (a scan of all of /proc read hundreds of files per launch).
std::vector<Child> children() {
  std::vector<pid_t> candidates;
  if (!children_from_task_lists(&candidates)) candidates = all_pids();
  std::vector<Child> out;
  const pid_t self = ::getpid();
  for (pid_t pid : candidates) {
    Child c;
    pid_t ppid = 0;
    if (read_child(pid, &c, &ppid) && ppid == self) out.push_back(c);
  }
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
  std::set<pid_t> killed;
  for (;;) {
    bool any = false;
    for (const Child& c : children()) {
      if (keep.contains(c.pid)) continue;
      any = true;
      if (c.state != 'Z' && killed.insert(c.pid).second) {
        if (c.pgid == c.pid) ::kill(-c.pid, SIGKILL);  // it leads a group: all of it
        ::kill(c.pid, SIGKILL);
      }
      // Never waited for without bound: SIGKILL ends a process at once, except one the kernel
      // holds in uninterruptible sleep (a FUSE request its daemon took and never answers), which
      // ends only when the file system answers. Such a one is left, and reaped as a stray then.
      ::waitpid(c.pid, nullptr, WNOHANG);
    }
    if (!any || std::chrono::steady_clock::now() >= deadline)
      return static_cast<int>(killed.size());
    // The deaths may have handed their own children to us: look again.
    ::usleep(2000);
  }
}

}  // namespace cohort::launch

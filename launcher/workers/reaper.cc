#include "workers/reaper.h"

#include "workers/proc_file.h"
#include "workers/worker_cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace cohort::launch {
namespace {

// Field 22 of /proc/<pid>/stat: the start time in clock ticks; "" when the process is gone.
std::string start_time(pid_t pid) {
  const std::vector<std::string> f = proc_stat_fields(pid);  // f[0] is field 3
  return f.size() > 22 - 3 ? f[22 - 3] : std::string();
}

// The inode of a process's pid namespace ("" when unreadable).
std::string pid_namespace(const std::string& pid) {
  struct stat st {};
  if (::stat(("/proc/" + pid + "/ns/pid").c_str(), &st) != 0) return {};
  return std::to_string(st.st_ino);
}

// The COHORT_AGENT_ID in a process's environment ("" when none or unreadable).
std::string agent_id_of(const std::string& pid) {
  static const std::string key = "COHORT_AGENT_ID=";
  std::string env = read_proc_file("/proc/" + pid + "/environ");
  for (size_t pos = 0; pos < env.size();) {
    size_t end = env.find('\0', pos);
    if (end == std::string::npos) end = env.size();
    std::string_view entry(env.data() + pos, end - pos);
    if (entry.starts_with(key)) return std::string(entry.substr(key.size()));
    pos = end + 1;
  }
  return {};
}

struct AgentIdParts {
  pid_t pid = 0;
  std::string start;
  std::string ns;
};

bool parse_agent_id(const std::string& id, AgentIdParts* out) {
  auto a = id.find(':');
  auto b = id.find(':', a == std::string::npos ? a : a + 1);
  if (a == std::string::npos || b == std::string::npos) return false;
  out->pid = static_cast<pid_t>(std::atoi(id.substr(0, a).c_str()));
  out->start = id.substr(a + 1, b - a - 1);
  out->ns = id.substr(b + 1);
  return out->pid > 0 && !out->start.empty() && !out->ns.empty();
}

// Kills every process of this pid namespace and user that carries agent id `id` and started no
// earlier than the agent; returns how many.
int kill_carriers(const std::string& id, const std::string& agent_start) {
  const std::string own_ns = pid_namespace("self");
  const uid_t uid = ::getuid();
  const long agent_ticks = std::atol(agent_start.c_str());
  const pid_t self = ::getpid();
  int killed = 0;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = ::readdir(proc)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == self) continue;
    const std::string p = e->d_name;
    if (agent_id_of(p) != id) continue;
    if (pid_namespace(p) != own_ns) continue;
    struct stat st {};
    if (::stat(("/proc/" + p).c_str(), &st) != 0 || (uid != 0 && st.st_uid != uid)) continue;
    if (std::atol(start_time(static_cast<pid_t>(pid)).c_str()) < agent_ticks) continue;
    if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  ::closedir(proc);
  return killed;
}

// Repeats kill_carriers until none is left (their deaths can free blocked forks) or 2 s pass.
void kill_all_carriers(const std::string& id, const std::string& agent_start) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (kill_carriers(id, agent_start) > 0 && std::chrono::steady_clock::now() < deadline) {
    ::usleep(10000);  // let the kernel finish the kills before the next scan
  }
}

[[noreturn]] void reaper_main(int fd, const std::string& id, const std::string& agent_start,
                              const std::string& lease) {
  // Out of cohortrun's process group and session: what kills that whole group leaves the reaper
  // to do its job.
  ::setsid();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE, SIGUSR1, SIGUSR2})
    ::signal(sig, SIG_IGN);
  // It holds nothing of cohortrun's but its pipe: not its output (a reader waiting for the end
  // of cohortrun's output would wait for the reaper too), nor what cohortrun inherited.
  ::dup2(fd, 3);  // first: a cohortrun started with its stdin closed has the pipe at 0
  fd = 3;
  const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, STDIN_FILENO);
    ::dup2(null, STDOUT_FILENO);
  }
  ::syscall(SYS_close_range, 4, ~0u, 0);  // Linux 5.9; before it, the rest stays open
  std::set<pid_t> groups;
  std::string cgroup;
  std::string buf;
  bool goodbye = false;
  char chunk[256];
  for (;;) {
    ssize_t n = ::read(fd, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buf.append(chunk, static_cast<size_t>(n));
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (line == "bye")
        goodbye = true;
      else if (line.size() > 1 && line[0] == '+')
        groups.insert(std::atoi(line.c_str() + 1));
      else if (line.size() > 1 && line[0] == '-')
        groups.erase(std::atoi(line.c_str() + 1));
      else if (line.size() > 1 && line[0] == 'c')
        cgroup = line.substr(1);
    }
  }
  if (!goodbye) {
    if (!cgroup.empty()) kill_cgroup(cgroup, 2000);
    for (pid_t g : groups) ::kill(-g, SIGKILL);
    // Descendants that left their groups still carry the agent's id in their environment.
    kill_all_carriers(id, agent_start);
    if (!lease.empty()) ::unlink(lease.c_str());
  }
  ::_exit(0);
}

void send_line(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string s = line + "\n";
  (void)!::write(fd, s.data(), s.size());  // under PIPE_BUF: atomic
}

}  // namespace

std::string lease_dir() {
  const char* d = std::getenv("COHORT_LEASE_DIR");
  if (d != nullptr && *d != '\0') return d;
  return "/tmp/cohort-agents-" + std::to_string(::getuid());
}

const std::string& agent_id() {
  static const std::string id =
      std::to_string(::getpid()) + ":" + start_time(::getpid()) + ":" + pid_namespace("self");
  return id;
}

Reaper::Reaper() {
  // The lease: <pid>-<start>-<ns> under lease_dir(), owned by this user only.
  const std::string dir = lease_dir();
  ::mkdir(dir.c_str(), 0700);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::getuid()) {
    std::string name = agent_id();
    for (char& ch : name)
      if (ch == ':') ch = '-';
    lease_ = dir + "/" + name;
    int lf = ::open(lease_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (lf >= 0) {
      ::close(lf);
    } else {
      lease_.clear();
    }
  }
  AgentIdParts parts;
  parse_agent_id(agent_id(), &parts);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return;
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return;
  }
  if (pid == 0) {
    ::close(p[1]);
    reaper_main(p[0], agent_id(), parts.start, lease_);
  }
  ::close(p[0]);
  fd_ = p[1];
  pid_ = pid;
}

Reaper::~Reaper() {
  if (fd_ >= 0) {
    send_line(fd_, "bye");
    ::close(fd_);
    ::waitpid(pid_, nullptr, 0);
  }
  if (!lease_.empty()) ::unlink(lease_.c_str());
}

void Reaper::watch(pid_t pgid) {
  send_line(fd_, std::string(1, '+').append(std::to_string(pgid)));
}
void Reaper::forget(pid_t pgid) {
  send_line(fd_, std::string(1, '-').append(std::to_string(pgid)));
}
void Reaper::watch_cgroup(const std::string& path) {
  if (path.size() + 2 < PIPE_BUF) send_line(fd_, "c" + path);
  if (lease_.empty()) return;
  const int lf = ::open(lease_.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (lf < 0) return;
  (void)!::write(lf, path.data(), path.size());
  ::close(lf);
}

int sweep_orphans() {
  const std::string dir = lease_dir();
  const std::string own_ns = pid_namespace("self");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> leases;
  while (dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') leases.push_back(e->d_name);
  ::closedir(d);
  int killed = 0;
  for (const std::string& name : leases) {
    // <pid>-<start>-<ns>
    std::string id = name;
    for (char& ch : id)
      if (ch == '-') ch = ':';
    AgentIdParts parts;
    if (!parse_agent_id(id, &parts) || parts.ns != own_ns) continue;  // another namespace's
    if (start_time(parts.pid) == parts.start) continue;               // that agent still runs
    // The lease names the agent's workers' cgroup, if it had one: only a cgroup named after that
    // agent is its own.
    const std::string cgroup = read_proc_file(dir + "/" + name);
    if (cgroup.ends_with("/cohortrun-" + name) && cgroup.front() == '/') {
      const std::string procs = read_proc_file(cgroup + "/cgroup.procs");
      killed += static_cast<int>(std::count(procs.begin(), procs.end(), '\n'));
      kill_cgroup(cgroup, 1000);
    }
    killed += kill_carriers(id, parts.start);
    ::unlink((dir + "/" + name).c_str());
  }
  return killed;
}

}  // namespace cohort::launch

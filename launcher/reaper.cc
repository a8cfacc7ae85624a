#include "reaper.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

namespace cohort::launch {
namespace {

[[noreturn]] void reaper_main(int fd) {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGTSTP, SIGPIPE}) ::signal(sig, SIG_IGN);
  std::set<pid_t> groups;
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
    }
  }
  if (!goodbye) {
    for (pid_t g : groups) ::kill(-g, SIGKILL);
  }
  ::_exit(0);
}

void send_line(int fd, const std::string& line) {
  if (fd < 0) return;
  std::string s = line + "\n";
  (void)!::write(fd, s.data(), s.size());  // under PIPE_BUF: atomic
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Field 22 of /proc/<pid>/stat: the start time in clock ticks; "" when the process is gone.
std::string start_time(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  auto close_paren = stat.rfind(')');
  if (close_paren == std::string::npos) return {};
  std::istringstream ss(stat.substr(close_paren + 2));
  std::string field;
  for (int i = 3; i <= 22 && ss >> field; ++i) {
  }
  return field;
}

}  // namespace

Reaper::Reaper() {
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
    reaper_main(p[0]);
  }
  ::close(p[0]);
  fd_ = p[1];
  pid_ = pid;
}

Reaper::~Reaper() {
  if (fd_ < 0) return;
  send_line(fd_, "bye");
  ::close(fd_);
  ::waitpid(pid_, nullptr, 0);
}

void Reaper::watch(pid_t pgid) {
  send_line(fd_, std::string(1, '+').append(std::to_string(pgid)));
}
void Reaper::forget(pid_t pgid) {
  send_line(fd_, std::string(1, '-').append(std::to_string(pgid)));
}

const char* agent_id() {
  static const std::string id = std::to_string(::getpid()) + ":" + start_time(::getpid());
  return id.c_str();
}

int sweep_orphans() {
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return 0;
  int killed = 0;
  const std::string key = "COHORT_AGENT_ID=";
  pid_t self = ::getpid();
  while (dirent* e = ::readdir(proc)) {
    char* end;
    long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 1 || pid == self) continue;
    std::string env = read_file("/proc/" + std::string(e->d_name) + "/environ");
    std::string id;
    for (size_t pos = 0; pos < env.size();) {
      size_t end = env.find('\0', pos);
      if (end == std::string::npos) end = env.size();
      std::string_view entry(env.data() + pos, end - pos);
      if (entry.starts_with(key)) {
        id = entry.substr(key.size());
        break;
      }
      pos = end + 1;
    }
    if (id.empty()) continue;
    auto colon = id.find(':');
    if (colon == std::string::npos) continue;
    pid_t agent = static_cast<pid_t>(std::atoi(id.substr(0, colon).c_str()));
    if (agent <= 0 || start_time(agent) == id.substr(colon + 1)) continue;  // its agent lives
    if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) ++killed;
  }
  ::closedir(proc);
  return killed;
}

}  // namespace cohort::launch

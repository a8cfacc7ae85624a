// Test helper: /proc files of processes that may exit while a test reads them.
//
// The black-box tests do not link the launcher, whose read_proc_file (launcher/workers/proc_file.h)
// does the same: std::ifstream with istreambuf_iterator throws std::ios_base::failure when a read
// fails because the process has just gone (ESRCH), which once failed a test that was only polling.
#pragma once

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>
#include <string>

namespace cohort::testing {

// The file's bytes, or what could be read before an error; "" when it cannot be opened.
inline std::string proc_text(const std::string& path) {
  std::string out;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// True while `pid` exists and is not a zombie (state Z) or dead (X).
inline bool process_alive(pid_t pid) {
  const std::string stat = proc_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');  // the command name may hold ')' and spaces
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  return stat[paren + 2] != 'Z' && stat[paren + 2] != 'X';
}

// CPU seconds `pid` has used, user and system, all its threads (fields 14 and 15 of
// /proc/PID/stat, in clock ticks: 10 ms steps); -1 when it cannot be read. Unlike wall-clock
// time, another process's load on a shared machine does not add to it.
inline double process_cpu_seconds(pid_t pid) {
  const std::string stat = proc_text("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream fields(stat.substr(paren + 1));
  std::string skipped;  // state (field 3), then fields 4 to 13
  for (int field = 3; field <= 13; ++field) fields >> skipped;
  double utime = 0, stime = 0;
  if (!(fields >> utime >> stime)) return -1;
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace cohort::testing

#include "workers/proc_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

namespace cohort::launch {

std::string read_proc_file(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[4096];
  while (out.size() < (1u << 20)) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::vector<std::string> proc_stat_fields(pid_t pid) {
  const std::string stat = read_proc_file("/proc/" + std::to_string(pid) + "/stat");
  // The command name (field 2) may hold spaces and parentheses: fields count from the last ')'.
  const size_t paren = stat.rfind(')');
  std::vector<std::string> fields;
  if (paren == std::string::npos) return fields;
  std::istringstream in(stat.substr(paren + 1));
  for (std::string f; in >> f;) fields.push_back(std::move(f));
  return fields;
}

}  // namespace cohort::launch

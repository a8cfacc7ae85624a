#include "storm_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace cohort::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  int from = -1, to = -1;  // pipes
  std::string buffered;
};

// Descriptors one simulated node takes in a generator process.
int fds_per_node(StormPath path, int rpn) {
  // direct: a socket per rank; relay: the rank's socket and the relay's end of it, the relay's
  // listener and its link.
  return path == StormPath::kDirect ? rpn : 2 * rpn + 2;
}

long fd_limit() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  return static_cast<long>(rl.rlim_max);
}

// One line from a child, or "" at the deadline or end of its pipe.
std::string read_line(Child& c, Clock::time_point deadline) {
  for (;;) {
    auto nl = c.buffered.find('\n');
    if (nl != std::string::npos) {
      std::string line = c.buffered.substr(0, nl);
      c.buffered.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return {};
    pollfd p{c.from, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[512];
    ssize_t n = ::read(c.from, buf, sizeof(buf));
    if (n <= 0) return {};
    c.buffered.append(buf, static_cast<size_t>(n));
  }
}

long rss_kb(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

double cpu_s(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto at = stat.rfind(')');
  if (at == std::string::npos) return -1;
  std::istringstream fields(stat.substr(at + 2));
  std::string v;
  double ticks = 0;
  for (int n = 3; n <= 15 && fields >> v; ++n)
    if (n == 14 || n == 15) ticks += std::stod(v);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Established TCP connections whose local port is `port` in this network namespace: the store's
// connections, whatever the server (its listeners are not established).
long established_on_port(int port) {
  long n = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // header
    while (std::getline(f, line)) {
      // "  sl  local_address rem_address   st ...": local_address is HEXADDR:HEXPORT.
      std::istringstream fields(line);
      std::string sl, local, remote, state;
      fields >> sl >> local >> remote >> state;
      const auto colon = local.rfind(':');
      if (colon == std::string::npos || state != "01") continue;
      if (std::stol(local.substr(colon + 1), nullptr, 16) == port) ++n;
    }
  }
  return n;
}

void send_byte(const Child& c) {
  char b = 'g';
  (void)!::write(c.to, &b, 1);
}

}  // namespace

StormOutcome run_storm_processes(const StormSpec& spec) {
  StormOutcome out;
  out.ranks = spec.ranks;
  const int rpn = spec.ranks_per_node;
  out.nodes = (spec.ranks + rpn - 1) / rpn;
  const long per_process = std::max<long>(1, (fd_limit() - 256) / fds_per_node(spec.path, rpn));
  int processes =
      spec.processes > 0
          ? spec.processes
          : std::max<int>(2, static_cast<int>((out.nodes + per_process - 1) / per_process));
  processes = std::min(processes, out.nodes);
  out.processes = processes;
  if (static_cast<long>(out.nodes) > per_process * processes) {
    out.status = "error";
    out.error = std::to_string(processes) + " processes cannot hold " + std::to_string(out.nodes) +
                " nodes under the descriptor limit";
    return out;
  }
  if (spec.store_pid > 0) out.store_rss_before_kb = rss_kb(spec.store_pid);
  const auto t_setup = Clock::now();
  std::vector<Child> children(static_cast<size_t>(processes));
  int node = 0;
  for (int p = 0; p < processes; ++p) {
    const int nodes = out.nodes / processes + (p < out.nodes % processes ? 1 : 0);
    GeneratorSpec g;
    g.path = spec.path;
    g.dialect = spec.dialect;
    g.store_host = spec.store_host;
    g.store_port = spec.store_port;
    g.first_node = node;
    g.nodes = nodes;
    g.ranks_per_node = rpn;
    g.job_ranks = out.nodes * rpn;
    g.key_prefix = spec.key_prefix;
    g.timeout_s = spec.timeout_s;
    node += nodes;
    int up[2], down[2];
    if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0) {
      out.status = "error";
      out.error = std::string("pipe: ") + std::strerror(errno);
      return out;
    }
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::close(up[0]);
      ::close(down[1]);
      ::_exit(run_generator(g, up[1], down[0]));
    }
    ::close(up[1]);
    ::close(down[0]);
    children[p] = {pid, up[0], down[1], {}};
  }
  out.ranks = out.nodes * rpn;
  // ok: the generators wait for "done"; otherwise they may still wait for "go": stop them.
  auto finish = [&](bool ok = false) {
    for (auto& c : children) {
      if (ok) {
        send_byte(c);
      } else {
        ::kill(c.pid, SIGKILL);
      }
    }
    for (auto& c : children) {
      int status = 0;
      ::waitpid(c.pid, &status, 0);
      ::close(c.from);
      ::close(c.to);
    }
  };
  const auto ready_deadline = Clock::now() + std::chrono::seconds(300);
  for (auto& c : children) {
    std::string line = read_line(c, ready_deadline);
    if (line != "ready") {
      out.status = "error";
      out.error = "a generator did not get ready: " + (line.empty() ? "(no answer)" : line);
      finish();
      return out;
    }
  }
  out.setup_s = std::chrono::duration<double>(Clock::now() - t_setup).count();
  if (spec.store_pid > 0) out.store_rss_ready_kb = rss_kb(spec.store_pid);
  const double cpu_before = spec.store_pid > 0 ? cpu_s(spec.store_pid) : -1;
  const auto t_go = Clock::now();
  for (auto& c : children) send_byte(c);
  const auto deadline = t_go + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(spec.timeout_s + 10));
  int64_t last_connected = 0, last_released = 0;
  for (auto& c : children) {
    std::string line = read_line(c, deadline);
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "ok") {
      int connected = 0, released = 0;
      long long conn_ns = 0, rel_ns = 0;
      double max_ms = 0;
      in >> connected >> released >> conn_ns >> rel_ns >> max_ms;
      out.connected += connected;
      out.released += released;
      last_connected = std::max<int64_t>(last_connected, conn_ns);
      last_released = std::max<int64_t>(last_released, rel_ns);
      out.max_connect_ms = std::max(out.max_connect_ms, max_ms);
    } else {
      out.status = line.find("deadline") != std::string::npos ? "timeout" : "error";
      if (out.error.empty()) out.error = line.empty() ? "a generator did not answer" : line;
    }
  }
  if (spec.store_pid > 0) {
    out.store_cpu_s = cpu_s(spec.store_pid) - cpu_before;
    out.store_rss_after_kb = rss_kb(spec.store_pid);
    out.store_connections = established_on_port(spec.store_port);
  }
  if (out.status == "ok") {
    const int64_t go =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t_go.time_since_epoch()).count();
    out.connect_s = static_cast<double>(last_connected - go) / 1e9;
    out.total_s = static_cast<double>(last_released - go) / 1e9;
  }
  finish(true);
  return out;
}

}  // namespace cohort::bench

#include "rdzv/endpoint_store.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "cohort/base/deadline.h"
#include "cohort/base/net.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

std::string temp_dir() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// The last non-empty line of a file (cohortd's reason when it failed), "" when there is none.
std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

// A file only this user can read, holding the token, for cohortd's --auth-token-file.
std::string write_token_file(const std::string& token) {
  std::string path = temp_dir() + "/cohort-token-XXXXXX";
  int fd = ::mkstemp(path.data());  // mode 0600
  if (fd < 0)
    throw IoError("cannot create a token file in " + temp_dir() + ": " + std::strerror(errno),
                  errno);
  const bool ok = ::write(fd, token.data(), token.size()) == static_cast<ssize_t>(token.size());
  ::close(fd);
  if (!ok) {
    ::unlink(path.c_str());
    throw IoError("cannot write the token file " + path);
  }
  return path;
}

// Reads one line from `fd` within `timeout`; false on end of file or timeout (`*timed_out` says).
bool read_line(int fd, std::chrono::milliseconds timeout, std::string* line, bool* timed_out) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  *timed_out = false;
  for (;;) {
    const int left_ms = poll_ms_left(deadline);
    if (left_ms == 0) {
      *timed_out = true;
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, left_ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char c;
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    if (c == '\n') return true;
    line->push_back(c);
  }
}

}  // namespace

std::string EndpointStore::cohortd_path() {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "cohortd";
  std::string exe(buf.data(), static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1) + "cohortd";
}

std::unique_ptr<EndpointStore> EndpointStore::start(const std::string& listen_host, int port,
                                                    const StoreSecurity& security,
                                                    std::chrono::milliseconds linger) {
  const std::string cohortd = cohortd_path();
  if (::access(cohortd.c_str(), X_OK) != 0) {
    throw IoError("no cohortd next to cohortrun (looked for " + cohortd + ")", ENOENT);
  }
  // Per user: another user's store on the same port later must not meet this one's file.
  const std::string log_path = temp_dir() + "/cohortd-endpoint-" + std::to_string(::getuid()) +
                               "-" + std::to_string(port) + ".log";
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log_fd < 0) throw IoError("cannot open " + log_path + ": " + std::strerror(errno), errno);
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(log_fd);
    throw IoError(std::string("pipe: ") + std::strerror(errno), errno);
  }
  const std::string token_file = security.token.empty() ? "" : write_token_file(security.token);

  std::vector<std::string> args{cohortd,
                                "--host",
                                listen_host,
                                "--port",
                                std::to_string(port),
                                "--exit-when-idle",
                                std::to_string(linger.count() / 1000.0),
                                "--max-connections-per-address",
                                "0"};
  if (!token_file.empty()) {
    args.insert(args.end(), {"--auth-token-file", token_file});
    if (!security.allow_from_cidrs.empty())
      args.insert(args.end(), {"--allow-unauthenticated-from", security.allow_from_cidrs});
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&files, out[1], 1);
  posix_spawn_file_actions_adddup2(&files, log_fd, 2);
  // Nothing else of this agent's: it outlives the job, and a store connection or a listening
  // socket it held would outlive it with it.
  posix_spawn_file_actions_addclosefrom_np(&files, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // A session of its own: a Ctrl-C or a signal to this job's process group does not reach it.
  // Signals this agent handles start at their defaults; SIGPIPE stays ignored (its stdout, read
  // only until it listens, is closed after).
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGCHLD}) sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  // Not this job's environment: the store outlives the job and belongs to none.
  std::vector<std::string> env_strings;
  for (const char* name : {"PATH", "TMPDIR", "HOME", "LANG", "COHORT_LOG_LEVEL", "LOGLEVEL"})
    if (const char* v = std::getenv(name)) env_strings.push_back(std::string(name) + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t pid = -1;
  const int err = ::posix_spawn(&pid, cohortd.c_str(), &files, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  ::close(out[1]);
  ::close(log_fd);
  auto forget_token = [&] {
    if (!token_file.empty()) ::unlink(token_file.c_str());  // cohortd read it while parsing
  };
  if (err != 0) {
    ::close(out[0]);
    forget_token();
    throw IoError("cannot start " + cohortd + ": " + std::strerror(err), err);
  }

  std::string line;
  bool timed_out = false;
  const bool listening = read_line(out[0], std::chrono::seconds(10), &line, &timed_out);
  ::close(out[0]);
  forget_token();
  if (listening) return std::unique_ptr<EndpointStore>(new EndpointStore(pid, line, log_path));
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Most often the port is taken: by another agent's cohortd, or a standalone one. Then join it.
  if (!timed_out &&
      probe_tcp(local_dial_address(listen_host), port, std::chrono::seconds(2)).kind ==
          Reachability::kListening) {
    return nullptr;
  }
  throw IoError("cohortd could not serve " + format_host_port(listen_host, port) + ": " +
                (timed_out ? "it did not listen within 10 s" : last_line(log_path)) +
                " (log: " + log_path + ")");
}

EndpointStore::~EndpointStore() {
  int status;
  ::waitpid(pid_, &status, WNOHANG);
}

}  // namespace cohort::launch

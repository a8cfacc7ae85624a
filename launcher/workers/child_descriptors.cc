#include "workers/child_descriptors.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "cohort/base/worker_env_names.h"
#include "cohort/error.h"

namespace cohort::launch {
namespace {

[[noreturn]] void fail(const char* call) {
  int e = errno;
  throw IoError(std::string(call) + ": " + std::strerror(e), e);
}

void make_pipe(int* read_end, int* write_end) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) fail("pipe2");
  *read_end = fds[0];
  *write_end = fds[1];
}

// A pseudo-terminal: the worker writes to the slave, cohortrun reads the master. Output
// processing is off (no "\n" -> "\r\n"), so logs and the tail see what the worker wrote; the
// window size is that of cohortrun's terminal, so progress bars get its width.
void make_pty(int* read_end, int* write_end) {
  int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) fail("posix_openpt");
  *read_end = master;
  if (::grantpt(master) != 0 || ::unlockpt(master) != 0) fail("grantpt");
  char name[128];
  if (::ptsname_r(master, name, sizeof(name)) != 0) fail("ptsname_r");
  int slave = ::open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (slave < 0) fail("open (pty slave)");
  *write_end = slave;
  termios t{};
  if (::tcgetattr(slave, &t) == 0) {
    t.c_oflag &= ~static_cast<tcflag_t>(OPOST);
    t.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(slave, TCSANOW, &t);
  }
  winsize ws{};
  for (int fd : {STDERR_FILENO, STDOUT_FILENO}) {
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
      ::ioctl(slave, TIOCSWINSZ, &ws);
      break;
    }
  }
}

// A connected pair of stream sockets: `here` is cohortrun's end (non-blocking), `there` the
// worker's (blocking: its helper thread waits there for questions).
void make_socket_pair(int* here, int* there) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) fail("socketpair");
  *here = fds[0];
  *there = fds[1];
  ::fcntl(*here, F_SETFL, ::fcntl(*here, F_GETFL) | O_NONBLOCK);
}

}  // namespace

void ChildDescriptors::close_ends(Ends* e) {
  for (int* fd : {&e->read, &e->write}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

ChildDescriptors::ChildDescriptors(const SpawnRequest& req) : inherit_(req.inherit_fds) {
  try {
    if (req.out == StreamMode::kPipe) make_pipe(&out_.read, &out_.write);
    if (req.out == StreamMode::kPty) make_pty(&out_.read, &out_.write);
    if (req.err == StreamMode::kPipe) make_pipe(&err_.read, &err_.write);
    if (req.err == StreamMode::kPty) make_pty(&err_.read, &err_.write);
    if (req.heartbeat) {
      make_pipe(&hb_.read, &hb_.write);
      // The worker must never block on a beat: a full pipe just drops it.
      ::fcntl(hb_.write, F_SETFL, ::fcntl(hb_.write, F_GETFL) | O_NONBLOCK);
    }
    if (req.control) make_socket_pair(&control_.read, &control_.write);
  } catch (...) {
    for (Ends* e : {&out_, &err_, &hb_, &control_}) close_ends(e);
    throw;
  }
  env_ = req.env;
  if (hb_.write >= 0)
    env_.push_back(std::string(worker_env::kHeartbeatFd) + "=" + std::to_string(hb_.write));
  if (control_.write >= 0)
    env_.push_back(std::string(worker_env::kControlFd) + "=" + std::to_string(control_.write));
}

ChildDescriptors::~ChildDescriptors() {
  for (Ends* e : {&out_, &err_, &hb_, &control_}) close_ends(e);
}

std::vector<std::pair<int, int>> ChildDescriptors::mapping() const {
  std::vector<std::pair<int, int>> m{{STDIN_FILENO, STDIN_FILENO},
                                     {out_.write >= 0 ? out_.write : STDOUT_FILENO, STDOUT_FILENO},
                                     {err_.write >= 0 ? err_.write : STDERR_FILENO, STDERR_FILENO}};
  if (hb_.write >= 0) m.emplace_back(hb_.write, hb_.write);
  if (control_.write >= 0) m.emplace_back(control_.write, control_.write);
  for (int fd : inherit_) m.emplace_back(fd, fd);
  return m;
}

SpawnedProcess ChildDescriptors::finish(pid_t pid, int pidfd) {
  for (Ends* e : {&out_, &err_, &hb_, &control_}) {
    if (e->write >= 0) ::close(e->write);
    e->write = -1;
  }
  SpawnedProcess p;
  p.pid = pid;
  p.pidfd = pidfd;
  p.stdout_fd = std::exchange(out_.read, -1);
  p.stderr_fd = std::exchange(err_.read, -1);
  p.heartbeat_fd = std::exchange(hb_.read, -1);
  p.control_fd = std::exchange(control_.read, -1);
  return p;
}

}  // namespace cohort::launch

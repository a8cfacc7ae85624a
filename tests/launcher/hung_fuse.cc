// cohort_hung_fuse: runs a command beside a file system that never answers, as a dead NFS server
// or a FUSE daemon that stopped answering leaves its mount, and cleans up whatever happens.
//
//   cohort_hung_fuse MOUNTPOINT SECONDS -- COMMAND [ARG...]
//
// In a mount namespace of its own (the mount goes with the last process in it, even when this
// program is killed), it mounts at MOUNTPOINT (an existing directory) a FUSE file system whose
// daemon, this program, answers FUSE_INIT and nothing else: the first lookup under the mount
// blocks its caller in the kernel, and once the daemon has taken the request not even SIGKILL
// ends that wait (fs/fuse/dev.c, request_wait_answer), as a thread of a dying process there holds
// the whole process. It runs COMMAND, which sees the mount, and waits up to SECONDS for it. Then
// it closes /dev/fuse, which aborts the connection (every held request fails with ENOTCONN, so
// whatever was stuck wakes), and reaps the descendants that outlived COMMAND (it is their
// subreaper), for up to 5 s more.
//
// What it saw goes to stderr, as lines starting "hung_fuse: ", for tests to read:
//   hung_fuse: holding LOOKUP 'error.json' at 1.234 s      each request held (time since start)
//   hung_fuse: the command exited at 3.456 s with status 1
//   hung_fuse: the command did not exit within SECONDS s; killed
//   hung_fuse: 1 descendant(s) outlived the command (reaped after the abort)
// Exit status: COMMAND's (128 + the signal that ended it); 124 when it outlived SECONDS; 77 when
// no FUSE mount can be made here (not root, no /dev/fuse, no mount namespaces), for a test to
// skip on.
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
const Clock::time_point kStart = Clock::now();

double since_start() {
  return std::chrono::duration<double>(Clock::now() - kStart).count();
}

constexpr int kCannotMount = 77;
constexpr int kOutlived = 124;

// Mounts the file system in a private mount namespace; the /dev/fuse descriptor, or -1 (said why).
int mount_hung(const char* mountpoint) {
  if (::unshare(CLONE_NEWNS) != 0) {
    std::fprintf(stderr, "hung_fuse: cannot make a mount namespace: %s\n", std::strerror(errno));
    return -1;
  }
  // Nothing mounted here propagates back to the machine's namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    std::fprintf(stderr, "hung_fuse: cannot make / private: %s\n", std::strerror(errno));
    return -1;
  }
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "hung_fuse: cannot open /dev/fuse: %s\n", std::strerror(errno));
    return -1;
  }
  const std::string options =
      "fd=" + std::to_string(fd) + ",rootmode=40000,user_id=0,group_id=0,allow_other";
  if (::mount("cohort_hung_fuse", mountpoint, "fuse.cohort_hung", MS_NOSUID | MS_NODEV,
              options.c_str()) != 0) {
    std::fprintf(stderr, "hung_fuse: cannot mount FUSE at %s: %s\n", mountpoint,
                 std::strerror(errno));
    ::close(fd);
    return -1;
  }
  return fd;
}

const char* opcode_name(uint32_t op) {
  switch (op) {
    case FUSE_LOOKUP:
      return "LOOKUP";
    case FUSE_GETATTR:
      return "GETATTR";
    case FUSE_OPEN:
      return "OPEN";
    case FUSE_READ:
      return "READ";
    case FUSE_OPENDIR:
      return "OPENDIR";
    case FUSE_INTERRUPT:
      return "INTERRUPT";
    default:
      return "request";
  }
}

// Serves one request: FUSE_INIT is answered, every other one held (never answered).
void serve(int fuse, std::vector<char>& buf) {
  const ssize_t n = ::read(fuse, buf.data(), buf.size());
  if (n < static_cast<ssize_t>(sizeof(fuse_in_header))) return;
  fuse_in_header in;
  std::memcpy(&in, buf.data(), sizeof in);
  const char* body = buf.data() + sizeof in;
  if (in.opcode == FUSE_INIT) {
    fuse_init_in init;
    std::memcpy(&init, body, sizeof init < in.len - sizeof in ? sizeof init : in.len - sizeof in);
    struct {
      fuse_out_header header;
      fuse_init_out init;
    } reply{};
    reply.header.len = sizeof reply;
    reply.header.unique = in.unique;
    reply.init.major = FUSE_KERNEL_VERSION;
    reply.init.minor = FUSE_KERNEL_MINOR_VERSION;
    reply.init.max_readahead = init.max_readahead;
    reply.init.max_background = 16;
    reply.init.congestion_threshold = 12;
    reply.init.max_write = 1 << 20;
    if (::write(fuse, &reply, sizeof reply) < 0)
      std::fprintf(stderr, "hung_fuse: FUSE_INIT reply: %s\n", std::strerror(errno));
    return;
  }
  if (in.opcode == FUSE_FORGET || in.opcode == FUSE_BATCH_FORGET) return;  // never answered
  std::string name = in.opcode == FUSE_LOOKUP ? " '" + std::string(body) + "'" : "";
  std::fprintf(stderr, "hung_fuse: holding %s%s at %.3f s\n", opcode_name(in.opcode), name.c_str(),
               since_start());
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "with status " + std::to_string(WEXITSTATUS(status));
  return "by signal " + std::to_string(WTERMSIG(status));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: cohort_hung_fuse MOUNTPOINT SECONDS -- COMMAND [ARG...]\n");
    return 2;
  }
  const char* mountpoint = argv[1];
  const auto limit = std::chrono::duration<double>(std::atof(argv[2]));
  const int fuse = mount_hung(mountpoint);
  if (fuse < 0) return kCannotMount;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const pid_t child = ::fork();
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // killed with this program (a test's timeout)
    ::execvp(argv[4], argv + 4);
    std::fprintf(stderr, "hung_fuse: cannot run %s: %s\n", argv[4], std::strerror(errno));
    ::_exit(127);
  }
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
  std::vector<char> buf(FUSE_MIN_READ_BUFFER + (1 << 20));
  int status = 0;
  bool exited = false;
  while (!exited) {
    const double left = limit.count() - since_start();
    if (left <= 0) break;
    pollfd p[2] = {{fuse, POLLIN, 0}, {pidfd, POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(left * 1000) + 1) < 0 && errno != EINTR) break;
    if (p[0].revents & POLLIN) serve(fuse, buf);
    if (p[1].revents & POLLIN) {
      ::waitpid(child, &status, 0);
      exited = true;
      std::fprintf(stderr, "hung_fuse: the command exited at %.3f s %s\n", since_start(),
                   describe(status).c_str());
    }
  }
  if (!exited) {
    std::fprintf(stderr, "hung_fuse: the command did not exit within %s s; killed\n", argv[2]);
    ::kill(child, SIGKILL);
  }
  // The abort: every request still held fails, so what was stuck in the mount wakes.
  ::close(fuse);
  ::umount2(mountpoint, MNT_DETACH);
  if (!exited) ::waitpid(child, &status, 0);
  int outlived = 0;
  const auto reap_until = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    const pid_t r = ::waitpid(-1, nullptr, WNOHANG);
    if (r > 0) {
      ++outlived;
      continue;
    }
    if (r < 0 || Clock::now() >= reap_until) break;  // ECHILD: none left
    ::usleep(10000);
  }
  if (outlived > 0)
    std::fprintf(stderr,
                 "hung_fuse: %d descendant(s) outlived the command (reaped after the abort)\n",
                 outlived);
  if (!exited) return kOutlived;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

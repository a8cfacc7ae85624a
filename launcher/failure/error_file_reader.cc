#include "failure/error_file_reader.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <cerrno>
#include <cstring>

#include "failure/bounded_file.h"

namespace cohort::launch {
namespace {

// The most a reading process writes: the file's last kMaxErrorFileBytes (and one more byte that
// shows a file grown meanwhile) and write_bounded_file's trailer.
constexpr size_t kMaxWritten = kMaxErrorFileBytes + 4096;

// The reading process, after fork: system calls only (the other threads' locks are copied held).
[[noreturn]] void be_the_reader(const char* path, int out) {
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // none of cohortrun's handlers runs here
  ::prctl(PR_SET_NAME, "cohort-errfile");
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // It holds nothing of cohortrun's: stuck in a hung mount, it must not keep open a pipe whose
  // other end waits for it to close (the console cohortrun writes to, a worker's output).
  if (out != 3) {
    ::dup2(out, 3);
    out = 3;
  }
  const int null = ::open("/dev/null", O_RDWR);
  for (int fd = 0; fd < 3; ++fd) {
    if (null >= 0) {
      ::dup2(null, fd);
    } else {
      ::close(fd);
    }
  }
  if (::syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    for (int fd = 4; fd < 65536; ++fd) ::close(fd);  // Linux before 5.9
  }
  ::_exit(write_bounded_file(path, kMaxErrorFileBytes, out) ? 0 : 1);
}

}  // namespace

// One read: its process, the pipe it writes to, its limit.
struct ErrorFileReader::Read {
  explicit Read(asio::io_context& io) : output(io), exit(io) {}
  std::string path;
  Done done;  // empty once settled
  std::unique_ptr<LoopTimer> limit;
  pid_t pid = -1;
  bool reaped = false;
  asio::posix::stream_descriptor output;  // the read end of its pipe
  asio::posix::stream_descriptor exit;    // its pidfd: readable once it has ended
  std::array<char, 64 * 1024> buf;
  std::string written;
};

ErrorFileReader::ErrorFileReader(asio::io_context& io, LoopClock& clock,
                                 std::chrono::milliseconds limit)
    : io_(io), clock_(clock), limit_(limit) {}

ErrorFileReader::~ErrorFileReader() {
  alive_.reset();  // from here on no handler does anything
  for (auto& r : reads_) {
    // Destroyed, not only cancelled: the loop's pending handlers keep the Read alive, possibly
    // past the clock the timer belongs to.
    r->limit.reset();
    std::error_code ignored;
    r->output.close(ignored);
    r->exit.close(ignored);
  }
  // A child not reaped yet is now a stray: reaped when it ends (descendants.h).
}

std::vector<pid_t> ErrorFileReader::children() const {
  std::vector<pid_t> pids;
  for (const auto& r : reads_)
    if (!r->reaped) pids.push_back(r->pid);
  return pids;
}

void ErrorFileReader::settle(Read& r, std::optional<ErrorFileContent> content) {
  if (!r.done) return;  // settled already
  Done done = std::move(r.done);
  r.done = nullptr;
  r.limit->cancel();
  if (r.reaped) std::erase_if(reads_, [&](const auto& p) { return p.get() == &r; });
  done(std::move(content));
}

void ErrorFileReader::read(std::string path, Done done) {
  auto r = std::make_shared<Read>(io_);
  r->path = std::move(path);
  r->done = std::move(done);
  r->limit = clock_.make_timer();
  std::string failed;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    failed = std::string("pipe: ") + std::strerror(errno);
  } else {
    const char* c_path = r->path.c_str();  // taken before fork: the child only makes calls
    r->pid = ::fork();
    if (r->pid == 0) be_the_reader(c_path, fds[1]);
    ::close(fds[1]);
    if (r->pid < 0) {
      failed = std::string("fork: ") + std::strerror(errno);
      ::close(fds[0]);
    }
  }
  if (!failed.empty()) {
    ErrorFileContent c;
    c.message = "the error file " + r->path + " was not read: " + failed;
    asio::post(io_, [this, alive = std::weak_ptr<int>(alive_), r, c]() mutable {
      if (!alive.expired()) settle(*r, std::move(c));
    });
    return;
  }
  r->output.assign(fds[0]);
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, r->pid, 0));
  if (pidfd >= 0) {
    ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    r->exit.assign(pidfd);
  }
  reads_.push_back(r);
  r->limit->start(limit_, [this, weak = std::weak_ptr<Read>(r), limit = limit_] {
    auto r = weak.lock();
    if (!r) return;
    // Ends it when the file system answers (at once where its wait is killable); reaped then.
    ::kill(r->pid, SIGKILL);
    std::error_code ignored;
    r->output.close(ignored);
    ErrorFileContent c;
    c.message = "the error file " + r->path + " could not be read within " +
                std::to_string(limit.count()) + " ms (a file system that does not answer?)";
    settle(*r, std::move(c));
  });
  read_output(r);
  if (pidfd >= 0) watch_exit(r);
}

void ErrorFileReader::read_output(const std::shared_ptr<Read>& r) {
  r->output.async_read_some(asio::buffer(r->buf), [this, alive = std::weak_ptr<int>(alive_), r](
                                                      std::error_code ec, size_t n) {
    if (alive.expired() || ec == asio::error::operation_aborted) return;
    if (!ec && r->written.size() + n <= kMaxWritten) {
      r->written.append(r->buf.data(), n);
      read_output(r);
      return;
    }
    // The end of the pipe: the process wrote all it will.
    std::error_code ignored;
    r->output.close(ignored);
    settle(*r, error_file_content(parse_written_bounded_file(r->written, kMaxErrorFileBytes)));
    if (!r->exit.is_open() && !r->reaped) {
      // No pidfd (Linux before 5.3): it has closed its pipe, so it is exiting.
      ::waitpid(r->pid, nullptr, 0);
      r->reaped = true;
      std::erase(reads_, r);
    }
  });
}

void ErrorFileReader::watch_exit(const std::shared_ptr<Read>& r) {
  r->exit.async_wait(asio::posix::stream_descriptor::wait_read,
                     [this, alive = std::weak_ptr<int>(alive_), r](std::error_code ec) {
                       if (alive.expired() || ec == asio::error::operation_aborted) return;
                       ::waitpid(r->pid, nullptr, WNOHANG);
                       r->reaped = true;
                       std::error_code ignored;
                       r->exit.close(ignored);
                       if (!r->done) std::erase(reads_, r);
                     });
}

}  // namespace cohort::launch

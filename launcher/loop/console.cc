#include "loop/console.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <asio/post.hpp>
#include <cerrno>

#include "cohort/base/deadline.h"

namespace cohort::launch {
namespace {

class ConsoleSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit ConsoleSink(ConsoleStream& stream) : stream_(stream) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    stream_.write(std::string_view(formatted.data(), formatted.size()));
  }
  void flush_() override {}

 private:
  ConsoleStream& stream_;
};

}  // namespace

ConsoleStream::ConsoleStream(asio::io_context& io, int fd, size_t max_queued)
    : io_(io), original_fd_(fd), max_queued_(max_queued) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    closed_ = true;  // no such console (closed before cohortrun started)
    return;
  }
  terminal_ = ::isatty(fd) == 1;
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    // A private open file description of the same pipe or terminal: O_NONBLOCK on it does not
    // reach the description the workers and the shell share.
    const std::string path = "/proc/self/fd/" + std::to_string(fd);
    fd_ = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd_ >= 0) {
      owns_fd_ = true;
      nonblocking_ = true;
      return;
    }
  } else if (S_ISSOCK(st.st_mode)) {
    fd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (fd_ >= 0) {
      owns_fd_ = true;
      nonblocking_ = true;  // send(MSG_DONTWAIT) below
      socket_ = true;
      return;
    }
  }
  fd_ = fd;  // a regular file, or the reopen failed: plain writes
}

ConsoleStream::~ConsoleStream() {
  alive_.reset();
  if (waiter_) {
    std::error_code ignored;
    waiter_->close(ignored);
  }
  if (owns_fd_ && fd_ >= 0) ::close(fd_);
}

uint64_t ConsoleStream::dropped_bytes() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

bool ConsoleStream::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void ConsoleStream::write(std::string_view bytes) {
  if (bytes.empty()) return;
  std::lock_guard lock(mu_);
  if (closed_) {
    dropped_ += bytes.size();
    return;
  }
  if (queue_.size() + bytes.size() > max_queued_) {
    dropped_ += bytes.size();
    dropped_lines_ += std::max<uint64_t>(1, std::count(bytes.begin(), bytes.end(), '\n'));
    return;
  }
  queue_.append(bytes);
  drain_locked();
  if (!queue_.empty()) arm();
}

void ConsoleStream::drain_locked() {
  for (int pass = 0; pass < 2; ++pass) {
    while (!queue_.empty() && !closed_) {
      ssize_t n;
      if (socket_) {
        n = ::send(fd_, queue_.data(), queue_.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      } else {
        n = ::write(fd_, queue_.data(), queue_.size());
      }
      if (n > 0) {
        queue_.erase(0, static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
      // EPIPE (the reader went away), EBADF, EIO (a terminal hung up): this console is gone.
      closed_ = true;
      dropped_ += queue_.size();
      queue_.clear();
      return;
    }
    if (dropped_lines_ == 0 || closed_) return;
    // Drained after a loss: say so once, where the output went missing.
    queue_ = "cohortrun: " + std::to_string(dropped_lines_) +
             " line(s) of output were dropped here because this console was not read fast "
             "enough; --redirects 3 (with --log-dir) keeps every line in files\n";
    dropped_lines_ = 0;
  }
}

void ConsoleStream::arm() {
  if (armed_ || !nonblocking_) return;
  armed_ = true;
  asio::post(io_, [this, alive = std::weak_ptr<int>(alive_)] {
    if (alive.expired()) return;
    if (!waiter_) {
      int copy = ::fcntl(fd_, F_DUPFD_CLOEXEC, 3);
      if (copy < 0) {
        std::lock_guard lock(mu_);
        armed_ = false;
        return;
      }
      waiter_ = std::make_unique<asio::posix::stream_descriptor>(io_, copy);
    }
    waiter_->async_wait(asio::posix::stream_descriptor::wait_write,
                        [this, alive = std::weak_ptr<int>(alive_)](std::error_code ec) {
                          if (ec || alive.expired()) return;
                          on_writable();
                        });
  });
}

void ConsoleStream::on_writable() {
  std::lock_guard lock(mu_);
  armed_ = false;
  drain_locked();
  if (!queue_.empty() && !closed_) arm();
}

void ConsoleStream::write_blocking(std::string_view text, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::lock_guard lock(mu_);
  if (closed_) return;
  queue_.append(text);
  for (;;) {
    drain_locked();
    if (queue_.empty() || closed_) return;
    const int left_ms = poll_ms_left(deadline);
    if (left_ms == 0) return;
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, left_ms);
  }
}

std::shared_ptr<spdlog::sinks::sink> console_log_sink(ConsoleStream& stream) {
  return std::make_shared<ConsoleSink>(stream);
}

}  // namespace cohort::launch

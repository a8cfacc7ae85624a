#include "server/log_sink.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>

namespace cohort::rdzv {

QueuedLogSink::QueuedLogSink(int fd, size_t max_queued_bytes)
    : fd_(fd), max_queued_bytes_(max_queued_bytes) {
  writer_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "cohortd-log");
    write_loop();
  });
}

QueuedLogSink::~QueuedLogSink() {
  {
    std::lock_guard lock(queue_mu_);
    stopping_ = true;
  }
  queue_cv_.notify_one();
  // A second for what is queued to be written; a reader that does not read gets no longer.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < deadline) {
    {
      std::lock_guard q(queue_mu_);
      if (queue_.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  give_up_ = true;
  writer_.join();
}

void QueuedLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t buf;
  formatter_->format(msg, buf);
  {
    std::lock_guard lock(queue_mu_);
    if (queued_bytes_ + buf.size() > max_queued_bytes_) {
      ++dropped_;
      return;
    }
    queued_bytes_ += buf.size();
    queue_.emplace_back(buf.data(), buf.size());
  }
  queue_cv_.notify_one();
}

bool QueuedLogSink::write_all(const std::string& line) {
  size_t off = 0;
  while (off < line.size()) {
    if (give_up_) return false;
    pollfd p{fd_, POLLOUT, 0};
    int rc = ::poll(&p, 1, 100);  // wakes to see give_up_
    if (rc < 0 && errno != EINTR) return false;
    if (rc <= 0) continue;
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    // POLLOUT on a pipe means PIPE_BUF bytes fit: a write of that much cannot block.
    size_t n = std::min<size_t>(line.size() - off, PIPE_BUF);
    ssize_t w = ::write(fd_, line.data() + off, n);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;  // EPIPE (the reader is gone), ENOSPC, ...
    }
    off += static_cast<size_t>(w);
  }
  return true;
}

void QueuedLogSink::write_loop() {
  for (;;) {
    std::string line;
    {
      std::unique_lock lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and all written
      line = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= line.size();
    }
    // A failed descriptor fails fast (EPIPE, POLLERR), so each line is tried: a full disk may
    // recover.
    if (!write_all(line)) {
      if (give_up_) return;
      ++dropped_;
    }
  }
}

}  // namespace cohort::rdzv

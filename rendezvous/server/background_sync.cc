#include "server/background_sync.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

namespace cohort::rdzv {

BackgroundSync::BackgroundSync() : thread_([this] { run(); }) {
  ::pthread_setname_np(thread_.native_handle(), "cohortd-fsync");  // as top -H and /proc show it
}

BackgroundSync::~BackgroundSync() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

bool BackgroundSync::request(int fd) {
  std::lock_guard<std::mutex> lock(mu_);
  if (busy_) return false;
  // A duplicate: the log may replace or close its own descriptor (a compaction's rename) while
  // the thread syncs; the open file stays until this duplicate is closed.
  int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    ::fdatasync(fd);  // no descriptor to spare: sync here rather than not at all
    return true;
  }
  pending_fd_ = dup;
  busy_ = true;
  cv_.notify_one();
  return true;
}

unsigned long BackgroundSync::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

void BackgroundSync::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || pending_fd_ >= 0; });
    if (pending_fd_ < 0) return;  // stopping with nothing pending
    int fd = pending_fd_;
    pending_fd_ = -1;
    lock.unlock();
    ::fdatasync(fd);
    ::close(fd);
    lock.lock();
    busy_ = false;
    ++completed_;
  }
}

}  // namespace cohort::rdzv

// BackgroundSync: fdatasync(2) on a thread of its own, for cohortd --fsync interval.
//
// The periodic sync of the store log used to run on the event loop. On a log with much written
// and not yet synced, one fdatasync takes hundreds of milliseconds (140-360 ms measured on this
// project's CI machine), and every client waited that long. Here the loop only hands over a
// duplicate of the descriptor; the thread syncs it and closes it. The interval's promise is kept
// as before: what was written before a request is on disk once that sync returns, and a request
// made while a sync runs is refused, so the caller keeps its dirty flag and asks again at its next
// tick (no queue builds up behind a slow disk).
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace cohort::rdzv {

class BackgroundSync {
 public:
  BackgroundSync();
  ~BackgroundSync();  // waits for a sync in progress
  BackgroundSync(const BackgroundSync&) = delete;
  BackgroundSync& operator=(const BackgroundSync&) = delete;

  // Starts an fdatasync of what `fd` refers to, unless one is running. True when started.
  bool request(int fd);
  // Syncs completed since construction (for tests and the log line at exit).
  unsigned long completed() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int pending_fd_ = -1;  // handed over, not yet synced: a duplicate this object closes
  bool busy_ = false;    // a sync was requested and has not returned
  bool stop_ = false;
  unsigned long completed_ = 0;
  std::thread thread_;  // last: started once the fields above exist
};

}  // namespace cohort::rdzv

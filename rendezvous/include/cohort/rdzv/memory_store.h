// cohort::MemoryStore: an in-process store with the semantics of the TCP store, for tests and for
// threads of one process. Safe for concurrent use.
//
// Deadlines (get, wait, multi_get) are measured on the clock given at construction: with a
// ManualClock (cohort/base/clock.h) a wait times out when a test advances the clock past its
// deadline, not after real time.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>

#include "cohort/base/clock.h"
#include "cohort/rdzv/store.h"

namespace cohort {

class MemoryStore final : public Store {
 public:
  // `clock` must outlive the store.
  explicit MemoryStore(std::chrono::milliseconds timeout = std::chrono::seconds(300),
                       Clock& clock = Clock::steady());
  ~MemoryStore() override;
  MemoryStore(const MemoryStore&) = delete;
  MemoryStore& operator=(const MemoryStore&) = delete;

  void set(std::string_view key, std::string_view value) override;
  std::string get(std::string_view key) override;
  int64_t add(std::string_view key, int64_t delta) override;
  std::string compare_set(std::string_view key, std::string_view expected,
                          std::string_view desired) override;
  bool check(std::span<const std::string> keys) override;
  using Store::wait;
  void wait(std::span<const std::string> keys, std::chrono::milliseconds timeout) override;
  bool delete_key(std::string_view key) override;
  int64_t num_keys() override;
  std::vector<std::string> multi_get(std::span<const std::string> keys) override;
  void multi_set(std::span<const std::string> keys, std::span<const std::string> values) override;
  void append(std::string_view key, std::string_view value) override;
  std::chrono::milliseconds timeout() const override;
  void set_timeout(std::chrono::milliseconds timeout) override;
  std::string describe() const override { return "memory"; }
  // Makes every blocked wait fail with StoreError at once; later calls work again.
  void interrupt() override;

  // A view of this store with an interrupt() of its own, as a TCP connection to a shared server
  // has: interrupting it fails only the waits made through it. While `abandon` (when given) is
  // true, its waits fail at once, as a TcpStore's connects stop (TcpStoreOptions::abandon). The
  // store, and `abandon`, must outlive it.
  std::unique_ptr<Store> connect(const std::atomic<bool>* abandon = nullptr);

 private:
  class Connection;
  // REQUIRES: lock held on mu_. `own`: a connection's interrupt count (also guarded by mu_).
  void wait_locked(std::unique_lock<std::mutex>& lock, std::span<const std::string> keys,
                   std::chrono::milliseconds timeout, const uint64_t* own = nullptr,
                   const std::atomic<bool>* abandon = nullptr);

  Clock& clock_;
  int waker_ = 0;  // clock_'s waker id (manual clocks)
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::string, std::less<>> data_;  // guarded by mu_
  std::chrono::milliseconds timeout_;                     // guarded by mu_
  uint64_t interrupts_ = 0;                               // guarded by mu_
};

}  // namespace cohort

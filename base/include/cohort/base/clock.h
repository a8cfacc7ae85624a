// Clock: where time comes from, so that code which decides by time (liveness, last calls, hang
// and grace timers, store waits) can be driven by tests in milliseconds instead of seconds.
//
// SteadyClock is std::chrono::steady_clock. ManualClock stands still until advance() moves it;
// code that blocks until a time on the clock (MemoryStore's waits) registers a waker, so that an
// advance wakes it to look again. Both are safe for concurrent use.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>

namespace cohort {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~Clock() = default;
  virtual time_point now() const = 0;

  // True when time passes by itself (a blocking wait may then use its own timeout). A manual
  // clock's time passes only in advance(), which calls the wakers.
  virtual bool is_real() const { return true; }

  // Registers `wake`, called (from the thread that advances the clock) after every advance of a
  // manual clock; returns an id for remove_waker(). A real clock never calls it.
  virtual int add_waker(std::function<void()> wake) {
    (void)wake;
    return 0;
  }
  virtual void remove_waker(int id) { (void)id; }

  // The process's steady clock (a shared, stateless instance).
  static Clock& steady();
};

class SteadyClock final : public Clock {
 public:
  time_point now() const override { return std::chrono::steady_clock::now(); }
};

class ManualClock final : public Clock {
 public:
  // Starts at an arbitrary but fixed point (not the epoch, so that `now() - 1 h` is valid).
  ManualClock() : now_(std::chrono::steady_clock::time_point(std::chrono::hours(24 * 365))) {}

  time_point now() const override {
    std::lock_guard lock(mu_);
    return now_;
  }
  bool is_real() const override { return false; }

  // Moves time forward by `d`, then calls every waker.
  void advance(duration d) {
    std::map<int, std::function<void()>> wakers;
    {
      std::lock_guard lock(mu_);
      now_ += d;
      wakers = wakers_;
    }
    for (auto& [id, wake] : wakers) wake();
  }

  int add_waker(std::function<void()> wake) override {
    std::lock_guard lock(mu_);
    int id = next_id_++;
    wakers_.emplace(id, std::move(wake));
    return id;
  }
  void remove_waker(int id) override {
    std::lock_guard lock(mu_);
    wakers_.erase(id);
  }

 private:
  mutable std::mutex mu_;
  time_point now_;                               // guarded by mu_
  std::map<int, std::function<void()>> wakers_;  // guarded by mu_
  int next_id_ = 1;                              // guarded by mu_
};

inline Clock& Clock::steady() {
  static SteadyClock clock;
  return clock;
}

}  // namespace cohort

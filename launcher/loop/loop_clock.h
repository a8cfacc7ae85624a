// LoopClock: time and one-shot timers on the launcher's event loop, behind an interface so that
// the launcher's unit tests run whole lifecycles (grace periods, hang timeouts, keep-alives) on a
// manual clock in milliseconds.
//
// A timer's callback always runs from the loop (io_context::run/poll), never from inside start()
// or cancel() or the clock's advance(); after cancel(), or a new start(), the earlier callback
// never runs. Destroying a timer cancels it.
//
// Thread safety: use from the loop's thread only.
#pragma once

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "cohort/base/clock.h"

namespace cohort::launch {

class LoopTimer {
 public:
  virtual ~LoopTimer() = default;
  // (Re)arms the timer: `fire` runs once, `after` from now, unless cancelled first.
  virtual void start(std::chrono::milliseconds after, std::function<void()> fire) = 0;
  virtual void cancel() = 0;
  virtual bool armed() const = 0;
};

class LoopClock {
 public:
  virtual ~LoopClock() = default;
  // The clock the timers run on (for code off the loop that must agree with them).
  virtual Clock& clock() = 0;
  Clock::time_point now() { return clock().now(); }
  virtual std::unique_ptr<LoopTimer> make_timer() = 0;
};

// Asio's steady timers.
std::unique_ptr<LoopClock> make_asio_loop_clock(asio::io_context& io);

// Timers on a ManualClock: they fire (through `io`) when advance() passes their deadline.
class ManualLoopClock final : public LoopClock {
 public:
  explicit ManualLoopClock(asio::io_context& io);
  ~ManualLoopClock() override;
  Clock& clock() override { return clock_; }
  ManualClock& manual() { return clock_; }
  std::unique_ptr<LoopTimer> make_timer() override;
  // Moves time forward; the timers that fall due are posted to the loop in deadline order.
  void advance(std::chrono::milliseconds d);
  // When the earliest armed timer is due, or nullopt when none is armed.
  std::optional<Clock::time_point> next_deadline() const;

 private:
  class Timer;
  friend class Timer;
  asio::io_context& io_;
  ManualClock clock_;
  std::vector<Timer*> timers_;  // every live timer
};

}  // namespace cohort::launch

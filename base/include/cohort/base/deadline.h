// The milliseconds a poll(2) may wait before a steady-clock deadline.
//
// Rounded up: poll(2) takes whole milliseconds, and a count rounded down gave up as much as a
// millisecond early (an interpreter probe with a 300 ms timeout gave up after 299.97 ms). A wait
// written as
//
//   for (;;) {
//     const int ms = cohort::poll_ms_left(deadline);
//     if (ms == 0) /* timed out */;
//     ::poll(&p, 1, ms);
//     ...
//   }
//
// therefore never times out before its deadline.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace cohort {

// 0 once `deadline` has passed; else the time left in whole milliseconds, rounded up (at most
// 2^30, about 12 days, which poll(2)'s int holds).
inline int poll_ms_left(
    std::chrono::steady_clock::time_point deadline,
    std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now()) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count(), int64_t{1} << 30));
}

}  // namespace cohort

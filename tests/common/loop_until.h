// For tests that drive an asio loop on the test's own thread: run it until a condition holds, with
// a deadline in real time. (The text of an error a callback was given: cohort::describe, in
// cohort/error.h.)
#pragma once

#include <asio/io_context.hpp>
#include <chrono>
#include <functional>

namespace cohort::testing {

// Runs `io` in 2 ms slices until `done` holds; false once `limit` of real time has passed.
inline bool run_until(asio::io_context& io, const std::function<bool()>& done,
                      std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    io.run_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace cohort::testing

// For tests that drive an asio loop on the test's own thread: run it until a condition holds, with
// a deadline in real time, and the text of an error a callback was given.
#pragma once

#include <asio/io_context.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <string>

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

// what() of the exception in `err` ("" for none, "(not a std::exception)" for anything else).
inline std::string message_of(std::exception_ptr err) {
  if (!err) return "";
  try {
    std::rethrow_exception(err);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "(not a std::exception)";
  }
}

}  // namespace cohort::testing

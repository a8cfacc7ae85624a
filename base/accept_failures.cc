#include "cohort/base/accept_failures.h"

#include <cstdio>

namespace cohort {
namespace {

std::string seconds(AcceptFailures::Clock::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

std::optional<std::string> AcceptFailures::failed(const std::string& error, Clock::time_point now) {
  ++total_;
  if (in_storm_++ == 0) storm_start_ = now;
  if (unlogged_++ == 0) first_unlogged_ = now;
  if (quiet(now)) return std::nullopt;
  std::string line = what_ + ": " + error;
  if (in_storm_ == 1) {
    line += " (retrying; further failures are counted, at most a line every " + seconds(interval_) +
            ")";
  } else {
    line += " (" + std::to_string(unlogged_) + (unlogged_ == 1 ? " time" : " times") + " in " +
            seconds(now - first_unlogged_) + ", " + std::to_string(in_storm_) +
            " since the failures began " + seconds(now - storm_start_) + " ago)";
  }
  unlogged_ = 0;
  last_line_ = now;
  return line;
}

std::optional<std::string> AcceptFailures::accepted(Clock::time_point now) {
  if (in_storm_ == 0 || quiet(now)) return std::nullopt;
  std::string line = "accepting again after " + std::to_string(in_storm_) + " failed accept" +
                     (in_storm_ == 1 ? "" : "s") + " over " + seconds(now - storm_start_);
  in_storm_ = 0;
  unlogged_ = 0;
  last_line_ = now;
  return line;
}

}  // namespace cohort

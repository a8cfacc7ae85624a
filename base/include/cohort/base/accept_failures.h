// AcceptFailures: what a listening socket says about failed accepts, a line an interval at most.
//
// Out of descriptors (EMFILE, ENFILE), every accept fails until one is freed, and an acceptor
// retries every 50 ms or so: cohortd and cohortrun's hosted store, with up to 8 accept queues,
// logged "accept failed" up to 160 times a second for as long as the storm lasted (issue 27).
// This says the first failure at once, then at most one line an interval, with how many failed
// since the last line; once accepting works again, a line says how many failed in all. A storm
// that flaps (each descriptor freed lets one accept through) is one storm: every line, failure
// or recovery, waits out the interval since the last. The caller logs the lines (it owns the
// logger and knows their level).
//
// Thread safety: none; the acceptor's loop thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace cohort {

class AcceptFailures {
 public:
  using Clock = std::chrono::steady_clock;

  // `what` begins each line ("accept failed", "relay: accept failed").
  explicit AcceptFailures(std::string what,
                          std::chrono::milliseconds interval = std::chrono::seconds(1))
      : what_(std::move(what)), interval_(interval) {}

  // An accept failed with `error` (its message): the line to log now, or nullopt when a line
  // went out less than an interval ago (this failure is counted into the next).
  std::optional<std::string> failed(const std::string& error, Clock::time_point now = Clock::now());

  // An accept succeeded: after failures, the line saying that accepting works again and how many
  // failed since the storm began; nullopt when there were none, or when a line went out less than
  // an interval ago (then the storm is not over yet: a later success or failure says it).
  std::optional<std::string> accepted(Clock::time_point now = Clock::now());

  // Failed accepts since this was made.
  uint64_t total() const { return total_; }

 private:
  std::string what_;
  std::chrono::milliseconds interval_;
  uint64_t total_ = 0;
  uint64_t in_storm_ = 0;  // failures since accepting last worked (as said)
  uint64_t unlogged_ = 0;  // failures since the last line
  Clock::time_point storm_start_{};
  Clock::time_point first_unlogged_{};
  std::optional<Clock::time_point> last_line_;

  bool quiet(Clock::time_point now) const { return last_line_ && now - *last_line_ < interval_; }
};

}  // namespace cohort

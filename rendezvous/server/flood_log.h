// FloodLog: the store's log lines about connections it closes in floods (at a timeout, for no or
// a wrong token, for a write past --max-memory): at most one line a second per kind of close,
// saying how many more there were since the last such line. A flood of wrong tokens wrote a line
// each, 757 KB/s (issue 27); the closes are counted in the metrics either way.
//
// Thread safety: none; the server's loop thread only.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>

namespace spdlog {
class logger;
}

namespace cohort::rdzv {

enum class FloodClose : uint8_t {
  kTimeout,          // --handshake-timeout, --first-request-timeout, --idle-timeout
  kUnauthenticated,  // no token handshake, or a wrong token
  kMaxMemory,        // a write past --max-memory
};

class FloodLog {
 public:
  // `log` must outlive this.
  explicit FloodLog(spdlog::logger& log) : log_(log) {}

  // A connection from `peer` was closed for `reason`: a warning now, unless one about the same
  // kind went out less than a second ago (then it is counted into the next one).
  void closed(FloodClose kind, const std::string& peer, const std::string& reason);

 private:
  struct Kind {
    uint64_t unlogged = 0;  // closes since the last line
    std::chrono::steady_clock::time_point last_line{};
  };
  spdlog::logger& log_;
  std::array<Kind, 3> kinds_{};
};

}  // namespace cohort::rdzv

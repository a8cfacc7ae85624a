// What the CPU algorithms share: the description of the collective in progress (for deadlines and
// messages) and the failure they report to the process group.
//
// Algorithms never build user-facing errors themselves: they throw PeerFailure naming the peer
// they were waiting for, and CpuProcessGroup decides whom to blame (a peer that aborted because of
// another peer passes the blame on) and throws cohort::CollectiveError.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "cohort/types.h"

namespace cohort::detail {

using Clock = std::chrono::steady_clock;

// One collective call, as every transport wait sees it.
struct Call {
  const char* op = "";  // "allreduce", "broadcast", ...
  DataType dtype = DataType::kFloat32;
  size_t count = 0;
  Clock::time_point start;
  Clock::time_point deadline;
  std::chrono::milliseconds timeout{0};
};

// A peer did not do its part: it died (EOF, reset, its process exited), it did not answer before
// the deadline, or it aborted the collective itself. `rank` is the global rank to blame (-1 when
// unknown).
class PeerFailure : public std::runtime_error {
 public:
  PeerFailure(int rank, bool timed_out, const std::string& what)
      : std::runtime_error(what), rank_(rank), timed_out_(timed_out) {}
  int rank() const { return rank_; }
  bool timed_out() const { return timed_out_; }

 private:
  int rank_;
  bool timed_out_;
};

}  // namespace cohort::detail

// StragglerCheck: which ranks are persistently slower than the rest, from the compute time per
// step that each rank reports (its step time less its communication: in data-parallel training
// every rank waits for the slowest inside the allreduce, so whole step times are all alike, and
// the slow rank is the one that waits least).
//
// A rank's ratio is its compute time over the median of the other ranks'. A rank is a straggler
// once its ratio has stayed above `factor` at every observation for `window`; it stops being one
// at the first observation below. Ranks without a report are left out; fewer than two ranks with
// reports: nobody is judged.
//
// Pure; not thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <vector>

namespace cohort::launch {

class StragglerCheck {
 public:
  using Clock = std::chrono::steady_clock;
  struct Finding {
    int rank = 0;
    double ratio = 0;
    bool is_new = false;  // became a straggler at this observation
  };

  StragglerCheck(double factor, std::chrono::milliseconds window)
      : factor_(factor), window_(window) {}

  // Compute seconds per step by rank, observed at `now`. Returns the stragglers now.
  std::vector<Finding> observe(Clock::time_point now, const std::map<int, double>& compute_s);
  // The last observation's ratio of every rank judged (for the metrics).
  const std::map<int, double>& ratios() const { return ratios_; }
  void reset() {
    slow_since_.clear();
    flagged_.clear();
    ratios_.clear();
  }

 private:
  double factor_;
  std::chrono::milliseconds window_;
  std::map<int, Clock::time_point> slow_since_;  // above the factor since
  std::map<int, bool> flagged_;
  std::map<int, double> ratios_;
};

}  // namespace cohort::launch

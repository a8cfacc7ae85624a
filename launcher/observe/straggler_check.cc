#include "observe/straggler_check.h"

#include <algorithm>

namespace cohort::launch {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

std::vector<StragglerCheck::Finding> StragglerCheck::observe(
    Clock::time_point now, const std::map<int, double>& compute_s) {
  std::vector<Finding> out;
  ratios_.clear();
  if (factor_ <= 0 || compute_s.size() < 2) {
    slow_since_.clear();
    flagged_.clear();
    return out;
  }
  for (const auto& [rank, mine] : compute_s) {
    std::vector<double> others;
    others.reserve(compute_s.size() - 1);
    for (const auto& [r, t] : compute_s)
      if (r != rank) others.push_back(t);
    const double m = median(std::move(others));
    const double ratio = m > 0 ? mine / m : 0;
    ratios_[rank] = ratio;
    if (ratio <= factor_) {
      slow_since_.erase(rank);
      flagged_.erase(rank);
      continue;
    }
    auto [since, first] = slow_since_.try_emplace(rank, now);
    if (now - since->second < window_) continue;
    const bool is_new = !flagged_[rank];
    flagged_[rank] = true;
    out.push_back({rank, ratio, is_new});
  }
  // Ranks that no longer report are forgotten.
  for (auto it = slow_since_.begin(); it != slow_since_.end();)
    it = compute_s.contains(it->first) ? std::next(it) : slow_since_.erase(it);
  for (auto it = flagged_.begin(); it != flagged_.end();)
    it = compute_s.contains(it->first) ? std::next(it) : flagged_.erase(it);
  return out;
}

}  // namespace cohort::launch

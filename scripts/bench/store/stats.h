// Measurement helpers: a latency histogram and CPU-time readings.
//
// LatencyHistogram is not thread-safe: each generator thread fills its own and the caller merges.
#pragma once

#include <sys/types.h>

#include <array>
#include <bit>
#include <cstdint>

namespace cohort::bench {

// Log-linear buckets (16 per power of two, so a value is known to within ~6%); records in O(1)
// with no allocation, which keeps it off the generator's hot path.
class LatencyHistogram {
 public:
  void record(uint64_t ns) {
    ++counts_[index(ns)];
    ++total_;
  }
  void merge(const LatencyHistogram& o) {
    for (size_t i = 0; i < counts_.size(); ++i) counts_[i] += o.counts_[i];
    total_ += o.total_;
  }
  uint64_t count() const { return total_; }
  // The p-th percentile (0 < p <= 100) in microseconds; 0 when empty.
  double percentile_us(double p) const {
    if (total_ == 0) return 0;
    auto rank = static_cast<uint64_t>(p / 100.0 * static_cast<double>(total_));
    if (rank == 0) rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return static_cast<double>(midpoint(i)) / 1000.0;
    }
    return 0;
  }

 private:
  static constexpr int kSubBits = 4;
  static constexpr uint64_t kSub = 1 << kSubBits;

  static size_t index(uint64_t v) {
    if (v < kSub) return v;
    int e = 63 - std::countl_zero(v);
    uint64_t sub = (v >> (e - kSubBits)) & (kSub - 1);
    return static_cast<size_t>(e - kSubBits + 1) * kSub + sub;
  }
  static uint64_t midpoint(size_t i) {
    if (i < kSub) return i;
    int e = static_cast<int>(i / kSub) + kSubBits - 1;
    uint64_t low = (kSub + i % kSub) << (e - kSubBits);
    return low + (uint64_t{1} << (e - kSubBits)) / 2;
  }

  std::array<uint64_t, 64 * kSub> counts_{};
  uint64_t total_ = 0;
};

// CPU seconds of process `pid` (all its threads), from /proc; -1 each if unreadable.
struct CpuSeconds {
  double user = -1, system = -1;
  bool known() const { return user >= 0 && system >= 0; }
  double total() const { return user + system; }
};
CpuSeconds process_cpu(pid_t pid);
// User + system CPU seconds of this process so far.
double self_cpu_seconds();

}  // namespace cohort::bench

// Shared helpers of the trainer tests: one tolerance check and finite differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cohort/train/rng.h"

namespace cohort::train::testing {

// |actual - reference| <= abs_tol + rel_tol * |reference| for every element. On failure the message
// shows the first ten mismatches (index, actual, reference) and how many there were. Non-finite
// actual values always fail.
inline ::testing::AssertionResult expect_close(const float* actual, const float* reference,
                                               size_t n, double abs_tol, double rel_tol) {
  size_t bad = 0;
  std::ostringstream first;
  for (size_t i = 0; i < n; ++i) {
    const double a = actual[i], r = reference[i];
    const bool ok = std::isfinite(a) && std::fabs(a - r) <= abs_tol + rel_tol * std::fabs(r);
    if (!ok) {
      if (bad < 10) first << "\n  [" << i << "] actual " << a << " reference " << r;
      ++bad;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " elements differ (abs_tol "
                                       << abs_tol << ", rel_tol " << rel_tol << "):" << first.str();
}
inline ::testing::AssertionResult expect_close(const std::vector<float>& actual,
                                               const std::vector<float>& reference, double abs_tol,
                                               double rel_tol) {
  if (actual.size() != reference.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " vs " << reference.size();
  }
  return expect_close(actual.data(), reference.data(), actual.size(), abs_tol, rel_tol);
}

// n floats uniform in [lo, hi) from a seeded generator.
inline std::vector<float> random_vector(size_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

// Central differences of `loss` (evaluated in double from float state) with respect to x[i] for
// each i in `indices`, step h. x is restored.
inline std::vector<float> numeric_grad(const std::function<double()>& loss, float* x,
                                       const std::vector<size_t>& indices, float h) {
  std::vector<float> g;
  g.reserve(indices.size());
  for (size_t i : indices) {
    const float saved = x[i];
    x[i] = saved + h;
    const double lp = loss();
    x[i] = saved - h;
    const double lm = loss();
    x[i] = saved;
    g.push_back(static_cast<float>((lp - lm) / (2.0 * static_cast<double>(h))));
  }
  return g;
}

// Up to `count` distinct indices in [0, n), spread with a seeded generator (all when n <= count).
inline std::vector<size_t> sample_indices(size_t n, size_t count, uint64_t seed) {
  std::vector<size_t> idx;
  if (n <= count) {
    for (size_t i = 0; i < n; ++i) idx.push_back(i);
    return idx;
  }
  Rng rng(seed);
  std::vector<bool> used(n, false);
  while (idx.size() < count) {
    const size_t i = rng.next_u64() % n;
    if (!used[i]) {
      used[i] = true;
      idx.push_back(i);
    }
  }
  return idx;
}

// Picks elements of `all` at `indices`.
inline std::vector<float> pick(const std::vector<float>& all, const std::vector<size_t>& indices) {
  std::vector<float> out;
  for (size_t i : indices) out.push_back(all[i]);
  return out;
}

// sum_i out[i] * w[i] in double: the scalar whose gradient with respect to out is w.
inline double dot(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * w[i];
  return s;
}

}  // namespace cohort::train::testing

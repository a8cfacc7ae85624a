// Test helper for GPU tests: without a CUDA device a test is skipped, except under
// COHORT_REQUIRE_GPU=1, where it fails. scripts/gpu_check.sh sets that on the GPU machine, where a
// skip would mean the check passed without checking anything (a driver or library that did not
// load, a device that was not visible).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

namespace cohort::testing {

// True iff COHORT_REQUIRE_GPU=1 is set.
inline bool gpu_required() {
  const char* v = std::getenv("COHORT_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace cohort::testing

// In a test body or SetUp(): returns from it, skipping the test (or failing it under
// COHORT_REQUIRE_GPU=1) when `available` is false. `what` says what is missing.
#define COHORT_SKIP_UNLESS_GPU_INPUT(available, what)                                    \
  do {                                                                                   \
    if (!(available)) {                                                                  \
      if (::cohort::testing::gpu_required()) {                                           \
        GTEST_FAIL() << "COHORT_REQUIRE_GPU=1 but " << what;                             \
      } else {                                                                           \
        GTEST_SKIP() << what << " (under COHORT_REQUIRE_GPU=1 this test fails instead)"; \
      }                                                                                  \
    }                                                                                    \
  } while (0)

#define COHORT_SKIP_UNLESS_GPU(available) \
  COHORT_SKIP_UNLESS_GPU_INPUT(available, "no CUDA device is visible")

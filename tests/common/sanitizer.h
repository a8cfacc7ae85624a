// Whether this test binary (and so the cohort binaries of its build) runs under a sanitizer.
//
// GCC defines __SANITIZE_ADDRESS__ and __SANITIZE_THREAD__; clang 14 (scripts/sanitize.sh builds
// the TSan stage with it) defines neither and answers __has_feature instead. Bounds on memory and
// latency are the Release build's to check; under a sanitizer they get the room it takes.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define COHORT_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define COHORT_TEST_SANITIZED 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define COHORT_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define COHORT_TEST_TSAN 1
#endif
#endif

namespace cohort::testing {

#ifdef COHORT_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

}  // namespace cohort::testing

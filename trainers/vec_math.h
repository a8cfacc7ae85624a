// Private: branch-free float exp/tanh that GCC vectorises, and the run-time ISA dispatch macro.
//
// libm's expf/tanhf are scalar calls, and GPT's GELU and softmaxes evaluate millions of them per
// step; these polynomial versions (Cephes-style, ~2 ulp for exp, ~1e-7 absolute for tanh)
// vectorise.
#pragma once

#include <bit>
#include <cstdint>

// Compiles a function for baseline x86-64, x86-64-v3 (AVX2+FMA) and x86-64-v4 (AVX-512) and picks
// one at load time, so the binaries run on any x86-64 but use the wide units where they exist.
#if defined(COHORT_TRAIN_TARGET_CLONES) && defined(__x86_64__) && !defined(__clang__)
#define COHORT_TRAIN_CLONES \
  __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define COHORT_TRAIN_CLONES
#endif

namespace cohort::train::detail {

// e^x for x in float range (clamped to [-87.3, 88.7]; underflows to ~0, not denormals).
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  x = x > 88.7f ? 88.7f : x;
  x = x < -87.3f ? -87.3f : x;
  float n = __builtin_floorf(x * kLog2e + 0.5f);
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = static_cast<int32_t>(n) + 127;
  return p * std::bit_cast<float>(e << 23);
}

// tanh(x) = 1 - 2 / (e^{2x} + 1), accurate to ~1e-7 absolute.
inline float fast_tanh(float x) {
  float e = fast_exp(2.0f * x);
  return 1.0f - 2.0f / (e + 1.0f);
}

}  // namespace cohort::train::detail

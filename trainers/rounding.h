// Private: round-to-nearest-even to tf32, bfloat16 and IEEE binary16 on the bits of an fp32 value,
// compiled for the host (precision.cc) and for the GPU (cuda/convert.cu), so that both devices
// round a GEMM's operands to the same bits by construction.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define COHORT_HD __host__ __device__ __forceinline__
#else
#define COHORT_HD inline
#endif

namespace cohort::train::rounding {

// Drops the low `drop` bits of fp32 `bits`, rounding to nearest, ties to even; a carry out of the
// mantissa moves to the next binade (or to infinity). NaN stays a quiet NaN.
COHORT_HD uint32_t round_low_bits(uint32_t bits, int drop) {
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return (bits | 0x00400000u) & ~((1u << drop) - 1u);  // quiet NaN, payload's top kept
  }
  const uint32_t half = (1u << (drop - 1)) - 1u;  // just below half an ulp ...
  const uint32_t odd = (bits >> drop) & 1u;       // ... plus one when the kept part is odd
  return (bits + half + odd) & ~((1u << drop) - 1u);
}

COHORT_HD uint32_t tf32_rounded_bits(uint32_t bits) {
  return round_low_bits(bits, 13);
}

COHORT_HD uint16_t bf16_from_bits(uint32_t bits) {
  return static_cast<uint16_t>(round_low_bits(bits, 16) >> 16);
}

// IEEE binary16 of fp32 `bits`: 5-bit exponent (bias 15), 10-bit mantissa.
COHORT_HD uint16_t fp16_from_bits(uint32_t bits) {
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t x = bits & 0x7fffffffu;
  if (x >= 0x7f800000u) {  // infinity, or NaN (kept quiet, top of the payload kept)
    return x == 0x7f800000u ? static_cast<uint16_t>(sign | 0x7c00u)
                            : static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  }
  // 65520 is half-way between the largest finite value (65504, an odd mantissa) and 65536: ties
  // go to even, which is infinity.
  if (x >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (x >= 0x38800000u) {  // a normal binary16 (|v| >= 2^-14): rebias 127 -> 15 = 112 binades
    const uint32_t r = x + 0xfffu + ((x >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((r >> 13) - (112u << 10)));
  }
  // A subnormal binary16: m * 2^-24. v = M * 2^(E - 23) with the implicit bit in M (24 bits), so
  // m = v * 2^24 = M >> (-E - 1), rounded to nearest even. fp32 subnormals are far below 2^-25.
  const int e = static_cast<int>(x >> 23) - 127;
  const int shift = -e - 1;  // >= 14 here
  if (x < 0x00800000u || shift > 24) return sign;
  const uint32_t m = (x & 0x007fffffu) | 0x00800000u;
  uint32_t q = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // q == 0x400 is the smallest normal
  return static_cast<uint16_t>(sign | q);
}

COHORT_HD uint32_t bits_from_bf16(uint16_t b) {
  return static_cast<uint32_t>(b) << 16;
}

COHORT_HD uint32_t bits_from_fp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1f) return sign | 0x7f800000u | (m << 13);  // infinity or NaN
  if (e != 0) return sign | ((e + 112u) << 23) | (m << 13);
  if (m == 0) return sign;
  // Subnormal m * 2^-24: normalise into fp32 (always a normal there).
  int shift = 0;
  uint32_t mm = m;
  while (!(mm & 0x400u)) {
    mm <<= 1;
    ++shift;
  }
  return sign | ((113u - shift) << 23) | ((mm & 0x3ffu) << 13);
}

}  // namespace cohort::train::rounding

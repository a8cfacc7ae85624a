// The GPU half of CudaPrecision.RoundingIsTheHardwaresOwn (cuda_test.cc): rounding.h's
// conversions, as the GPU kernels run them, against CUDA's own __float2bfloat16_rn and
// __float2half_rn (round to nearest, ties to even) over every fp32 bit pattern.
#pragma once

#include <cstdint>

namespace cohort::train::testing {

struct RoundingMismatches {
  unsigned long long bf16 = 0, fp16 = 0;    // patterns whose encodings differ (NaNs: only NaN-ness)
  uint32_t first_bf16 = 0, first_fp16 = 0;  // the lowest such pattern of each, when any
};

// Runs on the current CUDA device; throws cohort::CudaError when CUDA fails.
RoundingMismatches count_rounding_mismatches_on_gpu();

}  // namespace cohort::train::testing

// CUDA twin of layers/attention.h. q, k and v are first laid out head by head, (B, NH, T, hs),
// as GEMM operands of the precision, so that every product runs as ONE strided-batched GEMM over
// all B * NH heads; the causal softmax (one warp per row) also writes the probabilities as
// operands for the product with v, and its backward writes the score gradient as operands for
// the two products after it. The heads' results are laid back into (B, T, C) by one kernel.
// Five launches forward, eight backward, whatever B and NH. `datt` must hold
// attention_scratch_floats() = B * NH * T * T floats.
#pragma once

#include <cstddef>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

inline size_t attention_scratch_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       const GemmContext& ctx);
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, const GemmContext& ctx);

}  // namespace cohort::train::cuda

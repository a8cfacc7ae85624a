// CUDA twin of layers/embedding.h. The token-embedding gradient uses atomicAdd (tokens repeat), so
// its float sums are not bitwise reproducible run to run; the position gradient is.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, cudaStream_t stream);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, cudaStream_t stream);

}  // namespace cohort::train::cuda

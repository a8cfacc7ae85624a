// CUDA twin of layers/embedding.h. The backward adds each gradient element in the CPU reference's
// order (cuda/embedding_grad.h), without atomics: bitwise the CPU's result, the same every run.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, cudaStream_t stream);
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int V, cudaStream_t stream);

}  // namespace cohort::train::cuda

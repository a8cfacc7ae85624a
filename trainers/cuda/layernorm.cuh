// CUDA twin of layers/layernorm.h (the input gradient accumulates, as on the CPU).
#pragma once

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream);

}  // namespace cohort::train::cuda

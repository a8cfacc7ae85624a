// CUDA twins of layers/relu.h, layers/gelu.h and layers/residual.h.
#pragma once

#include <cstddef>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void relu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void relu_backward(float* dinp, const float* dout, const float* out, size_t n, cudaStream_t stream);
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n, cudaStream_t stream);
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream);

}  // namespace cohort::train::cuda

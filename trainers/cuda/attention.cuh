// CUDA twin of layers/attention.h: per batch element, cuBLAS strided-batched GEMMs over the heads
// (reading q, k, v in place from qkv), and one warp per row for the causal softmax and its
// backward. `datt` must hold attention_scratch_floats() = B * NH * T * T floats.
#pragma once

#include <cstddef>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

inline size_t attention_scratch_floats(int B, int T, int NH) {
  return static_cast<size_t>(B) * NH * T * T;
}

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream, cublasHandle_t handle);
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, cudaStream_t stream,
                        cublasHandle_t handle);

}  // namespace cohort::train::cuda

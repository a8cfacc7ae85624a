// CUDA twin of layers/linear.h: cuBLAS GEMMs plus the bias kernels of common.cuh.
#pragma once

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, cudaStream_t stream, cublasHandle_t handle);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, cudaStream_t stream,
                     cublasHandle_t handle);

}  // namespace cohort::train::cuda

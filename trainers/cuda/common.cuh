// Shared pieces of the trainers' CUDA code: checked calls that throw CudaError with file:line,
// launch helpers, and row-major GEMMs through cuBLAS.
//
// Conventions of every kernel file in this folder (llm.c's llmc/*.cuh): kernels first, then
// launchers with the CPU function's signature (layers/<name>.h) plus a stream (and a cuBLAS handle
// where a GEMM runs). Launchers check cudaGetLastError() after each launch. Pointers are device
// pointers; shapes and accumulate/overwrite rules are those of the CPU twin.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "cohort/error.h"

namespace cohort::train::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file,
                                     int line);

#define COHORT_CUDA_CHECK(call)                                                        \
  do {                                                                                 \
    const cudaError_t cohort_err_ = (call);                                            \
    if (cohort_err_ != cudaSuccess) {                                                  \
      ::cohort::train::cuda::throw_cuda_error(cohort_err_, #call, __FILE__, __LINE__); \
    }                                                                                  \
  } while (0)

#define COHORT_CUBLAS_CHECK(call)                                                       \
  do {                                                                                  \
    const cublasStatus_t cohort_st_ = (call);                                           \
    if (cohort_st_ != CUBLAS_STATUS_SUCCESS) {                                          \
      ::cohort::train::cuda::throw_cublas_error(cohort_st_, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a kernel launch: throws when the launch failed.
#define COHORT_CUDA_CHECK_LAUNCH() COHORT_CUDA_CHECK(cudaGetLastError())

inline unsigned ceil_div(size_t a, size_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// Row-major C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C, with leading dimensions
// as in row-major storage (the CBLAS convention). cuBLAS is column-major, so this computes
// C^T = op(B)^T op(A)^T.
void gemm(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K, float alpha,
          const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc);

// The same for `batch` independent products whose operands start stride_* floats apart.
void gemm_strided_batched(cublasHandle_t handle, bool trans_a, bool trans_b, int M, int N, int K,
                          float alpha, const float* A, int lda, long long stride_a, const float* B,
                          int ldb, long long stride_b, float beta, float* C, int ldc,
                          long long stride_c, int batch);

// out (N, C): out[n, c] = bias[c] for every row (seeds a GEMM with beta = 1).
void broadcast_rows(float* out, const float* bias, int N, int C, cudaStream_t stream);

// dsum (C) += sum over rows of x (N, C): deterministic column sums (bias gradients).
void column_sums_accumulate(float* dsum, const float* x, int N, int C, cudaStream_t stream);

}  // namespace cohort::train::cuda

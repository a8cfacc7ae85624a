// Shared pieces of the trainers' CUDA code: checked calls that throw CudaError with file:line,
// the count of launches, launch helpers, and the context of launchers that run GEMMs.
//
// Conventions of every kernel file in this folder (llm.c's llmc/*.cuh): kernels first, then
// launchers with the CPU function's signature (layers/<name>.h) plus a stream (or, where a GEMM
// runs, a GemmContext: the stream, the GEMM runner, scratch memory and the precision).
// Launchers check cudaGetLastError() after each launch, which also counts it. Pointers are device
// pointers; shapes and accumulate/overwrite rules are those of the CPU twin.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cohort/error.h"
#include "cohort/train/precision.h"

namespace cohort::train::cuda {

class Gemm;       // gemm.cuh
class Workspace;  // workspace.cuh

// What a launcher that runs GEMMs needs. Every GEMM rounds its operands to `precision`.
struct GemmContext {
  cudaStream_t stream;
  Gemm* gemm;
  Workspace* workspace;
  Precision precision;
};

// Kernels launched and GEMMs run by this thread so far (CudaDevice::launches()).
uint64_t launch_count();
void count_launch();

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

// After a kernel launch: counts it, and throws when it failed.
#define COHORT_CUDA_CHECK_LAUNCH()         \
  do {                                     \
    ::cohort::train::cuda::count_launch(); \
    COHORT_CUDA_CHECK(cudaGetLastError()); \
  } while (0)

inline unsigned ceil_div(size_t a, size_t b) {
  return static_cast<unsigned>((a + b - 1) / b);
}

// out (N, C): out[n, c] = bias[c] for every row (seeds a GEMM with beta = 1).
void broadcast_rows(float* out, const float* bias, int N, int C, cudaStream_t stream);

// dsum (C) += sum over rows of x (N, C): deterministic column sums (bias gradients).
void column_sums_accumulate(float* dsum, const float* x, int N, int C, cudaStream_t stream);

}  // namespace cohort::train::cuda

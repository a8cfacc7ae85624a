// Row-major GEMMs through cuBLASLt, in any precision (precision.h) with fp32 accumulation and an
// fp32 result: C (M, N) = alpha * op(A) (M, K) @ op(B) (K, N) + beta * C (+ bias (N) per row),
// strided-batched when batch > 1, leading dimensions and strides as in row-major storage (the
// CBLAS convention). A and B are stored operands (operand.cuh) of the precision.
//
// cuBLASLt is column-major: this computes C^T = op(B)^T op(A)^T. The bias rides in cuBLASLt's
// epilogue (CUBLASLT_EPILOGUE_BIAS: a vector over the rows of the column-major D, our columns).
// Each distinct problem (shape, precision, bias, pointer alignments) gets its descriptors and
// cuBLASLt's first heuristic choice once, then reuses them. Where cuBLASLt offers no algorithm,
// the same product runs through cublasGemmStridedBatchedEx (and a bias kernel before it).
//
// Thread safety: none; one per CudaDevice, on its stream.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <map>
#include <tuple>

#include "cohort/train/precision.h"

namespace cohort::train::cuda {

struct GemmShape {
  bool trans_a = false, trans_b = false;
  int M = 0, N = 0, K = 0;
  int lda = 0, ldb = 0, ldc = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0;  // elements, when batch > 1
  int batch = 1;
};

class Gemm {
 public:
  // `fallback` is a cuBLAS handle bound to `stream`. Throws CudaError when cuBLASLt cannot start.
  Gemm(cudaStream_t stream, cublasHandle_t fallback);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // bias (N floats) is added to every row of C; it requires beta == 0 and batch == 1.
  void run(const GemmShape& s, Precision p, float alpha, const void* A, const void* B, float beta,
           float* C, const float* bias = nullptr);

  // Problems that went to the fallback (tests report it).
  int fallbacks() const { return fallbacks_; }

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, long long, long long, long long,
                         int, int, bool, int, int, int, int>;
  Plan& plan(const Key& key, const GemmShape& s, Precision p, bool bias, int align_a, int align_b,
             int align_c, int align_bias);

  cudaStream_t stream_;
  cublasHandle_t blas_;
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<Key, Plan*> plans_;
  int fallbacks_ = 0;
};

}  // namespace cohort::train::cuda

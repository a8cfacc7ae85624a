// Fully connected layer: out = inp @ weight^T + bias, weight stored (OC, C) as in PyTorch.
//
// Conventions of every layer in this folder (llm.c's train_gpt2.c): the caller passes every buffer
// and nothing is allocated; shapes are row-major and commented as (N, C) or (B, T, C); forward
// caches what backward needs; backward ACCUMULATES parameter gradients (+=, the caller zeroes them
// once per optimizer step, so gradient accumulation is free) and OVERWRITES the input gradient
// unless the function says otherwise. A null input-gradient pointer skips that work.
// Every GEMM multiplies its operands rounded to `p` (precision.h) and sums in fp32; bias
// gradients and everything else are fp32 whatever `p`.
// Thread safety: the functions keep no state and may run concurrently on different buffers
// (OpenBLAS's thread count, set by configure_blas_threads(), is process-wide).
#pragma once

#include "cohort/train/precision.h"

namespace cohort::train {

// out (N, OC) = inp (N, C) @ weight (OC, C)^T + bias (OC). bias may be null.
void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, Precision p = Precision::kFp32);

// dinp (N, C) = dout @ weight (overwritten; may be null); dweight (OC, C) += dout^T @ inp;
// dbias (OC) += column sums of dout (may be null).
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, Precision p = Precision::kFp32);

}  // namespace cohort::train

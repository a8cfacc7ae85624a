// CUDA twin of layers/conv2d.h: im2col / col2im kernels (col2im gathers, so it needs no atomics
// and is deterministic) and cuBLASLt GEMMs, one per batch (no chunks: the scratch holds the whole
// batch's col matrix, and backward recomputes it from the input as on the CPU). im2col writes the
// col matrix as GEMM operands of the precision (operand.cuh: rounded as it gathers, in the
// scratch's first half for bf16 and fp16); the GEMM over it is the CPU's over the rounded input.
#pragma once

#include "cohort/train/layers/conv2d.h"
#include "cuda/common.cuh"

namespace cohort::train::cuda {

inline size_t conv2d_scratch_floats(const Conv2dShape& s) {
  return static_cast<size_t>(s.col_rows()) * s.col_cols();
}

// col (B*OH*OW, K*K*C) of stored operands of precision p (operand.cuh).
void im2col(void* col, const float* inp, const Conv2dShape& s, Precision p, cudaStream_t stream);
void col2im(float* dinp, const float* dcol, const Conv2dShape& s, cudaStream_t stream);

void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                    const float* bias, const Conv2dShape& s, const GemmContext& ctx);
void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     float* col, const float* weight, const Conv2dShape& s, const GemmContext& ctx);

}  // namespace cohort::train::cuda

// CUDA twin of layers/linear.h: the operands rounded to the precision in one launch (none in
// fp32), then cuBLASLt GEMMs, the bias in the forward GEMM's epilogue; the bias gradient is a
// deterministic column-sum kernel over the fp32 output gradient, as on the CPU.
#pragma once

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, const GemmContext& ctx);
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, const GemmContext& ctx);

}  // namespace cohort::train::cuda

#include "cuda/linear.cuh"

namespace cohort::train::cuda {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, cudaStream_t stream, cublasHandle_t handle) {
  if (bias) broadcast_rows(out, bias, N, OC, stream);
  // out (N, OC) = inp (N, C) @ weight (OC, C)^T (+ bias)
  gemm(handle, false, true, N, OC, C, 1.0f, inp, C, weight, C, bias ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, cudaStream_t stream,
                     cublasHandle_t handle) {
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  gemm(handle, true, false, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias) column_sums_accumulate(dbias, dout, N, OC, stream);
  // dinp (N, C) = dout (N, OC) @ weight (OC, C)
  if (dinp) gemm(handle, false, false, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f, dinp, C);
}

}  // namespace cohort::train::cuda

#include "cohort/train/layers/linear.h"

#include <cblas.h>

#include <cstddef>

#include "layers/operand.h"

namespace cohort::train {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC, Precision p) {
  // out (N, OC) = bias broadcast, then += inp (N, C) @ weight^T; seeding with the bias lets the
  // GEMM fold the addition in (beta = 1) instead of a second pass over out.
  if (bias) {
    for (int n = 0; n < N; ++n) {
      float* o = out + static_cast<size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) o[j] = bias[j];
    }
  }
  const float* x = detail::rounded_operand(0, p, inp, static_cast<size_t>(N) * C);
  const float* w = detail::rounded_operand(1, p, weight, static_cast<size_t>(OC) * C);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, x, C, w, C,
              bias ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC, Precision p) {
  const float* d = detail::rounded_operand(0, p, dout, static_cast<size_t>(N) * OC);
  const float* x = detail::rounded_operand(1, p, inp, static_cast<size_t>(N) * C);
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, d, OC, x, C, 1.0f, dweight,
              C);
  if (dbias) {
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  }
  // dinp (N, C) = dout (N, OC) @ weight (OC, C)
  if (dinp) {
    const float* w = detail::rounded_operand(2, p, weight, static_cast<size_t>(OC) * C);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, d, OC, w, C, 0.0f, dinp,
                C);
  }
}

}  // namespace cohort::train

#include "cohort/train/layers/linear.h"

#include <cblas.h>

#include <cstddef>

namespace cohort::train {

void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                    int C, int OC) {
  // out (N, OC) = bias broadcast, then += inp (N, C) @ weight^T; seeding with the bias lets the
  // GEMM fold the addition in (beta = 1) instead of a second pass over out.
  if (bias) {
    for (int n = 0; n < N; ++n) {
      float* o = out + static_cast<size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) o[j] = bias[j];
    }
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C,
              bias ? 1.0f : 0.0f, out, OC);
}

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  // dweight (OC, C) += dout^T (OC, N) @ inp (N, C)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f,
              dweight, C);
  if (dbias) {
    for (int n = 0; n < N; ++n) {
      const float* d = dout + static_cast<size_t>(n) * OC;
      for (int j = 0; j < OC; ++j) dbias[j] += d[j];
    }
  }
  // dinp (N, C) = dout (N, OC) @ weight (OC, C)
  if (dinp) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C,
                0.0f, dinp, C);
  }
}

}  // namespace cohort::train

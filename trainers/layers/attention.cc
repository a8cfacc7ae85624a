#include "cohort/train/layers/attention.h"

#include <cblas.h>

#include <cmath>
#include <cstddef>
#include <cstring>

#include "layers/operand.h"
#include "vec_math.h"

namespace cohort::train {
namespace {

// Row t of att (T, T) holds pre-softmax scores; turns it into causal softmax probabilities
// (positions > t get 0).
COHORT_TRAIN_CLONES
void causal_softmax(float* att, int T) {
  for (int t = 0; t < T; ++t) {
    float* row = att + static_cast<size_t>(t) * T;
    float mx = row[0];
    for (int j = 1; j <= t; ++j) mx = row[j] > mx ? row[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; ++j) {
      row[j] = detail::fast_exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j <= t; ++j) row[j] *= inv;
    for (int j = t + 1; j < T; ++j) row[j] = 0.0f;
  }
}

// datt (T, T) becomes the gradient of the pre-softmax scores, times `scale`:
// dpre[t, j] = att[t, j] * (datt[t, j] - sum_k att[t, k] datt[t, k]) for j <= t, 0 above.
COHORT_TRAIN_CLONES
void causal_softmax_backward(float* datt, const float* att, int T, float scale) {
  for (int t = 0; t < T; ++t) {
    float* d = datt + static_cast<size_t>(t) * T;
    const float* a = att + static_cast<size_t>(t) * T;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int j = 0; j <= t; ++j) dot += a[j] * d[j];
    for (int j = 0; j <= t; ++j) d[j] = a[j] * (d[j] - dot) * scale;
    for (int j = t + 1; j < T; ++j) d[j] = 0.0f;
  }
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       Precision p) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* qkv_r = detail::rounded_operand(0, p, qkv, static_cast<size_t>(B) * T * C3);
  for (int b = 0; b < B; ++b) {
    const float* base = qkv_r + static_cast<size_t>(b) * T * C3;
    for (int h = 0; h < NH; ++h) {
      const float* q = base + h * hs;
      const float* k = base + C + h * hs;
      const float* v = base + 2 * C + h * hs;
      float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      float* o = out + static_cast<size_t>(b) * T * C + h * hs;
      // a (T, T) = q (T, hs) @ k^T * scale; then causal softmax; o (T, hs) = a @ v.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, k, C3, 0.0f, a,
                  T);
      causal_softmax(a, T);
      const float* a_r = detail::rounded_operand(1, p, a, static_cast<size_t>(T) * T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, a_r, T, v, C3, 0.0f, o,
                  C);
    }
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, Precision p) {
  const int hs = C / NH;
  const int C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const float* qkv_r = detail::rounded_operand(0, p, qkv, static_cast<size_t>(B) * T * C3);
  const float* dout_r = detail::rounded_operand(1, p, dout, static_cast<size_t>(B) * T * C);
  for (int b = 0; b < B; ++b) {
    const float* base = qkv_r + static_cast<size_t>(b) * T * C3;
    float* dbase = dqkv + static_cast<size_t>(b) * T * C3;
    for (int h = 0; h < NH; ++h) {
      const float* q = base + h * hs;
      const float* k = base + C + h * hs;
      const float* v = base + 2 * C + h * hs;
      float* dq = dbase + h * hs;
      float* dk = dbase + C + h * hs;
      float* dv = dbase + 2 * C + h * hs;
      const float* a = att + (static_cast<size_t>(b) * NH + h) * T * T;
      const float* a_r = detail::rounded_operand(2, p, a, static_cast<size_t>(T) * T);
      const float* d = dout_r + static_cast<size_t>(b) * T * C + h * hs;
      // datt (T, T) = d (T, hs) @ v^T;  dv (T, hs) = a^T @ d
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, d, C, v, C3, 0.0f, datt,
                  T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, a_r, T, d, C, 0.0f, dv,
                  C3);
      // From the fp32 probabilities; dpre is only an operand of the two products below.
      causal_softmax_backward(datt, a, T, scale);
      round_array(p, datt, datt, static_cast<size_t>(T) * T);
      // dq = dpre @ k;  dk = dpre^T @ q   (scale already folded into dpre)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, datt, T, k, C3, 0.0f,
                  dq, C3);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, datt, T, q, C3, 0.0f, dk,
                  C3);
    }
  }
}

}  // namespace cohort::train

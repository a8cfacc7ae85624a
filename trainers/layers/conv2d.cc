#include "cohort/train/layers/conv2d.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "layers/operand.h"
#include "vec_math.h"

namespace cohort::train {

namespace {

// Copies n floats; an inline loop beats a memcpy call for the 4..512-byte runs of im2col.
inline void copy_run(float* __restrict dst, const float* __restrict src, int n) {
  for (int i = 0; i < n; ++i) dst[i] = src[i];
}
inline void zero_run(float* __restrict dst, int n) {
  for (int i = 0; i < n; ++i) dst[i] = 0.0f;
}

// sums (C) += column sums of x (N, C), through a local accumulator (no aliasing, vectorised).
COHORT_TRAIN_CLONES
void column_sums(float* sums, const float* x, long N, int C) {
  float stack[512];
  std::vector<float> heap(C > 512 ? C : 0);  // only for unusually many channels
  float* __restrict a = C > 512 ? heap.data() : stack;
  for (int j = 0; j < C; ++j) a[j] = 0.0f;
  for (long n = 0; n < N; ++n) {
    const float* __restrict r = x + n * C;
    for (int j = 0; j < C; ++j) a[j] += r[j];
  }
  for (int j = 0; j < C; ++j) sums[j] += a[j];
}

}  // namespace

COHORT_TRAIN_CLONES
void im2col(float* col, const float* inp, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), K = s.K, C = s.C;
  const size_t row_len = static_cast<size_t>(K) * K * C;
  for (int b = 0; b < s.B; ++b) {
    const float* img = inp + static_cast<size_t>(b) * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        float* row = col + ((static_cast<size_t>(b) * OH + oh) * OW + ow) * row_len;
        const int iw0 = ow - s.pad;
        const bool inside_w = iw0 >= 0 && iw0 + K <= s.W;
        for (int kh = 0; kh < K; ++kh) {
          const int ih = oh + kh - s.pad;
          float* dst = row + static_cast<size_t>(kh) * K * C;
          if (ih < 0 || ih >= s.H) {
            zero_run(dst, K * C);
          } else if (inside_w) {
            // The K taps of this kernel row are K*C contiguous input floats.
            copy_run(dst, img + (static_cast<size_t>(ih) * s.W + iw0) * C, K * C);
          } else {
            const float* src_row = img + static_cast<size_t>(ih) * s.W * C;
            for (int kw = 0; kw < K; ++kw) {
              const int iw = iw0 + kw;
              if (iw < 0 || iw >= s.W) {
                zero_run(dst + kw * C, C);
              } else {
                copy_run(dst + kw * C, src_row + static_cast<size_t>(iw) * C, C);
              }
            }
          }
        }
      }
    }
  }
}

COHORT_TRAIN_CLONES
void col2im(float* dinp, const float* dcol, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW(), K = s.K, C = s.C;
  const size_t row_len = static_cast<size_t>(K) * K * C;
  std::memset(dinp, 0, sizeof(float) * s.B * s.H * s.W * C);
  for (int b = 0; b < s.B; ++b) {
    float* img = dinp + static_cast<size_t>(b) * s.H * s.W * C;
    for (int oh = 0; oh < OH; ++oh) {
      for (int ow = 0; ow < OW; ++ow) {
        const float* row = dcol + ((static_cast<size_t>(b) * OH + oh) * OW + ow) * row_len;
        for (int kh = 0; kh < K; ++kh) {
          const int ih = oh + kh - s.pad;
          if (ih < 0 || ih >= s.H) continue;
          float* dst_row = img + static_cast<size_t>(ih) * s.W * C;
          const float* src = row + static_cast<size_t>(kh) * K * C;
          for (int kw = 0; kw < K; ++kw) {
            const int iw = ow + kw - s.pad;
            if (iw < 0 || iw >= s.W) continue;
            float* d = dst_row + static_cast<size_t>(iw) * C;
            const float* x = src + kw * C;
            for (int c = 0; c < C; ++c) d[c] += x[c];
          }
        }
      }
    }
  }
}

int conv2d_chunk_images(const Conv2dShape& s) {
  constexpr long kChunkFloats = 256 * 1024;  // 1 MiB of col
  const long per_image = static_cast<long>(s.OH()) * s.OW() * s.col_cols();
  const long n = per_image > 0 ? kChunkFloats / per_image : s.B;
  return static_cast<int>(std::clamp<long>(n, 1, std::max(1, s.B)));
}

size_t conv2d_scratch_floats(const Conv2dShape& s) {
  return static_cast<size_t>(conv2d_chunk_images(s)) * s.OH() * s.OW() * s.col_cols();
}

namespace {
// The shape of images [b0, b0 + n) of s.
Conv2dShape chunk_of(const Conv2dShape& s, int n) {
  Conv2dShape c = s;
  c.B = n;
  return c;
}
}  // namespace

namespace {

// One input channel (Fashion-MNIST's first layer): an im2col matrix of K*K columns makes a GEMM
// too thin to run well, so the convolution runs directly, vectorised over the output channels.
// The K*K taps of a pixel are gathered (zeros outside the image), then
// out[p, :] = bias + sum_k tap[k] * weight^T[k, :].
constexpr int kMaxDirectTaps = 49;  // kernels up to 7x7
constexpr int kMaxDirectOut = 256;  // output channels

bool use_direct(const Conv2dShape& s) {
  return s.C == 1 && s.K * s.K <= kMaxDirectTaps && s.OC <= kMaxDirectOut;
}

// taps (K*K) of output pixel (b, oh, ow) of a one-channel input.
inline void gather_taps(float* taps, const float* img, const Conv2dShape& s, int oh, int ow) {
  const int ih0 = oh - s.pad, iw0 = ow - s.pad;
  if (ih0 >= 0 && iw0 >= 0 && ih0 + s.K <= s.H && iw0 + s.K <= s.W) {  // inside: no checks
    for (int kh = 0; kh < s.K; ++kh) {
      const float* r = img + (ih0 + kh) * s.W + iw0;
      for (int kw = 0; kw < s.K; ++kw) taps[kh * s.K + kw] = r[kw];
    }
    return;
  }
  for (int kh = 0; kh < s.K; ++kh) {
    const int ih = oh + kh - s.pad;
    for (int kw = 0; kw < s.K; ++kw) {
      const int iw = ow + kw - s.pad;
      taps[kh * s.K + kw] =
          (ih >= 0 && ih < s.H && iw >= 0 && iw < s.W) ? img[ih * s.W + iw] : 0.0f;
    }
  }
}

// Kernels specialised on the output channels (OC_T > 0; 0 = run-time OC), so the per-pixel
// accumulators live in vector registers.
template <int OC_T>
inline void direct_forward_impl(float* out, const float* inp, const float* wt, const float* bias,
                                const Conv2dShape& s) {
  const int KK = s.K * s.K, OC = OC_T > 0 ? OC_T : s.OC;
  float taps[kMaxDirectTaps];
  for (int b = 0; b < s.B; ++b) {
    const float* img = inp + static_cast<size_t>(b) * s.H * s.W;
    for (int oh = 0; oh < s.OH(); ++oh) {
      for (int ow = 0; ow < s.OW(); ++ow) {
        gather_taps(taps, img, s, oh, ow);
        float acc[OC_T > 0 ? OC_T : kMaxDirectOut];
        for (int j = 0; j < OC; ++j) acc[j] = bias[j];
        for (int k = 0; k < KK; ++k) {
          const float t = taps[k];
          const float* __restrict w = wt + k * OC;
          for (int j = 0; j < OC; ++j) acc[j] += t * w[j];
        }
        float* __restrict o = out + ((static_cast<size_t>(b) * s.OH() + oh) * s.OW() + ow) * OC;
        for (int j = 0; j < OC; ++j) o[j] = acc[j];
      }
    }
  }
}

// dout feeds the bias gradient, dout_r (dout rounded to the precision) the weight gradient.
template <int OC_T>
inline void direct_backward_impl(float* dwt, float* db, const float* dout, const float* dout_r,
                                 const float* inp, const Conv2dShape& s) {
  const int KK = s.K * s.K, OC = OC_T > 0 ? OC_T : s.OC;
  float taps[kMaxDirectTaps];
  for (int b = 0; b < s.B; ++b) {
    const float* img = inp + static_cast<size_t>(b) * s.H * s.W;
    for (int oh = 0; oh < s.OH(); ++oh) {
      for (int ow = 0; ow < s.OW(); ++ow) {
        gather_taps(taps, img, s, oh, ow);
        const size_t at = ((static_cast<size_t>(b) * s.OH() + oh) * s.OW() + ow) * OC;
        const float* __restrict d = dout + at;
        const float* __restrict dr = dout_r + at;
        for (int j = 0; j < OC; ++j) db[j] += d[j];
        for (int k = 0; k < KK; ++k) {
          const float t = taps[k];
          float* __restrict g = dwt + k * OC;
          for (int j = 0; j < OC; ++j) g[j] += t * dr[j];
        }
      }
    }
  }
}

COHORT_TRAIN_CLONES
void direct_forward(float* out, const float* inp, const float* weight, const float* bias,
                    const Conv2dShape& s) {
  const int KK = s.K * s.K, OC = s.OC;
  float wt[kMaxDirectTaps * kMaxDirectOut];  // weight^T (KK, OC)
  float zero_bias[kMaxDirectOut] = {};
  for (int o = 0; o < OC; ++o) {
    for (int k = 0; k < KK; ++k) wt[k * OC + o] = weight[o * KK + k];
  }
  if (!bias) bias = zero_bias;
  if (OC == 32) {
    direct_forward_impl<32>(out, inp, wt, bias, s);
  } else {
    direct_forward_impl<0>(out, inp, wt, bias, s);
  }
}

COHORT_TRAIN_CLONES
void direct_backward(float* dweight, float* dbias, const float* dout, const float* dout_r,
                     const float* inp, const Conv2dShape& s) {
  const int KK = s.K * s.K, OC = s.OC;
  float dwt[kMaxDirectTaps * kMaxDirectOut] = {};  // d weight^T (KK, OC)
  float db[kMaxDirectOut] = {};
  if (OC == 32) {
    direct_backward_impl<32>(dwt, db, dout, dout_r, inp, s);
  } else {
    direct_backward_impl<0>(dwt, db, dout, dout_r, inp, s);
  }
  for (int o = 0; o < OC; ++o) {
    for (int k = 0; k < KK; ++k) dweight[o * KK + k] += dwt[k * OC + o];
  }
  if (dbias) {
    for (int j = 0; j < OC; ++j) dbias[j] += db[j];
  }
}

}  // namespace

void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                    const float* bias, const Conv2dShape& s, Precision p) {
  // Rounding the input before im2col rounds every col entry (zeros stay zeros).
  inp = detail::rounded_operand(0, p, inp, static_cast<size_t>(s.B) * s.H * s.W * s.C);
  weight = detail::rounded_operand(1, p, weight, static_cast<size_t>(s.OC) * s.col_cols());
  if (use_direct(s)) {
    direct_forward(out, inp, weight, bias, s);
    return;
  }
  const int step = conv2d_chunk_images(s);
  const size_t in_img = static_cast<size_t>(s.H) * s.W * s.C;
  const size_t out_img = static_cast<size_t>(s.OH()) * s.OW() * s.OC;
  const long KC = s.col_cols();
  for (int b0 = 0; b0 < s.B; b0 += step) {
    const Conv2dShape c = chunk_of(s, std::min(step, s.B - b0));
    const long M = c.col_rows();
    float* o = out + b0 * out_img;
    im2col(col, inp + b0 * in_img, c);
    if (bias) {
      for (long m = 0; m < M; ++m) std::memcpy(o + m * s.OC, bias, sizeof(float) * s.OC);
    }
    // o (M, OC) = col (M, KKC) @ weight (OC, KKC)^T (+ bias already in o)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, s.OC, KC, 1.0f, col, KC, weight, KC,
                bias ? 1.0f : 0.0f, o, s.OC);
  }
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     float* col, const float* weight, const Conv2dShape& s, Precision p) {
  const float* dout_r =
      detail::rounded_operand(2, p, dout, static_cast<size_t>(s.col_rows()) * s.OC);
  inp = detail::rounded_operand(0, p, inp, static_cast<size_t>(s.B) * s.H * s.W * s.C);
  if (use_direct(s) && !dinp) {
    // The first layer: no input gradient, so no col2im either.
    direct_backward(dweight, dbias, dout, dout_r, inp, s);
    return;
  }
  weight = detail::rounded_operand(1, p, weight, static_cast<size_t>(s.OC) * s.col_cols());
  const int step = conv2d_chunk_images(s);
  const size_t in_img = static_cast<size_t>(s.H) * s.W * s.C;
  const size_t out_img = static_cast<size_t>(s.OH()) * s.OW() * s.OC;
  const long KC = s.col_cols();
  if (dbias) column_sums(dbias, dout, s.col_rows(), s.OC);
  for (int b0 = 0; b0 < s.B; b0 += step) {
    const Conv2dShape c = chunk_of(s, std::min(step, s.B - b0));
    const long M = c.col_rows();
    const float* d = dout_r + b0 * out_img;
    im2col(col, inp + b0 * in_img, c);
    // dweight (OC, KKC) += d^T (OC, M) @ col (M, KKC)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s.OC, KC, M, 1.0f, d, s.OC, col, KC, 1.0f,
                dweight, KC);
    if (dinp) {
      // dcol (M, KKC) = d (M, OC) @ weight (OC, KKC), over col, then scattered back.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, KC, s.OC, 1.0f, d, s.OC, weight, KC,
                  0.0f, col, KC);
      col2im(dinp + b0 * in_img, col, c);
    }
  }
}

}  // namespace cohort::train

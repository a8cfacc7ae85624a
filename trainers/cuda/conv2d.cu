#include "cuda/conv2d.cuh"
#include "cuda/gemm.cuh"
#include "cuda/operand.cuh"
#include "cuda/workspace.cuh"

namespace cohort::train::cuda {
namespace {

// One thread per element of col (B*OH*OW, K*K*C), stored as an operand of precision p.
__global__ void im2col_kernel(void* col, const float* inp, int B, int H, int W, int C, int K,
                              int pad, int OH, int OW, Precision p) {
  const size_t kkc = static_cast<size_t>(K) * K * C;
  const size_t total = static_cast<size_t>(B) * OH * OW * kkc;
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const size_t row = i / kkc;
  const int k = static_cast<int>(i % kkc);
  const int c = k % C, kw = (k / C) % K, kh = k / (C * K);
  const int ow = static_cast<int>(row % OW), oh = static_cast<int>((row / OW) % OH);
  const int b = static_cast<int>(row / (static_cast<size_t>(OW) * OH));
  const int ih = oh + kh - pad, iw = ow + kw - pad;
  store_operand(p, col, i,
                (ih >= 0 && ih < H && iw >= 0 && iw < W)
                    ? inp[((static_cast<size_t>(b) * H + ih) * W + iw) * C + c]
                    : 0.0f);
}

// One thread per input element: the sum of the col entries it was copied to.
__global__ void col2im_kernel(float* dinp, const float* dcol, int B, int H, int W, int C, int K,
                              int pad, int OH, int OW) {
  const size_t total = static_cast<size_t>(B) * H * W * C;
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const int c = static_cast<int>(i % C);
  const int iw = static_cast<int>((i / C) % W);
  const int ih = static_cast<int>((i / (static_cast<size_t>(C) * W)) % H);
  const int b = static_cast<int>(i / (static_cast<size_t>(C) * W * H));
  const size_t kkc = static_cast<size_t>(K) * K * C;
  float s = 0.0f;
  for (int kh = 0; kh < K; ++kh) {
    const int oh = ih - kh + pad;
    if (oh < 0 || oh >= OH) continue;
    for (int kw = 0; kw < K; ++kw) {
      const int ow = iw - kw + pad;
      if (ow < 0 || ow >= OW) continue;
      s += dcol[((static_cast<size_t>(b) * OH + oh) * OW + ow) * kkc + (kh * K + kw) * C + c];
    }
  }
  dinp[i] = s;
}

}  // namespace

void im2col(void* col, const float* inp, const Conv2dShape& s, Precision p, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(s.col_rows()) * s.col_cols();
  if (n == 0) return;
  im2col_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(col, inp, s.B, s.H, s.W, s.C, s.K, s.pad,
                                                      s.OH(), s.OW(), p);
  COHORT_CUDA_CHECK_LAUNCH();
}

void col2im(float* dinp, const float* dcol, const Conv2dShape& s, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(s.B) * s.H * s.W * s.C;
  if (n == 0) return;
  col2im_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dinp, dcol, s.B, s.H, s.W, s.C, s.K, s.pad,
                                                      s.OH(), s.OW());
  COHORT_CUDA_CHECK_LAUNCH();
}

void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                    const float* bias, const Conv2dShape& s, const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const int M = static_cast<int>(s.col_rows()), KC = static_cast<int>(s.col_cols());
  const size_t nw = static_cast<size_t>(s.OC) * KC;
  void* w;
  ctx.workspace->carve({operand_scratch_bytes(p, nw)}, &w);
  im2col(col, inp, s, p, ctx.stream);
  round_operands(p, {{weight, w, nw}}, ctx.stream);
  // out (M, OC) = col (M, KKC) @ weight (OC, KKC)^T + bias
  GemmShape g;
  g.trans_b = true;
  g.M = M, g.N = s.OC, g.K = KC;
  g.lda = KC, g.ldb = KC, g.ldc = s.OC;
  ctx.gemm->run(g, p, 1.0f, col, operand_or(p, weight, w), 0.0f, out, bias);
}

void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     float* col, const float* weight, const Conv2dShape& s,
                     const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const int M = static_cast<int>(s.col_rows()), KC = static_cast<int>(s.col_cols());
  const size_t nd = static_cast<size_t>(M) * s.OC, nw = dinp ? static_cast<size_t>(s.OC) * KC : 0;
  void* sc[2];
  ctx.workspace->carve({operand_scratch_bytes(p, nd), operand_scratch_bytes(p, nw)}, sc);
  im2col(col, inp, s, p, ctx.stream);
  round_operands(p, {{dout, sc[0], nd}, {weight, sc[1], nw}}, ctx.stream);
  const void* d = operand_or(p, dout, sc[0]);
  // dweight (OC, KKC) += dout^T (OC, M) @ col (M, KKC)
  GemmShape gw;
  gw.trans_a = true;
  gw.M = s.OC, gw.N = KC, gw.K = M;
  gw.lda = s.OC, gw.ldb = KC, gw.ldc = KC;
  ctx.gemm->run(gw, p, 1.0f, d, col, 1.0f, dweight);
  if (dbias) column_sums_accumulate(dbias, dout, M, s.OC, ctx.stream);
  if (dinp) {
    // dcol (M, KKC) = dout (M, OC) @ weight (OC, KKC), in fp32 over col (the GEMM above has read
    // it: one stream), then gathered back.
    GemmShape gi;
    gi.M = M, gi.N = KC, gi.K = s.OC;
    gi.lda = s.OC, gi.ldb = KC, gi.ldc = KC;
    ctx.gemm->run(gi, p, 1.0f, d, operand_or(p, weight, sc[1]), 0.0f, col);
    col2im(dinp, col, s, ctx.stream);
  }
}

}  // namespace cohort::train::cuda

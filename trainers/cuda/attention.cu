#include <cmath>

#include "cuda/attention.cuh"
#include "cuda/gemm.cuh"
#include "cuda/operand.cuh"
#include "cuda/workspace.cuh"

namespace cohort::train::cuda {
namespace {

__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One thread per element (b, t, c) of a (B, T, C) row: q, k and v of qkv (B, T, 3C) and, when
// dout is given, dout (B, T, C), each to its head's (B, NH, T, hs) place, as operands of p.
__global__ void split_heads_kernel(void* q, void* k, void* v, void* d, const float* qkv,
                                   const float* dout, int B, int T, int C, int NH, Precision p) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(B) * T * C) return;
  const int c = static_cast<int>(i % C);
  const size_t bt = i / C;
  const int t = static_cast<int>(bt % T), b = static_cast<int>(bt / T);
  const int hs = C / NH, h = c / hs, e = c % hs;
  const size_t to = ((static_cast<size_t>(b) * NH + h) * T + t) * hs + e;
  const float* row = qkv + bt * 3 * C;
  store_operand(p, q, to, row[c]);
  store_operand(p, k, to, row[C + c]);
  store_operand(p, v, to, row[2 * C + c]);
  if (dout) store_operand(p, d, to, dout[i]);
}

// The inverse for fp32 results: y (B, NH, T, hs) into out (B, T, C) at column offset `column`
// of rows `row_stride` wide (the output: 0 and C; dqkv's parts: 0, C, 2C and 3C).
__global__ void merge_heads_kernel(float* out, const float* y0, const float* y1, const float* y2,
                                   int B, int T, int C, int NH, int row_stride) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(B) * T * C) return;
  const int c = static_cast<int>(i % C);
  const size_t bt = i / C;
  const int t = static_cast<int>(bt % T), b = static_cast<int>(bt / T);
  const int hs = C / NH, h = c / hs, e = c % hs;
  const size_t from = ((static_cast<size_t>(b) * NH + h) * T + t) * hs + e;
  float* row = out + bt * row_stride;
  row[c] = y0[from];
  if (y1) row[C + c] = y1[from];
  if (y2) row[2 * C + c] = y2[from];
}

// One warp per row (rows = B * NH * T, row r is query position r % T): softmax over columns
// 0..t, zeros above; also stored as operands of p in att_op when given.
__global__ void causal_softmax_kernel(float* att, void* att_op, int rows, int T, Precision p) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = r % T;
  float* row = att + static_cast<size_t>(r) * T;
  float mx = -INFINITY;
  for (int j = lane; j <= t; j += 32) mx = fmaxf(mx, row[j]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int j = lane; j <= t; j += 32) s += expf(row[j] - mx);
  const float inv = 1.0f / warp_sum(s);
  for (int j = lane; j < T; j += 32) {
    const float a = j <= t ? expf(row[j] - mx) * inv : 0.0f;
    row[j] = a;
    if (att_op) store_operand(p, att_op, static_cast<size_t>(r) * T + j, a);
  }
}

// dpre = scale * att * (datt - sum_k att * datt) on and below the diagonal, 0 above, stored as
// operands of p in `dpre` (which may be datt itself in fp32).
__global__ void causal_softmax_backward_kernel(void* dpre, const float* datt, const float* att,
                                               int rows, int T, float scale, Precision p) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = r % T;
  const float* d = datt + static_cast<size_t>(r) * T;
  const float* a = att + static_cast<size_t>(r) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += a[j] * d[j];
  dot = warp_sum(dot);
  // Each lane writes only the elements it reads: in place is safe.
  for (int j = lane; j < T; j += 32) {
    store_operand(p, dpre, static_cast<size_t>(r) * T + j,
                  j <= t ? a[j] * (d[j] - dot) * scale : 0.0f);
  }
}

// The strided-batched shape of `batch` products of (M, K) @ (K, N), each operand packed
// (leading dimension its column count).
GemmShape batched(bool trans_a, bool trans_b, int M, int N, int K, int batch) {
  GemmShape g;
  g.trans_a = trans_a, g.trans_b = trans_b;
  g.M = M, g.N = N, g.K = K;
  g.lda = trans_a ? M : K;
  g.ldb = trans_b ? K : N;
  g.ldc = N;
  g.stride_a = static_cast<long long>(M) * K;
  g.stride_b = static_cast<long long>(K) * N;
  g.stride_c = static_cast<long long>(M) * N;
  g.batch = batch;
  return g;
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const int hs = C / NH, BH = B * NH;
  const size_t n = static_cast<size_t>(B) * T * C, tt = static_cast<size_t>(T) * T;
  const size_t eb = operand_element_bytes(p);
  void* s[5];
  ctx.workspace->carve({n * eb, n * eb, n * eb, operand_scratch_bytes(p, BH * tt), n * 4}, s);
  void *q = s[0], *k = s[1], *v = s[2];
  void* att_op = p == Precision::kFp32 ? nullptr : s[3];
  float* y = static_cast<float*>(s[4]);
  if (n == 0) return;
  split_heads_kernel<<<ceil_div(n, 256), 256, 0, ctx.stream>>>(q, k, v, nullptr, qkv, nullptr, B, T,
                                                               C, NH, p);
  COHORT_CUDA_CHECK_LAUNCH();
  // att_h (T, T) = q_h (T, hs) @ k_h^T / sqrt(hs), every head at once.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  ctx.gemm->run(batched(false, true, T, T, hs, BH), p, scale, q, k, 0.0f, att);
  const int rows = BH * T;
  causal_softmax_kernel<<<ceil_div(rows, 8), 256, 0, ctx.stream>>>(att, att_op, rows, T, p);
  COHORT_CUDA_CHECK_LAUNCH();
  // y_h (T, hs) = att_h (T, T) @ v_h (T, hs)
  ctx.gemm->run(batched(false, false, T, hs, T, BH), p, 1.0f, att_op ? att_op : att, v, 0.0f, y);
  merge_heads_kernel<<<ceil_div(n, 256), 256, 0, ctx.stream>>>(out, y, nullptr, nullptr, B, T, C,
                                                               NH, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, const GemmContext& ctx) {
  const Precision p = ctx.precision;
  const int hs = C / NH, BH = B * NH;
  const size_t n = static_cast<size_t>(B) * T * C, tt = static_cast<size_t>(T) * T;
  const size_t eb = operand_element_bytes(p);
  void* s[8];
  ctx.workspace->carve(
      {n * eb, n * eb, n * eb, n * eb, operand_scratch_bytes(p, BH * tt), n * 4, n * 4, n * 4}, s);
  void *q = s[0], *k = s[1], *v = s[2], *d = s[3];
  float *dq = static_cast<float*>(s[5]), *dk = static_cast<float*>(s[6]),
        *dv = static_cast<float*>(s[7]);
  if (n == 0) return;
  split_heads_kernel<<<ceil_div(n, 256), 256, 0, ctx.stream>>>(q, k, v, d, qkv, dout, B, T, C, NH,
                                                               p);
  COHORT_CUDA_CHECK_LAUNCH();
  round_operands(p, {{att, s[4], BH * tt}}, ctx.stream);
  const void* att_op = operand_or(p, att, s[4]);
  // datt_h = d_h (T, hs) @ v_h^T;  dv_h = att_h^T @ d_h
  ctx.gemm->run(batched(false, true, T, T, hs, BH), p, 1.0f, d, v, 0.0f, datt);
  ctx.gemm->run(batched(true, false, T, hs, T, BH), p, 1.0f, att_op, d, 0.0f, dv);
  // The score gradient, as operands: over datt itself in fp32, else over the rounded
  // probabilities (the product above has read them: one stream).
  void* dpre = p == Precision::kFp32 ? static_cast<void*>(datt) : s[4];
  const int rows = BH * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  causal_softmax_backward_kernel<<<ceil_div(rows, 8), 256, 0, ctx.stream>>>(dpre, datt, att, rows,
                                                                            T, scale, p);
  COHORT_CUDA_CHECK_LAUNCH();
  // dq_h = dpre_h @ k_h;  dk_h = dpre_h^T @ q_h   (the scale is in dpre)
  ctx.gemm->run(batched(false, false, T, hs, T, BH), p, 1.0f, dpre, k, 0.0f, dq);
  ctx.gemm->run(batched(true, false, T, hs, T, BH), p, 1.0f, dpre, q, 0.0f, dk);
  merge_heads_kernel<<<ceil_div(n, 256), 256, 0, ctx.stream>>>(dqkv, dq, dk, dv, B, T, C, NH,
                                                               3 * C);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda

#include <cmath>

#include "cuda/attention.cuh"

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

// One warp per row (rows = B * NH * T, row r is query position r % T): softmax over columns
// 0..t, zeros above.
__global__ void causal_softmax_kernel(float* att, int rows, int T) {
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
  for (int j = lane; j < T; j += 32) row[j] = j <= t ? expf(row[j] - mx) * inv : 0.0f;
}

// datt becomes scale * att * (datt - sum_k att * datt) on and below the diagonal, 0 above.
__global__ void causal_softmax_backward_kernel(float* datt, const float* att, int rows, int T,
                                               float scale) {
  const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int t = r % T;
  float* d = datt + static_cast<size_t>(r) * T;
  const float* a = att + static_cast<size_t>(r) * T;
  float dot = 0.0f;
  for (int j = lane; j <= t; j += 32) dot += a[j] * d[j];
  dot = warp_sum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= t ? a[j] * (d[j] - dot) * scale : 0.0f;
}

}  // namespace

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       cudaStream_t stream, cublasHandle_t handle) {
  const int hs = C / NH, C3 = 3 * C;
  const long long tt = static_cast<long long>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<size_t>(b) * T * C3;
    // att_h (T, T) = q_h (T, hs) @ k_h^T * scale, for every head h.
    gemm_strided_batched(handle, false, true, T, T, hs, scale, base, C3, hs, base + C, C3, hs, 0.0f,
                         att + b * NH * tt, T, tt, NH);
  }
  const int rows = B * NH * T;
  causal_softmax_kernel<<<ceil_div(rows, 8), 256, 0, stream>>>(att, rows, T);
  COHORT_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; ++b) {
    const float* v = qkv + static_cast<size_t>(b) * T * C3 + 2 * C;
    // out_h (T, hs) = att_h (T, T) @ v_h (T, hs), heads side by side in out (row stride C).
    gemm_strided_batched(handle, false, false, T, hs, T, 1.0f, att + b * NH * tt, T, tt, v, C3, hs,
                         0.0f, out + static_cast<size_t>(b) * T * C, C, hs, NH);
  }
}

void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH, cudaStream_t stream,
                        cublasHandle_t handle) {
  const int hs = C / NH, C3 = 3 * C;
  const long long tt = static_cast<long long>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<size_t>(b) * T * C3;
    float* dbase = dqkv + static_cast<size_t>(b) * T * C3;
    const float* d = dout + static_cast<size_t>(b) * T * C;
    // datt_h = d_h (T, hs) @ v_h^T;  dv_h = att_h^T @ d_h
    gemm_strided_batched(handle, false, true, T, T, hs, 1.0f, d, C, hs, base + 2 * C, C3, hs, 0.0f,
                         datt + b * NH * tt, T, tt, NH);
    gemm_strided_batched(handle, true, false, T, hs, T, 1.0f, att + b * NH * tt, T, tt, d, C, hs,
                         0.0f, dbase + 2 * C, C3, hs, NH);
  }
  const int rows = B * NH * T;
  causal_softmax_backward_kernel<<<ceil_div(rows, 8), 256, 0, stream>>>(datt, att, rows, T, scale);
  COHORT_CUDA_CHECK_LAUNCH();
  for (int b = 0; b < B; ++b) {
    const float* base = qkv + static_cast<size_t>(b) * T * C3;
    float* dbase = dqkv + static_cast<size_t>(b) * T * C3;
    // dq_h = dpre_h @ k_h;  dk_h = dpre_h^T @ q_h
    gemm_strided_batched(handle, false, false, T, hs, T, 1.0f, datt + b * NH * tt, T, tt, base + C,
                         C3, hs, 0.0f, dbase, C3, hs, NH);
    gemm_strided_batched(handle, true, false, T, hs, T, 1.0f, datt + b * NH * tt, T, tt, base, C3,
                         hs, 0.0f, dbase + C, C3, hs, NH);
  }
}

}  // namespace cohort::train::cuda

#include "cohort/train/layers/layernorm.h"
#include "cuda/layernorm.cuh"

namespace cohort::train::cuda {
namespace {

__device__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp per row.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  float s = 0.0f;
  for (int i = lane; i < C; i += 32) s += x[i];
  const float m = warp_sum(s) / C;
  float v = 0.0f;
  for (int i = lane; i < C; i += 32) v += (x[i] - m) * (x[i] - m);
  const float r = rsqrtf(warp_sum(v) / C + kLayerNormEps);
  float* o = out + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += 32) o[i] = (x[i] - m) * r * weight[i] + bias[i];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// One warp per row: dinp += ((dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd.
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<size_t>(row) * C;
  const float* d = dout + static_cast<size_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float a = 0.0f, b = 0.0f;
  for (int i = lane; i < C; i += 32) {
    const float norm = (x[i] - m) * r;
    const float dnorm = weight[i] * d[i];
    a += dnorm;
    b += dnorm * norm;
  }
  a = warp_sum(a) / C;
  b = warp_sum(b) / C;
  float* dx = dinp + static_cast<size_t>(row) * C;
  for (int i = lane; i < C; i += 32) {
    const float norm = (x[i] - m) * r;
    dx[i] += (weight[i] * d[i] - a - norm * b) * r;
  }
}

// dweight[c] += sum_n dout[n, c] * norm[n, c]; dbias[c] += sum_n dout[n, c]. Block (32, 8) per 32
// columns, partial sums combined in a fixed order (deterministic).
__global__ void layernorm_backward_params_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int N, int C) {
  __shared__ float pw[8][33], pb[8][33];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < C) {
    for (int n = threadIdx.y; n < N; n += 8) {
      const size_t i = static_cast<size_t>(n) * C + c;
      sw += dout[i] * (inp[i] - mean[n]) * rstd[n];
      sb += dout[i];
    }
  }
  pw[threadIdx.y][threadIdx.x] = sw;
  pb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += pw[k][threadIdx.x];
      tb += pb[k][threadIdx.x];
    }
    dweight[c] += tw;
    dbias[c] += tb;
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  layernorm_forward_kernel<<<ceil_div(N, 8), 256, 0, stream>>>(out, mean, rstd, inp, weight, bias,
                                                               N, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C, cudaStream_t stream) {
  if (N == 0) return;
  layernorm_backward_input_kernel<<<ceil_div(N, 8), 256, 0, stream>>>(dinp, dout, inp, weight, mean,
                                                                      rstd, N, C);
  COHORT_CUDA_CHECK_LAUNCH();
  layernorm_backward_params_kernel<<<ceil_div(C, 32), dim3(32, 8), 0, stream>>>(
      dweight, dbias, dout, inp, mean, rstd, N, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda

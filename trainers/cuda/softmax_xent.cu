#include "cuda/softmax_xent.cuh"

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

// One warp per row. Every lane reads what it needs before any lane writes, so probs may alias
// logits (the shuffles order the reads before the writes).
__global__ void softmax_xent_forward_kernel(float* losses, float* probs, const float* logits,
                                            const int32_t* targets, int N, int V) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* z = logits + static_cast<size_t>(n) * V;
  const float target_logit = z[targets[n]];
  float mx = -INFINITY;
  for (int i = lane; i < V; i += 32) mx = fmaxf(mx, z[i]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int i = lane; i < V; i += 32) s += expf(z[i] - mx);
  s = warp_sum(s);
  const float inv = 1.0f / s;
  float* p = probs + static_cast<size_t>(n) * V;
  for (int i = lane; i < V; i += 32) p[i] = expf(z[i] - mx) * inv;
  if (lane == 0) losses[n] = logf(s) + mx - target_logit;
}

__global__ void softmax_xent_backward_kernel(float* dlogits, const float* probs,
                                             const int32_t* targets, float dloss, int N, int V) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(N) * V) return;
  const size_t n = i / V;
  const int v = static_cast<int>(i % V);
  dlogits[i] = (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dloss;
}

}  // namespace

void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream) {
  if (N == 0) return;
  softmax_xent_forward_kernel<<<ceil_div(N, 8), 256, 0, stream>>>(losses, probs, logits, targets, N,
                                                                  V);
  COHORT_CUDA_CHECK_LAUNCH();
}

void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(N) * V;
  if (n == 0) return;
  softmax_xent_backward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dlogits, probs, targets, dloss,
                                                                     N, V);
  COHORT_CUDA_CHECK_LAUNCH();
}

}  // namespace cohort::train::cuda

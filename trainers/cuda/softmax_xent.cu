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

// One warp per row (n is the same for all 32 lanes, so a warp returns or stays as a whole).
// probs may alias logits (the GPT computes them in place): each lane writes only the elements it
// read itself, except z[target], which lane 0 reads for the loss. The shuffles do not order
// memory, and under independent thread scheduling (Volta and later) a lane may run ahead into the
// write loop while lane 0's read of z[target] is still pending, or the compiler may sink that
// read past the shuffles; the __syncwarp() below is the memory barrier that orders it before any
// lane's write.
__global__ void softmax_xent_forward_kernel(float* losses, float* probs, const float* logits,
                                            const int32_t* targets, int N, int V) {
  const int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (n >= N) return;
  const float* z = logits + static_cast<size_t>(n) * V;
  const float target_logit = lane == 0 ? z[targets[n]] : 0.0f;
  float mx = -INFINITY;
  for (int i = lane; i < V; i += 32) mx = fmaxf(mx, z[i]);
  mx = warp_max(mx);
  float s = 0.0f;
  for (int i = lane; i < V; i += 32) s += expf(z[i] - mx);
  s = warp_sum(s);
  const float inv = 1.0f / s;
  __syncwarp();  // every read of z (lane 0's z[target] included) before any write to p
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

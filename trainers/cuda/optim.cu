#include <cmath>

#include "cuda/optim.cuh"

namespace cohort::train::cuda {
namespace {

__global__ void sgd_kernel(float* params, float* buf, const float* grads, size_t n, float lr,
                           float momentum, float weight_decay, bool nesterov, float grad_scale) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = grad_scale * grads[i] + weight_decay * params[i];
  const float b = momentum * buf[i] + g;
  buf[i] = b;
  params[i] -= lr * (nesterov ? g + momentum * b : b);
}

__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, size_t n,
                             float step_size, float inv_bc2_sqrt, float decay, float b1, float b2,
                             float eps, float grad_scale) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = grad_scale * grads[i];
  const float mi = b1 * m[i] + (1.0f - b1) * g;
  const float vi = b2 * v[i] + (1.0f - b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  params[i] = params[i] * decay - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
}

// One block per piece; the element update is adamw_kernel's.
__global__ void adamw_pieces_kernel(float* params, float* m, float* v, const float* grads,
                                    const AdamwPiece* pieces, float step_size, float inv_bc2_sqrt,
                                    float decay, float b1, float b2, float eps, float grad_scale) {
  const AdamwPiece piece = pieces[blockIdx.x];
  const float keep = piece.decay ? decay : 1.0f;
  for (uint32_t j = threadIdx.x; j < piece.count; j += blockDim.x) {
    const size_t i = piece.offset + j;
    const float g = grad_scale * grads[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * keep - step_size * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
  }
}

__global__ void ema_kernel(float* average, const float* x, size_t n, float keep, float take) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) average[i] = keep * average[i] + take * x[i];
}

constexpr int kPartials = 1024;

// kPartials blocks of 256 threads; block k sums x[k*256 + j + stride*...] and writes partial[k].
__global__ void sum_squares_partial_kernel(double* partial, const float* x, size_t n) {
  __shared__ double s[256];
  double acc = 0.0;
  for (size_t i = blockIdx.x * 256 + threadIdx.x; i < n;
       i += static_cast<size_t>(kPartials) * 256) {
    acc += static_cast<double>(x[i]) * x[i];
  }
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void sum_partials_kernel(double* out, const double* partial) {
  __shared__ double s[256];
  double acc = 0.0;
  for (int i = threadIdx.x; i < kPartials; i += 256) acc += partial[i];
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int w = 128; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = s[0];
}

}  // namespace

void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
              float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(params, buf, grads, n, p.lr, p.momentum,
                                                   p.weight_decay, p.nesterov, grad_scale);
  COHORT_CUDA_CHECK_LAUNCH();
}

void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                const AdamWParams& p, float grad_scale, cudaStream_t stream) {
  if (n == 0) return;
  // The same host-side constants as the CPU version, so both round alike.
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(t));
  adamw_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(
      params, m, v, grads, n, static_cast<float>(p.lr / bc1),
      static_cast<float>(1.0 / std::sqrt(bc2)), 1.0f - p.lr * p.weight_decay, p.beta1, p.beta2,
      p.eps, grad_scale);
  COHORT_CUDA_CHECK_LAUNCH();
}

void adamw_step_pieces(float* params, float* m, float* v, const float* grads,
                       const AdamwPiece* pieces, unsigned n_pieces, int64_t t, const AdamWParams& p,
                       float grad_scale, cudaStream_t stream) {
  if (n_pieces == 0) return;
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(t));
  // Without decay the factor is 1 - lr * 0 = 1 exactly, as the per-tensor kernel computes it.
  adamw_pieces_kernel<<<n_pieces, 256, 0, stream>>>(
      params, m, v, grads, pieces, static_cast<float>(p.lr / bc1),
      static_cast<float>(1.0 / std::sqrt(bc2)), 1.0f - p.lr * p.weight_decay, p.beta1, p.beta2,
      p.eps, grad_scale);
  COHORT_CUDA_CHECK_LAUNCH();
}

void ema_update(float* average, const float* x, size_t n, float decay, cudaStream_t stream) {
  if (n == 0) return;
  ema_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(average, x, n, decay, 1.0f - decay);
  COHORT_CUDA_CHECK_LAUNCH();
}

double sum_squares(const float* x, size_t n, double* scratch, cudaStream_t stream) {
  if (n == 0) return 0.0;
  sum_squares_partial_kernel<<<kPartials, 256, 0, stream>>>(scratch, x, n);
  COHORT_CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, 256, 0, stream>>>(scratch + kPartials, scratch);
  COHORT_CUDA_CHECK_LAUNCH();
  double result = 0.0;
  COHORT_CUDA_CHECK(cudaMemcpyAsync(&result, scratch + kPartials, sizeof(double),
                                    cudaMemcpyDeviceToHost, stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return result;
}

}  // namespace cohort::train::cuda

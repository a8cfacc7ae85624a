#include "cuda/elementwise.cuh"

namespace cohort::train::cuda {
namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

__global__ void relu_forward_kernel(float* out, const float* inp, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_backward_kernel(float* dinp, const float* dout, const float* out, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

__global__ void gelu_forward_kernel(float* out, const float* inp, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + kGeluCubic * x * x * x)));
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float t = tanhf(kGeluScale * (x + kGeluCubic * x * x * x));
  const float grad = 0.5f * (1.0f + t) +
                     0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  dinp[i] = grad * dout[i];
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, size_t n) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

}  // namespace

#define COHORT_LAUNCH_1D(kernel, n, ...)                         \
  do {                                                           \
    if ((n) == 0) return;                                        \
    kernel<<<ceil_div((n), 256), 256, 0, stream>>>(__VA_ARGS__); \
    COHORT_CUDA_CHECK_LAUNCH();                                  \
  } while (0)

void relu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  COHORT_LAUNCH_1D(relu_forward_kernel, n, out, inp, n);
}
void relu_backward(float* dinp, const float* dout, const float* out, size_t n,
                   cudaStream_t stream) {
  COHORT_LAUNCH_1D(relu_backward_kernel, n, dinp, dout, out, n);
}
void gelu_forward(float* out, const float* inp, size_t n, cudaStream_t stream) {
  COHORT_LAUNCH_1D(gelu_forward_kernel, n, out, inp, n);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n,
                   cudaStream_t stream) {
  COHORT_LAUNCH_1D(gelu_backward_kernel, n, dinp, inp, dout, n);
}
void residual_forward(float* out, const float* a, const float* b, size_t n, cudaStream_t stream) {
  COHORT_LAUNCH_1D(residual_forward_kernel, n, out, a, b, n);
}

}  // namespace cohort::train::cuda

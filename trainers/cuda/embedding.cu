#include "cuda/embedding.cuh"

namespace cohort::train::cuda {
namespace {

__global__ void embedding_forward_kernel(float* out, const int32_t* tokens, const float* wte,
                                         const float* wpe, int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(B) * T * C) return;
  const int c = static_cast<int>(i % C);
  const size_t bt = i / C;
  const int t = static_cast<int>(bt % T);
  out[i] = wte[static_cast<size_t>(tokens[bt]) * C + c] + wpe[static_cast<size_t>(t) * C + c];
}

__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                              int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(B) * T * C) return;
  const int c = static_cast<int>(i % C);
  atomicAdd(&dwte[static_cast<size_t>(tokens[i / C]) * C + c], dout[i]);
}

// One thread per (t, c): sums over the batch in order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T) * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; ++b) s += dout[static_cast<size_t>(b) * T * C + i];
  dwpe[i] += s;
}

}  // namespace

void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(out, tokens, wte, wpe, B, T, C);
  COHORT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, cudaStream_t stream) {
  const size_t n = static_cast<size_t>(B) * T * C;
  if (n == 0) return;
  embedding_backward_wte_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(dwte, dout, tokens, B, T, C);
  COHORT_CUDA_CHECK_LAUNCH();
  if (dwpe) {
    embedding_backward_wpe_kernel<<<ceil_div(static_cast<size_t>(T) * C, 256), 256, 0, stream>>>(
        dwpe, dout, B, T, C);
    COHORT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cohort::train::cuda

#include "cuda/embedding.cuh"
#include "cuda/embedding_grad.h"

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

// One thread per (vocabulary row v = blockIdx.y, channel c): it scans all B*T tokens in order and
// adds the gradients of those equal to v. The 32 threads of a warp share v, so each token read is
// one broadcast load; every dout element is read by exactly one thread, coalesced across c. At the
// GPT's vocabulary of 256 that is V*C threads of B*T cheap iterations each.
__global__ void embedding_backward_wte_kernel(float* dwte, const float* dout, const int32_t* tokens,
                                              int n_tokens, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = blockIdx.y;
  if (c >= C) return;
  float* cell = dwte + static_cast<size_t>(v) * C + c;
  *cell = embedding_wte_grad_element(*cell, dout, tokens, n_tokens, C, v, c);
}

// One thread per (t, c): sums over the batch in order.
__global__ void embedding_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i >= static_cast<size_t>(T) * C) return;
  const int t = static_cast<int>(i / C), c = static_cast<int>(i % C);
  dwpe[i] = embedding_wpe_grad_element(dwpe[i], dout, B, T, C, t, c);
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
                        int T, int C, int V, cudaStream_t stream) {
  if (static_cast<size_t>(B) * T * C == 0 || V == 0) return;
  // grid.y is limited to 65535 rows; the byte-level GPT has 256.
  if (V > 65535) {
    throw CudaError("embedding_backward: a vocabulary of " + std::to_string(V) +
                    " rows is above the kernel's 65535 (grid.y)");
  }
  const dim3 grid(ceil_div(C, 128), static_cast<unsigned>(V));
  embedding_backward_wte_kernel<<<grid, 128, 0, stream>>>(dwte, dout, tokens, B * T, C);
  COHORT_CUDA_CHECK_LAUNCH();
  if (dwpe) {
    embedding_backward_wpe_kernel<<<ceil_div(static_cast<size_t>(T) * C, 256), 256, 0, stream>>>(
        dwpe, dout, B, T, C);
    COHORT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace cohort::train::cuda

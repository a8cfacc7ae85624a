// The sums behind the CUDA embedding backward (cuda/embedding.cu), one output element at a time.
//
// Each element of dwte and dwpe is one thread's running sum: it starts at the element's value and
// adds the gradients of the matching positions in the order the CPU reference
// (layers/embedding.cc) visits them, so the CUDA result is bitwise the CPU's and the same on
// every run (float atomics would add in whatever order the threads arrive). This header compiles
// for the host too: tests/trainers/layers_test.cc checks these functions against the CPU
// reference bitwise, without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define COHORT_HOST_DEVICE __host__ __device__
#else
#define COHORT_HOST_DEVICE
#endif

namespace cohort::train::cuda {

// dwte[v, c] after the backward: `init` (its value before) plus dout[i, c] for every position i
// of the n_tokens with tokens[i] == v, in increasing i. dout is (n_tokens, C).
COHORT_HOST_DEVICE inline float embedding_wte_grad_element(float init, const float* dout,
                                                           const int32_t* tokens, int n_tokens,
                                                           int C, int v, int c) {
  float s = init;
  for (int i = 0; i < n_tokens; ++i) {
    if (tokens[i] == v) s += dout[static_cast<size_t>(i) * C + c];
  }
  return s;
}

// dwpe[t, c] after the backward: `init` plus dout[b, t, c] for b = 0..B-1 in order. dout is
// (B, T, C).
COHORT_HOST_DEVICE inline float embedding_wpe_grad_element(float init, const float* dout, int B,
                                                           int T, int C, int t, int c) {
  float s = init;
  for (int b = 0; b < B; ++b) s += dout[(static_cast<size_t>(b) * T + t) * C + c];
  return s;
}

}  // namespace cohort::train::cuda

// CUDA twins of optim.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cohort/train/optim.h"
#include "cuda/common.cuh"

namespace cohort::train::cuda {

void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
              float grad_scale, cudaStream_t stream);
void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                const AdamWParams& p, float grad_scale, cudaStream_t stream);
void ema_update(float* average, const float* x, size_t n, float decay, cudaStream_t stream);

// A piece of one tensor for the fused AdamW: `count` elements from `offset`, decayed or not.
struct AdamwPiece {
  uint64_t offset;
  uint32_t count;
  uint32_t decay;
};
// Elements per piece (one block of 256 threads, 16 elements each).
constexpr uint32_t kAdamwPieceElements = 4096;
// adamw_step over the tensors that `pieces` (device memory, n_pieces of them, each at most
// kAdamwPieceElements) cut the buffers into, in ONE launch: a decayed piece with
// p.weight_decay, the others with 0, each element as adamw_step computes it.
void adamw_step_pieces(float* params, float* m, float* v, const float* grads,
                       const AdamwPiece* pieces, unsigned n_pieces, int64_t t, const AdamWParams& p,
                       float grad_scale, cudaStream_t stream);

// Doubles of device scratch sum_squares needs.
inline size_t sum_squares_scratch_doubles() {
  return 1024 + 1;
}
// Sum of squares of x into *result (host), via `scratch` (device, sum_squares_scratch_doubles()).
// Deterministic: fixed partials reduced in a fixed order. Synchronises the stream.
double sum_squares(const float* x, size_t n, double* scratch, cudaStream_t stream);

}  // namespace cohort::train::cuda

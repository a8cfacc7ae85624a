// CUDA twin of layers/softmax_xent.h.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V, cudaStream_t stream);
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V, cudaStream_t stream);

}  // namespace cohort::train::cuda

// CUDA twin of layers/maxpool.h.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"

namespace cohort::train::cuda {

void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W, int C,
                        cudaStream_t stream);
void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H, int W,
                         int C, cudaStream_t stream);

}  // namespace cohort::train::cuda

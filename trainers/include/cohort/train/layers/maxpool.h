// 2x2 max pooling, stride 2, NHWC, floor mode (as torch.nn.functional.max_pool2d(x, 2)).
// Conventions as in linear.h.
#pragma once

#include <cstdint>

namespace cohort::train {

// out (B, H/2, W/2, C) = max over each 2x2 window of inp (B, H, W, C); argmax (same shape as out)
// records which of the four (0..3, row-major, first maximum on ties) won.
void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W, int C);

// dinp (B, H, W, C) = dout routed to each window's winner, zero elsewhere (overwritten).
void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H, int W,
                         int C);

}  // namespace cohort::train

// ReLU. Conventions as in linear.h; both functions may run in place.
#pragma once

#include <cstddef>

namespace cohort::train {

// out (n) = max(inp, 0). out may equal inp.
void relu_forward(float* out, const float* inp, size_t n);

// dinp (n) = dout where out > 0, else 0 (overwritten; may equal dout). `out` is forward's output.
void relu_backward(float* dinp, const float* dout, const float* out, size_t n);

}  // namespace cohort::train

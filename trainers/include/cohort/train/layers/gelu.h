// GELU, tanh approximation (PyTorch's approximate="tanh", GPT-2's and build-nanogpt's choice):
// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). Conventions as in linear.h.
#pragma once

#include <cstddef>

namespace cohort::train {

// out (n) = gelu(inp).
void gelu_forward(float* out, const float* inp, size_t n);

// dinp (n) = gelu'(inp) * dout (overwritten; may equal dout).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

}  // namespace cohort::train

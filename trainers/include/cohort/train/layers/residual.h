// Residual connection: out = a + b. Its backward is the identity into both inputs, done by the
// model with the gradient buffers themselves (see gpt.cc).
#pragma once

#include <cstddef>

namespace cohort::train {

// out (n) = a + b. out may equal a or b.
void residual_forward(float* out, const float* a, const float* b, size_t n);

}  // namespace cohort::train

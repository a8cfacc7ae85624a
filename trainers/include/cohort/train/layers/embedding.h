// Token plus position embedding (GPT's input layer). Conventions as in linear.h.
#pragma once

#include <cstdint>

namespace cohort::train {

// out (B, T, C) = wte[tokens[b, t]] + wpe[t]; wte (V, C), wpe (maxT, C), tokens (B, T) in [0, V).
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C);

// dwte[tokens[b, t]] += dout[b, t]; dwpe[t] += dout[b, t]. dwpe may be null. V is dwte's rows
// (the CUDA twin runs one thread per row and channel; the loop here does not need it).
// Each element adds its terms in order of (b, t), starting from its value: the CUDA twin adds in
// the same order (cuda/embedding_grad.h), so both give bitwise the same gradients.
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int V);

}  // namespace cohort::train

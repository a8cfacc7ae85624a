// Causal multi-head self-attention core (after the QKV projection, before the output projection):
// per head, y = softmax(q k^T / sqrt(hs) + causal mask) v. Conventions as in linear.h: every
// product (q k^T, att v, and the four of backward) rounds its operands to `p`; the softmax, its
// backward and the saved probabilities are fp32.
#pragma once

#include "cohort/train/precision.h"

namespace cohort::train {

// qkv (B, T, 3C): q, k, v side by side, each (B, T, NH, hs) with hs = C / NH.
// out (B, T, C): the heads' outputs side by side; att (B, NH, T, T): the softmax probabilities,
// saved for backward (zero above the diagonal).
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH,
                       Precision p = Precision::kFp32);

// dqkv (B, T, 3C) = gradient of qkv (overwritten). datt (T, T) is scratch.
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                        const float* att, int B, int T, int C, int NH,
                        Precision p = Precision::kFp32);

}  // namespace cohort::train

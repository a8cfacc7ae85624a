// Layer normalisation over the last dimension, eps 1e-5, with weight and bias (torch.nn.LayerNorm).
// Conventions as in linear.h, except that the input gradient ACCUMULATES: LayerNorm sits on the
// residual stream, whose gradient is the sum of the branch and the skip path.
#pragma once

namespace cohort::train {

inline constexpr float kLayerNormEps = 1e-5f;

// out (N, C) = (inp - mean) * rstd * weight + bias; mean (N) and rstd (N) are saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int N, int C);

// dinp (N, C) += d/dinp; dweight (C) += ...; dbias (C) += ....
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int N, int C);

}  // namespace cohort::train

// Optimiser steps and gradient clipping over flat float buffers, with PyTorch's exact update
// formulas (torch.optim.SGD and torch.optim.AdamW of PyTorch 1.13), so a trainer can be compared
// step by step with its PyTorch twin. All buffers have n floats; they update in place.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cohort::train {

struct SgdParams {
  float lr = 0.05f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

// SGD with momentum, dampening 0 (torch.optim.SGD):
//   g = grad_scale * grads + weight_decay * params;  buf = momentum * buf + g;
//   params -= lr * buf,  or with Nesterov  params -= lr * (g + momentum * buf).
// `buf` starts at zero, which equals PyTorch's first-step buf = g.
void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
              float grad_scale = 1.0f);

struct AdamWParams {
  float lr = 3e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// AdamW step number `t` (1-based) with g = grad_scale * grads:
//   params *= 1 - lr * weight_decay;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   params -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Pass weight_decay 0 for tensors that are not decayed.
void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                const AdamWParams& p, float grad_scale = 1.0f);

// An exponential moving average of the weights (Polyak averaging), for evaluation:
//   average = decay * average + (1 - decay) * x.
void ema_update(float* average, const float* x, size_t n, float decay);

// The decay of update number `step` (0-based) for a target `decay`: min(decay, (1 + step) /
// (10 + step)), TensorFlow's ExponentialMovingAverage num_updates rule (timm's ModelEmaV2 uses it
// too). The first updates follow the weights closely, so that the average of a short run is not
// dominated by the random initial weights.
float ema_decay_at(float decay, int64_t step);

// Sum of squares of x, accumulated in double.
double sum_squares(const float* x, size_t n);

// The factor torch.nn.utils.clip_grad_norm_ scales gradients by: min(1, max_norm / (norm + 1e-6)).
// max_norm <= 0 disables clipping (returns 1).
float clip_scale(double norm, float max_norm);

}  // namespace cohort::train

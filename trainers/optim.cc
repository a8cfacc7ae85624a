#include "cohort/train/optim.h"

#include <cmath>

#include "vec_math.h"

namespace cohort::train {

COHORT_TRAIN_CLONES
void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
              float grad_scale) {
  const float lr = p.lr, momentum = p.momentum, weight_decay = p.weight_decay;
  const bool nesterov = p.nesterov;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad_scale * grads[i] + weight_decay * params[i];
    const float b = momentum * buf[i] + g;
    buf[i] = b;
    params[i] -= lr * (nesterov ? g + momentum * b : b);
  }
}

COHORT_TRAIN_CLONES
void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                const AdamWParams& p, float grad_scale) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), static_cast<double>(t));
  const float step_size = static_cast<float>(p.lr / bc1);
  const float inv_bc2_sqrt = static_cast<float>(1.0 / std::sqrt(bc2));
  const float decay = 1.0f - p.lr * p.weight_decay;
  const float b1 = p.beta1, b2 = p.beta2, eps = p.eps;
  for (size_t i = 0; i < n; ++i) {
    const float g = grad_scale * grads[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float denom = std::sqrt(vi) * inv_bc2_sqrt + eps;
    params[i] = params[i] * decay - step_size * mi / denom;
  }
}

COHORT_TRAIN_CLONES
void ema_update(float* average, const float* x, size_t n, float decay) {
  const float keep = decay, take = 1.0f - decay;
  for (size_t i = 0; i < n; ++i) average[i] = keep * average[i] + take * x[i];
}

float ema_decay_at(float decay, int64_t step) {
  const float warm = static_cast<float>(1 + step) / static_cast<float>(10 + step);
  return decay < warm ? decay : warm;
}

COHORT_TRAIN_CLONES
double sum_squares(const float* x, size_t n) {
  // Accumulated in double (vectorised lanes, then their sum): the result does not depend on the
  // compiler's choice of vector width beyond the last bits.
  double total = 0.0;
#pragma omp simd reduction(+ : total)
  for (size_t i = 0; i < n; ++i) total += static_cast<double>(x[i]) * x[i];
  return total;
}

float clip_scale(double norm, float max_norm) {
  if (max_norm <= 0.0f) return 1.0f;
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

}  // namespace cohort::train

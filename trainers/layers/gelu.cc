#include "cohort/train/layers/gelu.h"

#include "vec_math.h"

namespace cohort::train {
namespace {
constexpr float kScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kCubic = 0.044715f;
}  // namespace

COHORT_TRAIN_CLONES
void gelu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float t = detail::fast_tanh(kScale * (x + kCubic * x * x * x));
    out[i] = 0.5f * x * (1.0f + t);
  }
}

COHORT_TRAIN_CLONES
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kScale * (x + kCubic * x * x * x);
    const float t = detail::fast_tanh(u);
    const float sech2 = 1.0f - t * t;
    const float grad =
        0.5f * (1.0f + t) + 0.5f * x * sech2 * kScale * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = grad * dout[i];
  }
}

}  // namespace cohort::train

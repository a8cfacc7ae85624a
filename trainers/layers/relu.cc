#include "cohort/train/layers/relu.h"

#include "vec_math.h"

namespace cohort::train {

COHORT_TRAIN_CLONES
void relu_forward(float* out, const float* inp, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

COHORT_TRAIN_CLONES
void relu_backward(float* dinp, const float* dout, const float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) dinp[i] = out[i] > 0.0f ? dout[i] : 0.0f;
}

}  // namespace cohort::train

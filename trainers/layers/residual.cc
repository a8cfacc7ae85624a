#include "cohort/train/layers/residual.h"

#include "vec_math.h"

namespace cohort::train {

COHORT_TRAIN_CLONES
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace cohort::train

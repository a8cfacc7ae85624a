#include "cohort/train/layers/embedding.h"

#include <cstddef>

#include "vec_math.h"

namespace cohort::train {

COHORT_TRAIN_CLONES
void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe, int B,
                       int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      float* o = out + (static_cast<size_t>(b) * T + t) * C;
      const float* e = wte + static_cast<size_t>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<size_t>(t) * C;
      for (int i = 0; i < C; ++i) o[i] = e[i] + p[i];
    }
  }
}

COHORT_TRAIN_CLONES
void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                        int T, int C, int /*V*/) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const float* d = dout + (static_cast<size_t>(b) * T + t) * C;
      float* de = dwte + static_cast<size_t>(tokens[b * T + t]) * C;
      for (int i = 0; i < C; ++i) de[i] += d[i];
      if (dwpe) {
        float* dp = dwpe + static_cast<size_t>(t) * C;
        for (int i = 0; i < C; ++i) dp[i] += d[i];
      }
    }
  }
}

}  // namespace cohort::train

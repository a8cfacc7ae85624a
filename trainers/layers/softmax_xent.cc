#include "cohort/train/layers/softmax_xent.h"

#include <cmath>
#include <cstddef>

#include "vec_math.h"

namespace cohort::train {

COHORT_TRAIN_CLONES
void softmax_xent_forward(float* losses, float* probs, const float* logits, const int32_t* targets,
                          int N, int V) {
  for (int n = 0; n < N; ++n) {
    const float* z = logits + static_cast<size_t>(n) * V;
    float* p = probs + static_cast<size_t>(n) * V;
    float mx = z[0];
    for (int i = 1; i < V; ++i) mx = z[i] > mx ? z[i] : mx;
    const float target_logit = z[targets[n]];  // read before an in-place overwrite
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int i = 0; i < V; ++i) {
      p[i] = detail::fast_exp(z[i] - mx);
      sum += p[i];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < V; ++i) p[i] *= inv;
    losses[n] = std::log(sum) + mx - target_logit;
  }
}

COHORT_TRAIN_CLONES
void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                           int N, int V) {
  for (int n = 0; n < N; ++n) {
    const float* p = probs + static_cast<size_t>(n) * V;
    float* d = dlogits + static_cast<size_t>(n) * V;
    for (int i = 0; i < V; ++i) d[i] = p[i] * dloss;
    d[targets[n]] -= dloss;
  }
}

}  // namespace cohort::train

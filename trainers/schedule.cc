#include "cohort/train/schedule.h"

#include <cmath>
#include <numbers>

namespace cohort::train {

float cosine_lr(int64_t step, int64_t warmup, int64_t max_steps, float max_lr, float min_lr) {
  if (step < warmup) return max_lr * static_cast<float>(step + 1) / static_cast<float>(warmup);
  if (step > max_steps || max_steps <= warmup) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(max_steps - warmup);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return static_cast<float>(min_lr + coeff * (max_lr - min_lr));
}

}  // namespace cohort::train

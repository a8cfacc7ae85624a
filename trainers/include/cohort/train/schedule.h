// Learning-rate schedules.
#pragma once

#include <cstdint>

namespace cohort::train {

// Linear warm-up then cosine decay (build-nanogpt's get_lr): for step < warmup,
// max_lr * (step + 1) / warmup; past max_steps, min_lr; in between, a half cosine from max_lr
// down to min_lr. `step` is 0-based.
float cosine_lr(int64_t step, int64_t warmup, int64_t max_steps, float max_lr, float min_lr);

}  // namespace cohort::train

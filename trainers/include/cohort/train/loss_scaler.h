// Dynamic loss scaling for fp16 GEMMs, as torch.cuda.amp.GradScaler does it (PyTorch's
// torch/amp/grad_scaler.py and _amp_update_scale in aten/src/ATen/native/cuda/AmpKernels.cu).
//
// fp16 cannot hold gradients below 2^-24: the loss is multiplied by scale() before backward so
// that they stay representable, and the gradients are divided by it again before the optimiser
// step. A scale too large makes some fp16 GEMM operand overflow to infinity: the gradients then
// hold infinities or NaNs, that step is skipped (the weights and optimiser state stay as they
// were) and the scale halves. After growth_interval steps in a row without overflow the scale
// doubles. Disabled (every precision but fp16), the scale is 1 and no step is skipped.
//
// Thread safety: none; one per trainer.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "cohort/train/precision.h"

namespace cohort::train {

struct LossScalerOptions {
  float init_scale = 65536.0f;  // GradScaler's defaults
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  // Enabled iff `enabled`; throws cohort::UsageError for options GradScaler refuses (a scale or
  // growth factor that is not > 0 and finite, a growth factor <= 1, a backoff factor outside
  // (0, 1), a growth interval < 1).
  LossScaler(bool enabled, const LossScalerOptions& options);
  // Enabled for fp16, the one format whose range needs it.
  static LossScaler for_precision(Precision p, const LossScalerOptions& options = {});

  bool enabled() const { return enabled_; }
  // What to multiply the loss by before backward (1 when disabled).
  float scale() const { return scale_; }
  // Steps without overflow since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  // Steps skipped for overflow by this scaler (not saved in checkpoints).
  int64_t skipped_steps() const { return skipped_; }

  // After a backward at scale(): `found_inf` says whether any gradient is infinite or NaN.
  // Returns true iff the optimiser step is to be applied; then updates the scale for the next step.
  // Disabled, it returns !found_inf without changing anything.
  bool update(bool found_inf);

  // {"scale": .., "growth_tracker": ..} for a checkpoint, and back. restore() of a state written
  // by a disabled scaler (or an empty one) leaves this scaler at its initial state.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  bool enabled_;
  LossScalerOptions o_;
  float scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace cohort::train

#include "cohort/train/loss_scaler.h"

#include <cmath>
#include <string>

#include "cohort/error.h"

namespace cohort::train {

LossScaler::LossScaler(bool enabled, const LossScalerOptions& options)
    : enabled_(enabled), o_(options), scale_(enabled ? options.init_scale : 1.0f) {
  if (!enabled) return;
  const auto bad = [](const std::string& what, double v) {
    throw UsageError("loss scaling: " + what + " (given " + std::to_string(v) + ")");
  };
  if (!(o_.init_scale > 0) || !std::isfinite(o_.init_scale)) {
    bad("the initial scale must be positive and finite", o_.init_scale);
  }
  if (!(o_.growth_factor > 1) || !std::isfinite(o_.growth_factor)) {
    bad("the growth factor must be above 1", o_.growth_factor);
  }
  if (!(o_.backoff_factor > 0 && o_.backoff_factor < 1)) {
    bad("the backoff factor must be in (0, 1)", o_.backoff_factor);
  }
  if (o_.growth_interval < 1) {
    bad("the growth interval must be at least 1 step", static_cast<double>(o_.growth_interval));
  }
}

LossScaler LossScaler::for_precision(Precision p, const LossScalerOptions& options) {
  return LossScaler(p == Precision::kFp16, options);
}

bool LossScaler::update(bool found_inf) {
  if (!enabled_) return !found_inf;
  if (found_inf) {
    scale_ *= o_.backoff_factor;
    growth_tracker_ = 0;
    ++skipped_;
    return false;
  }
  if (++growth_tracker_ == o_.growth_interval) {
    // GradScaler keeps the scale when growing would overflow it.
    const float grown = scale_ * o_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;
    growth_tracker_ = 0;
  }
  return true;
}

nlohmann::json LossScaler::state() const {
  if (!enabled_) return nlohmann::json::object();
  return {{"scale", scale_}, {"growth_tracker", growth_tracker_}};
}

void LossScaler::restore(const nlohmann::json& state) {
  if (!enabled_ || !state.is_object() || !state.contains("scale")) return;
  scale_ = state.at("scale").get<float>();
  growth_tracker_ = state.value("growth_tracker", int64_t{0});
}

}  // namespace cohort::train

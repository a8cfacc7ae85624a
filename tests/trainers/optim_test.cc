// Optimisers against PyTorch's update formulas written out in double, the clipping factor and the
// learning-rate schedule.
#include "cohort/train/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cohort/train/schedule.h"
#include "test_util.h"

namespace cohort::train {
namespace {

using testing::expect_close;
using testing::random_vector;

// torch.optim.SGD's update (1.13, dampening 0), in double, for `steps` steps.
std::vector<float> torch_sgd(std::vector<float> p0, const SgdParams& hp, float scale, int steps) {
  const size_t n = p0.size();
  std::vector<double> rp(p0.begin(), p0.end()), rbuf(n, 0.0);
  for (int step = 0; step < steps; ++step) {
    const auto g = random_vector(n, 100 + step);
    for (size_t i = 0; i < n; ++i) {
      const double d = scale * double(g[i]) + hp.weight_decay * rp[i];
      rbuf[i] = step == 0 ? d : hp.momentum * rbuf[i] + d;  // torch: buf = clone(d) at first
      rp[i] -= hp.lr * (hp.nesterov ? d + hp.momentum * rbuf[i] : rbuf[i]);
    }
  }
  return std::vector<float>(rp.begin(), rp.end());
}

TEST(Sgd, MatchesTorchFormulaOverSeveralSteps) {
  const size_t n = 37;
  const float scale = 0.5f;
  for (const bool nesterov : {false, true}) {
    const SgdParams hp{0.05f, 0.9f, 0.01f, nesterov};
    auto p = random_vector(n, 1), buf = std::vector<float>(n, 0.0f);
    const auto expected = torch_sgd(p, hp, scale, 5);
    for (int step = 0; step < 5; ++step) {
      const auto g = random_vector(n, 100 + step);
      sgd_step(p.data(), buf.data(), g.data(), n, hp, scale);
    }
    EXPECT_TRUE(expect_close(p, expected, 1e-6, 1e-5)) << "nesterov " << nesterov;
  }
  // The two rules differ, so the check above tells them apart.
  const auto p = random_vector(n, 1);
  EXPECT_FALSE(expect_close(torch_sgd(p, {0.05f, 0.9f, 0.01f, false}, scale, 5),
                            torch_sgd(p, {0.05f, 0.9f, 0.01f, true}, scale, 5), 1e-6, 1e-5));
}

TEST(WeightAverage, FollowsTheFormulaAndWarmsUp) {
  const size_t n = 29;
  auto avg = random_vector(n, 3);
  std::vector<double> ref(avg.begin(), avg.end());
  for (int64_t step = 0; step < 4; ++step) {
    const auto x = random_vector(n, 200 + step);
    const float d = ema_decay_at(0.98f, step);
    ema_update(avg.data(), x.data(), n, d);
    for (size_t i = 0; i < n; ++i) ref[i] = d * ref[i] + (1.0 - d) * x[i];
  }
  EXPECT_TRUE(expect_close(avg, std::vector<float>(ref.begin(), ref.end()), 1e-6, 1e-5));
  // The first update keeps a tenth of the start; the decay then rises to the target and stays.
  EXPECT_FLOAT_EQ(ema_decay_at(0.98f, 0), 0.1f);
  EXPECT_FLOAT_EQ(ema_decay_at(0.98f, 10), 11.0f / 20.0f);
  EXPECT_FLOAT_EQ(ema_decay_at(0.98f, 440), 0.98f);
  EXPECT_FLOAT_EQ(ema_decay_at(0.98f, 100000), 0.98f);
  EXPECT_FLOAT_EQ(ema_decay_at(0.5f, 0), 0.1f);
  EXPECT_FLOAT_EQ(ema_decay_at(0.5f, 20), 0.5f);
}

TEST(AdamW, MatchesTorchFormulaOverSeveralSteps) {
  const size_t n = 41;
  auto p = random_vector(n, 2);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  AdamWParams hp{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  const float scale = 0.7f;
  for (int t = 1; t <= 6; ++t) {
    auto g = random_vector(n, 200 + t);
    adamw_step(p.data(), m.data(), v.data(), g.data(), n, t, hp, scale);
    const double bc1 = 1 - std::pow(0.9, t), bc2 = 1 - std::pow(0.95, t);
    for (size_t i = 0; i < n; ++i) {
      const double gi = scale * double(g[i]);
      rp[i] *= 1 - 1e-2 * 0.1;
      rm[i] = 0.9 * rm[i] + 0.1 * gi;
      rv[i] = 0.95 * rv[i] + 0.05 * gi * gi;
      rp[i] -= 1e-2 / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + 1e-8);
    }
  }
  EXPECT_TRUE(expect_close(p, std::vector<float>(rp.begin(), rp.end()), 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(m, std::vector<float>(rm.begin(), rm.end()), 1e-7, 1e-5));
}

TEST(AdamW, ZeroWeightDecayLeavesParamsUndecayed) {
  std::vector<float> p = {1.0f}, m = {0.0f}, v = {0.0f}, g = {0.0f};
  AdamWParams hp;
  hp.weight_decay = 0.0f;
  adamw_step(p.data(), m.data(), v.data(), g.data(), 1, 1, hp);
  EXPECT_EQ(p[0], 1.0f);
  hp.weight_decay = 0.1f;
  adamw_step(p.data(), m.data(), v.data(), g.data(), 1, 2, hp);
  EXPECT_FLOAT_EQ(p[0], 1.0f - hp.lr * 0.1f);
}

TEST(GradClip, ScaleAndSumOfSquares) {
  std::vector<float> g(10001, 0.01f);
  g[5] = 3.0f;
  const double ss = sum_squares(g.data(), g.size());
  double ref = 0;
  for (float x : g) ref += double(x) * x;
  EXPECT_NEAR(ss, ref, 1e-12 * ref);  // double accumulation
  EXPECT_FLOAT_EQ(clip_scale(std::sqrt(ss), 1.0f),
                  static_cast<float>(1.0 / (std::sqrt(ss) + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);  // disabled
}

TEST(CosineSchedule, WarmupPeakDecayAndFloor) {
  const float max_lr = 6e-4f, min_lr = 6e-5f;
  EXPECT_FLOAT_EQ(cosine_lr(0, 10, 100, max_lr, min_lr), max_lr / 10);
  EXPECT_FLOAT_EQ(cosine_lr(9, 10, 100, max_lr, min_lr), max_lr);
  EXPECT_FLOAT_EQ(cosine_lr(10, 10, 100, max_lr, min_lr), max_lr);
  EXPECT_NEAR(cosine_lr(55, 10, 100, max_lr, min_lr), (max_lr + min_lr) / 2, 1e-9);
  EXPECT_FLOAT_EQ(cosine_lr(100, 10, 100, max_lr, min_lr), min_lr);
  EXPECT_FLOAT_EQ(cosine_lr(500, 10, 100, max_lr, min_lr), min_lr);
  // Monotone after the warm-up.
  for (int s = 10; s < 100; ++s) {
    EXPECT_GE(cosine_lr(s, 10, 100, max_lr, min_lr), cosine_lr(s + 1, 10, 100, max_lr, min_lr));
  }
}

}  // namespace
}  // namespace cohort::train

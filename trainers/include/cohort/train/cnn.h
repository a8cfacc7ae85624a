// cohort::train::FmnistCnn: the Fashion-MNIST CNN of cohort-train-fmnist.
//
//   conv(1->32, 3x3, pad 1) + ReLU + maxpool 2 -> conv(32->64, 3x3, pad 1) + ReLU + maxpool 2
//   -> flatten -> linear(3136->128) + ReLU -> linear(128->10) -> softmax cross-entropy (mean).
//
// The same network as the PyTorch twin in scripts/bench/train/torch_fmnist.py. Layout differences
// (the maths is identical): activations are NHWC, conv weights (OC, 3, 3, C) instead of
// (OC, C, 3, 3), and fc1's 3136 inputs are in (h, w, c) order instead of (c, h, w). Each pooling
// runs before its ReLU, which gives exactly the same outputs and gradients on a quarter of the
// elements (max and ReLU commute).
//
// Parameters and gradients each live in one device buffer (layout()); backward accumulates into
// the gradients and zero_grad() clears them. Thread safety: none.
#pragma once

#include <cstdint>

#include "cohort/train/device.h"
#include "cohort/train/param_layout.h"

namespace cohort::train {

class FmnistCnn {
 public:
  static constexpr int kImage = 28;
  static constexpr int kPixels = kImage * kImage;
  static constexpr int kClasses = 10;

  // Allocates parameters, gradients and activations for batches of up to `max_batch` images on
  // `dev` (which must outlive the model). Parameters start at zero; call init().
  FmnistCnn(Device& dev, int max_batch);
  FmnistCnn(const FmnistCnn&) = delete;
  FmnistCnn& operator=(const FmnistCnn&) = delete;

  const ParamLayout& layout() const { return layout_; }
  size_t num_params() const { return layout_.size(); }
  float* params() { return params_.get(); }
  // num_params() + 1 floats: the gradients, then one free slot that a trainer may fill to reduce a
  // scalar (the loss) in the same allreduce. zero_grad() clears it too.
  float* grads() { return grads_.get(); }
  int max_batch() const { return max_batch_; }

  // PyTorch's default initialisation of Conv2d and Linear (weights and biases uniform in
  // +-1/sqrt(fan_in)), drawn from Rng(seed) in layout order.
  void init(uint64_t seed);

  // Runs the network on `images` (B, 28, 28, 1), normalised, and `labels` (B), both on the device.
  // Returns the mean cross-entropy; keeps the activations for backward(), which also reads
  // `images` and `labels` again. REQUIRES: B <= max_batch.
  float forward(const float* images, const int32_t* labels, int B);

  // The softmax probabilities (B, 10) of the last forward, on the device.
  const float* probs() const { return probs_; }

  // grads += d(loss_scale * mean loss)/d(params) for the last forward.
  void backward(float loss_scale = 1.0f);

  void zero_grad();

  // What backward() branches on, for tests: the max-pool choices of the last forward and the ReLU
  // outputs whose signs gate the gradients (after pool 1, pool 2 and fc1), all on the device.
  // Float rounding can put a ReLU input or a max-pool near-tie on either side, and then a handful
  // of values send hundreds of gradients another way; tests copy one model's branches into
  // another's between forward() and backward() to compare two devices on the same side
  // (tests/trainers/cuda_test.cc, models_test.cc).
  struct Branches {
    uint8_t* pool_choices;
    size_t pool_bytes;
    float* relu_outputs[3];
    size_t relu_floats[3];
  };
  Branches TEST_branches();

 private:
  Device& dev_;
  int max_batch_;
  int batch_ = 0;
  ParamLayout layout_;
  DeviceBuffer<float> params_, grads_;
  // Offsets of each tensor in the buffers.
  size_t conv1_w_, conv1_b_, conv2_w_, conv2_b_, fc1_w_, fc1_b_, fc2_w_, fc2_b_;
  // Activations (sized for max_batch) and their gradients.
  DeviceBuffer<float> acts_;
  DeviceBuffer<uint8_t> argmax_;
  float *col_, *c1_, *p1_, *c2_, *p2_, *h1_, *logits_, *probs_, *losses_;
  float *dc1_, *dp1_, *dc2_, *dp2_, *dh1_, *dlogits_;
  uint8_t *arg1_, *arg2_;
  const int32_t* labels_ = nullptr;
  const float* images_ = nullptr;
};

}  // namespace cohort::train

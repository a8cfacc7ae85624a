#include "cohort/train/cnn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cohort/train/rng.h"

namespace cohort::train {
namespace {
constexpr int kC1 = 32, kC2 = 64, kHidden = 128;
constexpr int kH1 = 28, kH2 = 14, kH3 = 7;
constexpr int kFlat = kH3 * kH3 * kC2;  // 3136

Conv2dShape conv1_shape(int B) {
  return Conv2dShape{B, kH1, kH1, 1, kC1, 3, 1};
}
Conv2dShape conv2_shape(int B) {
  return Conv2dShape{B, kH2, kH2, kC1, kC2, 3, 1};
}
}  // namespace

FmnistCnn::FmnistCnn(Device& dev, int max_batch) : dev_(dev), max_batch_(max_batch) {
  conv1_w_ = layout_.add("conv1.weight", {kC1, 3, 3, 1}, true);
  conv1_b_ = layout_.add("conv1.bias", {kC1}, false);
  conv2_w_ = layout_.add("conv2.weight", {kC2, 3, 3, kC1}, true);
  conv2_b_ = layout_.add("conv2.bias", {kC2}, false);
  fc1_w_ = layout_.add("fc1.weight", {kHidden, kFlat}, true);
  fc1_b_ = layout_.add("fc1.bias", {kHidden}, false);
  fc2_w_ = layout_.add("fc2.weight", {kClasses, kHidden}, true);
  fc2_b_ = layout_.add("fc2.bias", {kClasses}, false);
  params_ = DeviceBuffer<float>(dev, layout_.size());
  grads_ = DeviceBuffer<float>(dev, layout_.size() + 1);
  dev.zero(params_.get(), layout_.size() * sizeof(float));
  dev.zero(grads_.get(), (layout_.size() + 1) * sizeof(float));

  // One allocation carved into the activations; every piece starts on a 16-float boundary.
  const size_t B = static_cast<size_t>(max_batch);
  const size_t col = std::max(dev.conv2d_scratch_floats(conv1_shape(max_batch)),
                              dev.conv2d_scratch_floats(conv2_shape(max_batch)));
  const size_t sizes[] = {
      col,                  // col (im2col scratch of both convolutions)
      B * kH1 * kH1 * kC1,  // c1
      B * kH2 * kH2 * kC1,  // p1
      B * kH2 * kH2 * kC2,  // c2
      B * kFlat,            // p2
      B * kHidden,          // h1
      B * kClasses,         // logits
      B * kClasses,         // probs
      B,                    // losses
      B * kH1 * kH1 * kC1,  // dc1
      B * kH2 * kH2 * kC1,  // dp1
      B * kH2 * kH2 * kC2,  // dc2
      B * kFlat,            // dp2
      B * kHidden,          // dh1
      B * kClasses,         // dlogits
  };
  size_t total = 0;
  for (size_t s : sizes) total += (s + 15) / 16 * 16;
  acts_ = DeviceBuffer<float>(dev, total);
  float* p = acts_.get();
  float** slots[] = {&col_,    &c1_,  &p1_,  &c2_,  &p2_,  &h1_,  &logits_, &probs_,
                     &losses_, &dc1_, &dp1_, &dc2_, &dp2_, &dh1_, &dlogits_};
  for (size_t i = 0; i < std::size(sizes); ++i) {
    *slots[i] = p;
    p += (sizes[i] + 15) / 16 * 16;
  }
  const size_t a1 = (B * kH2 * kH2 * kC1 + 63) / 64 * 64;
  argmax_ = DeviceBuffer<uint8_t>(dev, a1 + B * kFlat);
  arg1_ = argmax_.get();
  arg2_ = argmax_.get() + a1;
}

void FmnistCnn::init(uint64_t seed) {
  Rng rng(seed);
  std::vector<float> host(layout_.size(), 0.0f);
  // PyTorch: kaiming_uniform_(a=sqrt(5)) for weights gives bound 1/sqrt(fan_in); biases use the
  // same bound. fan_in of a tensor is the product of its non-leading dimensions.
  for (const ParamTensor& t : layout_.tensors()) {
    const bool is_bias = t.shape.size() == 1;
    const ParamTensor& weight = is_bias ? layout_.tensors()[&t - &layout_.tensors()[0] - 1] : t;
    int64_t fan_in = 1;
    for (size_t i = 1; i < weight.shape.size(); ++i) fan_in *= weight.shape[i];
    const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
    for (size_t i = 0; i < t.numel; ++i) host[t.offset + i] = rng.uniform(-bound, bound);
  }
  dev_.upload(params_.get(), host.data(), host.size() * sizeof(float));
}

float FmnistCnn::forward(const float* images, const int32_t* labels, int B) {
  batch_ = B;
  labels_ = labels;
  const float* w = params_.get();
  const Conv2dShape s1 = conv1_shape(B), s2 = conv2_shape(B);
  images_ = images;
  dev_.conv2d_forward(c1_, col_, images, w + conv1_w_, w + conv1_b_, s1);
  dev_.maxpool2x2_forward(p1_, arg1_, c1_, B, kH1, kH1, kC1);
  dev_.relu_forward(p1_, p1_, static_cast<size_t>(B) * kH2 * kH2 * kC1);
  dev_.conv2d_forward(c2_, col_, p1_, w + conv2_w_, w + conv2_b_, s2);
  dev_.maxpool2x2_forward(p2_, arg2_, c2_, B, kH2, kH2, kC2);
  dev_.relu_forward(p2_, p2_, static_cast<size_t>(B) * kFlat);
  dev_.linear_forward(h1_, p2_, w + fc1_w_, w + fc1_b_, B, kFlat, kHidden);
  dev_.relu_forward(h1_, h1_, static_cast<size_t>(B) * kHidden);
  dev_.linear_forward(logits_, h1_, w + fc2_w_, w + fc2_b_, B, kHidden, kClasses);
  dev_.softmax_xent_forward(losses_, probs_, logits_, labels, B, kClasses);
  std::vector<float> losses(B);
  dev_.download(losses.data(), losses_, B * sizeof(float));
  double sum = 0.0;
  for (float l : losses) sum += l;
  return static_cast<float>(sum / B);
}

void FmnistCnn::backward(float loss_scale) {
  const int B = batch_;
  const float* w = params_.get();
  float* g = grads_.get();
  dev_.softmax_xent_backward(dlogits_, probs_, labels_, loss_scale / B, B, kClasses);
  dev_.linear_backward(dh1_, g + fc2_w_, g + fc2_b_, dlogits_, h1_, w + fc2_w_, B, kHidden,
                       kClasses);
  dev_.relu_backward(dh1_, dh1_, h1_, static_cast<size_t>(B) * kHidden);
  dev_.linear_backward(dp2_, g + fc1_w_, g + fc1_b_, dh1_, p2_, w + fc1_w_, B, kFlat, kHidden);
  dev_.relu_backward(dp2_, dp2_, p2_, static_cast<size_t>(B) * kFlat);
  dev_.maxpool2x2_backward(dc2_, dp2_, arg2_, B, kH2, kH2, kC2);
  dev_.conv2d_backward(dp1_, g + conv2_w_, g + conv2_b_, dc2_, p1_, col_, w + conv2_w_,
                       conv2_shape(B));
  dev_.relu_backward(dp1_, dp1_, p1_, static_cast<size_t>(B) * kH2 * kH2 * kC1);
  dev_.maxpool2x2_backward(dc1_, dp1_, arg1_, B, kH1, kH1, kC1);
  dev_.conv2d_backward(nullptr, g + conv1_w_, g + conv1_b_, dc1_, images_, col_, w + conv1_w_,
                       conv1_shape(B));
}

FmnistCnn::Branches FmnistCnn::TEST_branches() {
  const size_t B = static_cast<size_t>(batch_);
  return Branches{argmax_.get(),
                  argmax_.size(),
                  {p1_, p2_, h1_},
                  {B * kH2 * kH2 * kC1, B * kFlat, B * kHidden}};
}

void FmnistCnn::zero_grad() {
  dev_.zero(grads_.get(), (layout_.size() + 1) * sizeof(float));
}

}  // namespace cohort::train

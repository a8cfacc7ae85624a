// CpuDevice: the Device whose methods are the CPU reference layers (layers/) and optimisers; GEMMs
// in tf32, bf16 or fp16 are emulated (operands rounded in software, sums in fp32).
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "cohort/train/blas.h"
#include "cohort/train/device.h"
#include "cohort/train/layers/attention.h"
#include "cohort/train/layers/conv2d.h"
#include "cohort/train/layers/embedding.h"
#include "cohort/train/layers/gelu.h"
#include "cohort/train/layers/layernorm.h"
#include "cohort/train/layers/linear.h"
#include "cohort/train/layers/maxpool.h"
#include "cohort/train/layers/relu.h"
#include "cohort/train/layers/residual.h"
#include "cohort/train/layers/softmax_xent.h"
#include "cohort/train/optim.h"

namespace cohort::train {
namespace {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : threads_(configure_blas_threads(threads)) {}

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  std::string describe() const override {
    return "cpu (OpenBLAS " + std::string(blas_core_name()) + ", " + std::to_string(threads_) +
           (threads_ == 1 ? " thread)" : " threads)");
  }

  void* alloc(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }
  void zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void synchronize() override {}

  void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int N,
                      int C, int OC) override {
    train::linear_forward(out, inp, weight, bias, N, C, OC, precision_);
  }
  void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, const float* weight, int N, int C, int OC) override {
    train::linear_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC, precision_);
  }
  void conv2d_forward(float* out, float* col, const float* inp, const float* weight,
                      const float* bias, const Conv2dShape& s) override {
    train::conv2d_forward(out, col, inp, weight, bias, s, precision_);
  }
  void conv2d_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                       const float* inp, float* col, const float* weight,
                       const Conv2dShape& s) override {
    train::conv2d_backward(dinp, dweight, dbias, dout, inp, col, weight, s, precision_);
  }
  size_t conv2d_scratch_floats(const Conv2dShape& s) const override {
    return train::conv2d_scratch_floats(s);
  }
  void maxpool2x2_forward(float* out, uint8_t* argmax, const float* inp, int B, int H, int W,
                          int C) override {
    train::maxpool2x2_forward(out, argmax, inp, B, H, W, C);
  }
  void maxpool2x2_backward(float* dinp, const float* dout, const uint8_t* argmax, int B, int H,
                           int W, int C) override {
    train::maxpool2x2_backward(dinp, dout, argmax, B, H, W, C);
  }
  void relu_forward(float* out, const float* inp, size_t n) override {
    train::relu_forward(out, inp, n);
  }
  void relu_backward(float* dinp, const float* dout, const float* out, size_t n) override {
    train::relu_backward(dinp, dout, out, n);
  }
  void gelu_forward(float* out, const float* inp, size_t n) override {
    train::gelu_forward(out, inp, n);
  }
  void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) override {
    train::gelu_backward(dinp, inp, dout, n);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                         const float* weight, const float* bias, int N, int C) override {
    train::layernorm_forward(out, mean, rstd, inp, weight, bias, N, C);
  }
  void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, const float* mean,
                          const float* rstd, int N, int C) override {
    train::layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  }
  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int B, int T, int C) override {
    train::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens, int B,
                          int T, int C, int V) override {
    train::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, V);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C,
                         int NH) override {
    train::attention_forward(out, att, qkv, B, T, C, NH, precision_);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv,
                          const float* att, int B, int T, int C, int NH) override {
    train::attention_backward(dqkv, datt, dout, qkv, att, B, T, C, NH, precision_);
  }
  size_t attention_scratch_floats(int, int T, int) const override {
    return static_cast<size_t>(T) * T;
  }
  void softmax_xent_forward(float* losses, float* probs, const float* logits,
                            const int32_t* targets, int N, int V) override {
    train::softmax_xent_forward(losses, probs, logits, targets, N, V);
  }
  void softmax_xent_backward(float* dlogits, const float* probs, const int32_t* targets,
                             float dloss, int N, int V) override {
    train::softmax_xent_backward(dlogits, probs, targets, dloss, N, V);
  }
  void residual_forward(float* out, const float* a, const float* b, size_t n) override {
    train::residual_forward(out, a, b, n);
  }
  void sgd_step(float* params, float* buf, const float* grads, size_t n, const SgdParams& p,
                float grad_scale) override {
    train::sgd_step(params, buf, grads, n, p, grad_scale);
  }
  void adamw_step(float* params, float* m, float* v, const float* grads, size_t n, int64_t t,
                  const AdamWParams& p, float grad_scale) override {
    train::adamw_step(params, m, v, grads, n, t, p, grad_scale);
  }
  void ema_update(float* average, const float* x, size_t n, float decay) override {
    train::ema_update(average, x, n, decay);
  }
  double sum_squares(const float* x, size_t n) override { return train::sum_squares(x, n); }

 private:
  int threads_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  return std::make_unique<CpuDevice>(threads);
}

}  // namespace cohort::train

// Every CUDA layer against its CPU reference (forward and backward), the models and a few trainer
// steps on the GPU against the CPU, the GPT's reproducibility on the GPU, and the Worker's choice
// of NCCL or the CPU group on this machine's GPU. Label `gpu`; skipped when no CUDA device is
// visible, failed instead under COHORT_REQUIRE_GPU=1 (scripts/gpu_check.sh).
// Tolerances: element-wise kernels 1e-6 abs / 1e-5 rel; anything with a GEMM or a reduction
// (summation order differs from OpenBLAS) 1e-5 abs / 1e-4 rel forward, 1e-4 / 1e-3 backward; the
// embedding, max-pool, ReLU and residual exactly (0 / 0). Each comparison is recorded as a test
// property "<tensor>" = the worst |actual - reference| / (abs + rel |reference|) over its
// elements (1 is the tolerance's edge), which gpu_check reports per layer.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../common/require_gpu.h"
#include "cohort/error.h"
#include "cohort/rdzv/memory_store.h"
#include "cohort/train/cnn.h"
#include "cohort/train/device.h"
#include "cohort/train/fmnist_trainer.h"
#include "cohort/train/gpt.h"
#include "cohort/train/gpt_trainer.h"
#include "cohort/train/gradient_path.h"
#include "cohort/train/layers/attention.h"
#include "cohort/train/layers/conv2d.h"
#include "cohort/train/layers/linear.h"
#include "cohort/train/precision.h"
#include "cohort/train/worker.h"
#include "cuda_rounding_check.h"
#include "test_util.h"
#include "trainer_fixture.h"

#ifdef COHORT_TRAIN_HAVE_RUNTIME
#include "cohort/context.h"
#endif

namespace cohort::train {
namespace {

using testing::expect_close;
using testing::random_vector;

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    COHORT_SKIP_UNLESS_GPU(cuda_device_available());
    cpu_ = make_cpu_device(1);
    gpu_ = make_cuda_device(0);
  }

  // EXPECT that `actual` is within (abs_tol, rel_tol) of `reference`, and record the worst
  // element's share of its tolerance as the test property `name`.
  void check(const std::string& name, const std::vector<float>& actual,
             const std::vector<float>& reference, double abs_tol, double rel_tol) {
    EXPECT_TRUE(expect_close(actual, reference, abs_tol, rel_tol)) << name;
    double worst = 0;
    for (size_t i = 0; i < actual.size() && i < reference.size(); ++i) {
      const double err = std::fabs(double(actual[i]) - reference[i]);
      const double tol = abs_tol + rel_tol * std::fabs(double(reference[i]));
      const double share = tol > 0 ? err / tol : (err == 0 ? 0 : INFINITY);
      if (!(share <= worst)) worst = share;  // NaN counts as the worst
    }
    double& kept = worst_[name];  // loops over shapes record their worst case
    if (!(worst <= kept)) kept = worst;
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", kept);
    RecordProperty(name, text);
  }

  // A device copy of `host`, owned by the fixture.
  template <typename T>
  T* up(const std::vector<T>& host) {
    auto buf = std::make_shared<DeviceBuffer<T>>(*gpu_, host.size());
    gpu_->upload(buf->get(), host.data(), host.size() * sizeof(T));
    keep_.push_back(buf);
    return buf->get();
  }
  std::vector<float> down(const float* p, size_t n) {
    std::vector<float> h(n);
    gpu_->download(h.data(), p, n * sizeof(float));
    return h;
  }

  std::unique_ptr<Device> cpu_, gpu_;
  std::vector<std::shared_ptr<void>> keep_;
  std::map<std::string, double> worst_;
};

TEST_F(CudaVsCpu, Linear) {
  const int N = 37, C = 29, OC = 13;
  auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  auto d = random_vector(N * OC, 4);
  for (bool with_bias : {true, false}) {
    std::vector<float> out(N * OC), dx(N * C), dw(OC * C, 0.5f), db(OC, 0.25f);
    cpu_->linear_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
    cpu_->linear_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
    float* gout = up(std::vector<float>(N * OC));
    float* gdx = up(std::vector<float>(N * C));
    float* gdw = up(std::vector<float>(OC * C, 0.5f));
    float* gdb = up(std::vector<float>(OC, 0.25f));
    gpu_->linear_forward(gout, up(x), up(w), with_bias ? up(b) : nullptr, N, C, OC);
    gpu_->linear_backward(gdx, gdw, gdb, up(d), up(x), up(w), N, C, OC);
    check("forward", down(gout, out.size()), out, 1e-5, 1e-4);
    check("dinp", down(gdx, dx.size()), dx, 1e-4, 1e-3);
    check("dweight", down(gdw, dw.size()), dw, 1e-4, 1e-3);
    check("dbias", down(gdb, db.size()), db, 1e-4, 1e-3);
  }
}

TEST_F(CudaVsCpu, Conv2d) {
  for (const Conv2dShape s :
       {Conv2dShape{4, 28, 28, 1, 32, 3, 1}, Conv2dShape{3, 14, 14, 32, 64, 3, 1},
        Conv2dShape{2, 7, 9, 5, 4, 3, 0}}) {
    const size_t in_n = size_t(s.B) * s.H * s.W * s.C, out_n = size_t(s.col_rows()) * s.OC;
    const size_t col_n = cpu_->conv2d_scratch_floats(s), gcol_n = gpu_->conv2d_scratch_floats(s);
    auto x = random_vector(in_n, 5), w = random_vector(size_t(s.OC) * s.col_cols(), 6);
    auto b = random_vector(s.OC, 7), d = random_vector(out_n, 8);
    std::vector<float> out(out_n), col(col_n), dx(in_n), dw(w.size(), 0.0f), db(s.OC, 0.0f);
    cpu_->conv2d_forward(out.data(), col.data(), x.data(), w.data(), b.data(), s);
    cpu_->conv2d_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), col.data(), w.data(),
                          s);
    float* gout = up(std::vector<float>(out_n));
    float* gcol = up(std::vector<float>(gcol_n));
    float* gdx = up(std::vector<float>(in_n));
    float* gdw = up(std::vector<float>(w.size(), 0.0f));
    float* gdb = up(std::vector<float>(s.OC, 0.0f));
    float* gw = up(w);
    float* gx = up(x);
    gpu_->conv2d_forward(gout, gcol, gx, gw, up(b), s);
    check("forward", down(gout, out_n), out, 1e-5, 1e-4);
    gpu_->conv2d_backward(gdx, gdw, gdb, up(d), gx, gcol, gw, s);
    check("dinp", down(gdx, in_n), dx, 1e-4, 1e-3);
    check("dweight", down(gdw, dw.size()), dw, 1e-3, 1e-3);
    check("dbias", down(gdb, db.size()), db, 1e-3, 1e-3);
  }
}

TEST_F(CudaVsCpu, MaxPoolReluGeluResidual) {
  const int B = 3, H = 14, W = 15, C = 32;  // odd width: floor mode
  const size_t n = size_t(B) * H * W * C, on = size_t(B) * (H / 2) * (W / 2) * C;
  auto x = random_vector(n, 9, -3.0f, 3.0f), d = random_vector(on, 10), dn = random_vector(n, 11);
  std::vector<float> out(on), dx(n);
  std::vector<uint8_t> arg(on);
  cpu_->maxpool2x2_forward(out.data(), arg.data(), x.data(), B, H, W, C);
  cpu_->maxpool2x2_backward(dx.data(), d.data(), arg.data(), B, H, W, C);
  float* gout = up(std::vector<float>(on));
  uint8_t* garg = up(std::vector<uint8_t>(on));
  float* gdx = up(std::vector<float>(n));
  gpu_->maxpool2x2_forward(gout, garg, up(x), B, H, W, C);
  gpu_->maxpool2x2_backward(gdx, up(d), garg, B, H, W, C);
  check("maxpool.forward", down(gout, on), out, 0, 0);
  check("maxpool.dinp", down(gdx, n), dx, 0, 0);

  std::vector<float> r(n), dr(n), g(n), dg(n), s(n);
  cpu_->relu_forward(r.data(), x.data(), n);
  cpu_->relu_backward(dr.data(), dn.data(), r.data(), n);
  cpu_->gelu_forward(g.data(), x.data(), n);
  cpu_->gelu_backward(dg.data(), x.data(), dn.data(), n);
  cpu_->residual_forward(s.data(), x.data(), dn.data(), n);
  float* gx = up(x);
  float* gdn = up(dn);
  float* t1 = up(std::vector<float>(n));
  float* t2 = up(std::vector<float>(n));
  gpu_->relu_forward(t1, gx, n);
  gpu_->relu_backward(t2, gdn, t1, n);
  check("relu.forward", down(t1, n), r, 0, 0);
  check("relu.dinp", down(t2, n), dr, 0, 0);
  gpu_->gelu_forward(t1, gx, n);
  gpu_->gelu_backward(t2, gx, gdn, n);
  check("gelu.forward", down(t1, n), g, 1e-6, 1e-5);
  check("gelu.dinp", down(t2, n), dg, 1e-6, 1e-5);
  gpu_->residual_forward(t1, gx, gdn, n);
  check("residual.forward", down(t1, n), s, 0, 0);
}

TEST_F(CudaVsCpu, LayerNorm) {
  const int N = 300, C = 128;
  auto x = random_vector(N * C, 12, -2, 2), w = random_vector(C, 13, 0.5f, 1.5f);
  auto b = random_vector(C, 14), d = random_vector(N * C, 15);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C, 1.0f), dw(C, 0.0f), db(C, 0.0f);
  cpu_->layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  cpu_->layernorm_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(),
                           mean.data(), rstd.data(), N, C);
  float* gout = up(std::vector<float>(N * C));
  float* gmean = up(std::vector<float>(N));
  float* grstd = up(std::vector<float>(N));
  float* gdx = up(std::vector<float>(N * C, 1.0f));
  float* gdw = up(std::vector<float>(C, 0.0f));
  float* gdb = up(std::vector<float>(C, 0.0f));
  float* gx = up(x);
  float* gw = up(w);
  gpu_->layernorm_forward(gout, gmean, grstd, gx, gw, up(b), N, C);
  gpu_->layernorm_backward(gdx, gdw, gdb, up(d), gx, gw, gmean, grstd, N, C);
  check("forward", down(gout, out.size()), out, 1e-5, 1e-4);
  check("mean", down(gmean, N), mean, 1e-6, 1e-4);
  check("rstd", down(grstd, N), rstd, 1e-6, 1e-4);
  check("dinp", down(gdx, dx.size()), dx, 1e-4, 1e-3);
  check("dweight", down(gdw, C), dw, 1e-4, 1e-3);
  check("dbias", down(gdb, C), db, 1e-4, 1e-3);
}

TEST_F(CudaVsCpu, Embedding) {
  const int B = 8, T = 64, C = 96, V = 256;
  std::vector<int32_t> tok(B * T);
  // Half the positions on 11 tokens that repeat often, the rest anywhere in the vocabulary.
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int32_t>(i % 2 ? (i * 37) % 11 : (i * 101) % V);
  }
  auto wte = random_vector(V * C, 16), wpe = random_vector(T * C, 17),
       d = random_vector(B * T * C, 18);
  // Gradients accumulate: start from non-zero values.
  const std::vector<float> dwte0 = random_vector(V * C, 26), dwpe0 = random_vector(T * C, 27);
  std::vector<float> out(B * T * C), dwte = dwte0, dwpe = dwpe0;
  cpu_->embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  cpu_->embedding_backward(dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C, V);
  float* gout = up(std::vector<float>(out.size()));
  float* gdwte = up(dwte0);
  float* gdwpe = up(dwpe0);
  int32_t* gtok = up(tok);
  gpu_->embedding_forward(gout, gtok, up(wte), up(wpe), B, T, C);
  gpu_->embedding_backward(gdwte, gdwpe, up(d), gtok, B, T, C, V);
  check("forward", down(gout, out.size()), out, 0, 0);
  // The backward adds in the CPU's order, without atomics: the same bits (cuda/embedding_grad.h).
  check("dwte", down(gdwte, dwte.size()), dwte, 0, 0);
  check("dwpe", down(gdwpe, dwpe.size()), dwpe, 0, 0);
}

TEST_F(CudaVsCpu, Attention) {
  for (const int T : {7, 64, 128}) {
    const int B = 3, C = 64, NH = 4;
    auto qkv = random_vector(size_t(B) * T * 3 * C, 19, -1, 1),
         d = random_vector(size_t(B) * T * C, 20);
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv(qkv.size());
    std::vector<float> scratch(cpu_->attention_scratch_floats(B, T, NH));
    cpu_->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    cpu_->attention_backward(dqkv.data(), scratch.data(), d.data(), qkv.data(), att.data(), B, T, C,
                             NH);
    float* gout = up(std::vector<float>(out.size()));
    float* gatt = up(std::vector<float>(att.size()));
    float* gdqkv = up(std::vector<float>(qkv.size()));
    float* gscratch = up(std::vector<float>(gpu_->attention_scratch_floats(B, T, NH)));
    float* gqkv = up(qkv);
    gpu_->attention_forward(gout, gatt, gqkv, B, T, C, NH);
    gpu_->attention_backward(gdqkv, gscratch, up(d), gqkv, gatt, B, T, C, NH);
    check("forward", down(gout, out.size()), out, 1e-5, 1e-4);
    check("att", down(gatt, att.size()), att, 1e-6, 1e-4);
    check("dqkv", down(gdqkv, dqkv.size()), dqkv, 1e-4, 1e-3);
  }
}

TEST_F(CudaVsCpu, SoftmaxXent) {
  // V = 10 and 33 leave lanes idle or wrap once; the target falls on every lane over the rows.
  for (const int V : {10, 33, 256, 1000}) {
    const int N = 4099;
    auto z = random_vector(size_t(N) * V, 21, -5, 5);
    std::vector<int32_t> y(N);
    for (int i = 0; i < N; ++i) y[i] = (i * 7) % V;
    std::vector<float> loss(N), probs(z.size()), dz(z.size());
    cpu_->softmax_xent_forward(loss.data(), probs.data(), z.data(), y.data(), N, V);
    cpu_->softmax_xent_backward(dz.data(), probs.data(), y.data(), 1.0f / N, N, V);
    float* gloss = up(std::vector<float>(N));
    float* gz = up(z);  // probabilities in place, as the GPT does
    int32_t* gy = up(y);
    gpu_->softmax_xent_forward(gloss, gz, gz, gy, N, V);
    check("loss", down(gloss, N), loss, 1e-5, 1e-5);
    check("probs", down(gz, z.size()), probs, 1e-6, 1e-5);
    gpu_->softmax_xent_backward(gz, gz, gy, 1.0f / N, N, V);
    check("dlogits", down(gz, z.size()), dz, 1e-7, 1e-5);
  }
}

TEST_F(CudaVsCpu, OptimisersAndNorm) {
  const size_t n = 100003;
  auto p = random_vector(n, 22), g = random_vector(n, 23);
  std::vector<float> p1 = p, buf(n, 0.1f), p2 = p, m(n, 0.01f), v(n, 0.02f);
  std::vector<float> p3 = p, buf3(n, 0.1f);
  const SgdParams plain{0.05f, 0.9f, 0.01f, false}, nesterov{0.05f, 0.9f, 0.01f, true};
  sgd_step(p1.data(), buf.data(), g.data(), n, plain, 0.5f);
  sgd_step(p3.data(), buf3.data(), g.data(), n, nesterov, 0.5f);
  AdamWParams hp{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  adamw_step(p2.data(), m.data(), v.data(), g.data(), n, 3, hp, 0.7f);
  float* gp1 = up(p);
  float* gbuf = up(std::vector<float>(n, 0.1f));
  float* gp2 = up(p);
  float* gm = up(std::vector<float>(n, 0.01f));
  float* gv = up(std::vector<float>(n, 0.02f));
  float* gg = up(g);
  float* gp3 = up(p);
  float* gbuf3 = up(std::vector<float>(n, 0.1f));
  gpu_->sgd_step(gp1, gbuf, gg, n, plain, 0.5f);
  gpu_->sgd_step(gp3, gbuf3, gg, n, nesterov, 0.5f);
  gpu_->adamw_step(gp2, gm, gv, gg, n, 3, hp, 0.7f);
  check("sgd.params", down(gp1, n), p1, 1e-6, 1e-5);
  check("sgd.momentum", down(gbuf, n), buf, 1e-6, 1e-5);
  check("nesterov.params", down(gp3, n), p3, 1e-6, 1e-5);
  check("nesterov.momentum", down(gbuf3, n), buf3, 1e-6, 1e-5);
  check("adamw.params", down(gp2, n), p2, 1e-6, 1e-5);
  check("adamw.m", down(gm, n), m, 1e-7, 1e-5);
  check("adamw.v", down(gv, n), v, 1e-7, 1e-5);
  const double ref = sum_squares(g.data(), n);
  EXPECT_NEAR(gpu_->sum_squares(gg, n), ref, 1e-5 * ref);
  std::vector<float> avg = p;
  ema_update(avg.data(), g.data(), n, 0.98f);
  float* gavg = up(p);
  gpu_->ema_update(gavg, gg, n, 0.98f);
  check("ema", down(gavg, n), avg, 1e-7, 1e-6);
}

TEST_F(CudaVsCpu, ModelsForwardBackward) {
  // CNN
  {
    const int B = 16;
    FmnistCnn cm(*cpu_, B), gm(*gpu_, B);
    cm.init(1);
    gm.init(1);
    auto x = random_vector(size_t(B) * 784, 24, -1, 2);
    std::vector<int32_t> y(B);
    for (int i = 0; i < B; ++i) y[i] = i % 10;
    const float lc = cm.forward(x.data(), y.data(), B);
    const float lg = gm.forward(up(x), up(y), B);
    EXPECT_NEAR(lg, lc, 1e-5 * lc);
    // The GPU's backward takes the CPU's branches (max-pool choices, ReLU outputs): one of this
    // input's ReLU inputs is 5e-7 from zero, and the side of zero the GPU's rounding puts it on
    // moves 436 gradients by up to 42 times the tolerance (tests/trainers/models_test.cc,
    // FmnistCnn.OneReluInputWithinRoundingOfZeroMovesHundredsOfGradients). How many values
    // differ is recorded: a handful of ReLU outputs and pool choices, none far from zero.
    const FmnistCnn::Branches c = cm.TEST_branches(), g = gm.TEST_branches();
    std::vector<uint8_t> choices(g.pool_bytes);
    gpu_->download(choices.data(), g.pool_choices, g.pool_bytes);
    size_t differing = 0;
    for (size_t i = 0; i < g.pool_bytes; ++i) differing += choices[i] != c.pool_choices[i];
    gpu_->upload(g.pool_choices, c.pool_choices, c.pool_bytes);
    for (int k = 0; k < 3; ++k) {
      const std::vector<float> cpu_out(c.relu_outputs[k], c.relu_outputs[k] + c.relu_floats[k]);
      const std::vector<float> gpu_out = down(g.relu_outputs[k], g.relu_floats[k]);
      for (size_t i = 0; i < cpu_out.size(); ++i) {
        differing += (cpu_out[i] > 0) != (gpu_out[i] > 0);
      }
      gpu_->upload(g.relu_outputs[k], cpu_out.data(), cpu_out.size() * sizeof(float));
    }
    RecordProperty("cnn.branches_differing", std::to_string(differing));
    cm.zero_grad();
    gm.zero_grad();
    cm.backward();
    gm.backward();
    std::vector<float> gc(cm.grads(), cm.grads() + cm.num_params());
    check("cnn.grads", down(gm.grads(), gm.num_params()), gc, 1e-5, 1e-3);
  }
  // GPT
  {
    const GptConfig cfg{256, 64, 2, 4, 64};
    const int B = 4, T = 64;
    Gpt cm(*cpu_, cfg, B), gm(*gpu_, cfg, B);
    cm.init(2);
    gm.init(2);
    std::vector<int32_t> x(B * T), y(B * T);
    for (int i = 0; i < B * T; ++i) x[i] = (i * 31) % 256, y[i] = (i * 17 + 3) % 256;
    const float lc = cm.forward(x.data(), y.data(), B, T);
    const float lg = gm.forward(up(x), up(y), B, T);
    EXPECT_NEAR(lg, lc, 1e-5 * lc);
    cm.zero_grad();
    gm.zero_grad();
    cm.backward();
    gm.backward();
    std::vector<float> gc(cm.grads(), cm.grads() + cm.num_params());
    check("gpt.grads", down(gm.grads(), gm.num_params()), gc, 1e-5, 1e-3);
  }
}

// ---- mixed precision: the GPU against the CPU's emulation (precision.h) ----------------------
//
// Tolerances. A GEMM of the same rounded operands on both devices differs only in how its fp32
// sums were ordered and rounded: |gpu - cpu| <= (gamma_K(2^-24) + gamma_K(2^-23)) sum |a b| for
// K terms, gamma_K(u) = K u / (1 - K u) (Higham, Accuracy and Stability of Numerical Algorithms,
// 2nd ed., eq. 3.5, for the CPU's round-to-nearest sums in any order; 2^-23 for tensor cores'
// accumulators, which truncate: Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA
// tensor cores", PeerJ CS 2021). check_gemm() allows 4 (K + 2) 2^-24 sum |a b| per element, the
// magnitudes computed by the CPU's fp32 layers on the absolute values. A wrong rounding of the
// operands (truncation, a missed rounding, the wrong format) moves most elements by about u_p
// (2^-8 for bf16, 2^-11 for fp16 and tf32) relative to their terms, far outside it.
// Where a product's operand is itself computed (attention's probabilities and score gradients),
// the two devices' fp32 values differ by float rounding, and when one lies within that of a
// rounding midpoint the rounded operands differ by one unit of the format (2 u_p relative): such
// a term moves by 2 u_p |a b|. check_near() allows 2 u_p sum |a b| on top of the GEMM bound; the
// GPU's own rounding of those operands is checked tightly against its own fp32 values.
class CudaPrecision : public CudaVsCpu {
 protected:
  void set(Precision p) {
    cpu_->set_precision(p);
    gpu_->set_precision(p);
  }
  static std::vector<float> absolute(std::vector<float> v) {
    for (float& x : v) x = std::fabs(x);
    return v;
  }
  static std::vector<float> rounded(Precision p, std::vector<float> v) {
    round_array(p, v.data(), v.data(), v.size());
    return v;
  }
  // Records the worst share of the bound as `name`; EXPECTs every element within it.
  void check_gemm(const std::string& name, const std::vector<float>& actual,
                  const std::vector<float>& reference, const std::vector<float>& magnitude,
                  long K) {
    ASSERT_EQ(actual.size(), reference.size()) << name;
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double bound = 4.0 * (K + 2) * 0x1p-24 * magnitude[i] + 1e-30;
      const double share = std::fabs(double(actual[i]) - reference[i]) / bound;
      if (!(share <= 1)) ++bad;
      if (!(share <= worst)) worst = share;
    }
    EXPECT_EQ(bad, 0u) << name << ": worst " << worst << " of the bound";
    record(name, worst);
  }
  // Every element within check_gemm's bound plus 2 u sum |a b| (operands computed on each device,
  // rounded to the format with unit roundoff u).
  void check_near(const std::string& name, const std::vector<float>& actual,
                  const std::vector<float>& reference, const std::vector<float>& magnitude, long K,
                  double u) {
    ASSERT_EQ(actual.size(), reference.size()) << name;
    double worst = 0;
    size_t bad = 0;
    for (size_t i = 0; i < actual.size(); ++i) {
      const double bound = (4.0 * (K + 2) * 0x1p-24 + 2 * u) * magnitude[i] + 1e-30;
      const double share = std::fabs(double(actual[i]) - reference[i]) / bound;
      if (!(share <= 1)) ++bad;
      if (!(share <= worst)) worst = share;
    }
    EXPECT_EQ(bad, 0u) << name << ": worst " << worst << " of the bound";
    record(name, worst);
  }
  void record(const std::string& name, double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", v);
    RecordProperty(name, text);
  }
};

constexpr Precision kRoundedPrecisions[] = {Precision::kTf32, Precision::kBf16, Precision::kFp16};

// rounding.h's conversions, which every GPU kernel uses to store operands, are CUDA's own
// round-to-nearest-even conversions bit for bit, over all 2^32 fp32 patterns (NaNs: NaN-ness).
TEST(CudaRounding, IsTheHardwaresOwnForEveryFloat) {
  COHORT_SKIP_UNLESS_GPU(cuda_device_available());
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const testing::RoundingMismatches m = testing::count_rounding_mismatches_on_gpu();
  EXPECT_EQ(m.bf16, 0u) << "first at 0x" << std::hex << m.first_bf16;
  EXPECT_EQ(m.fp16, 0u) << "first at 0x" << std::hex << m.first_fp16;
}

TEST_F(CudaPrecision, DefaultsToBf16WhereTheGpuHasIt) {
  int major = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(gpu_->default_precision(), major >= 8 ? Precision::kBf16 : Precision::kFp32);
  EXPECT_EQ(cpu_->default_precision(), Precision::kFp32);
  for (Precision p : kRoundedPrecisions) {
    EXPECT_EQ(gpu_->why_unsupported(p).empty(), major >= 8) << precision_name(p);
  }
}

TEST_F(CudaPrecision, LinearMatchesTheEmulation) {
  const int N = 37, C = 29, OC = 13;
  auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  auto d = random_vector(N * OC, 4);
  for (Precision p : kRoundedPrecisions) {
    set(p);
    const std::string name = precision_name(p);
    std::vector<float> out(N * OC), dx(N * C), dw(OC * C, 0.5f), db(OC, 0.25f);
    cpu_->linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    cpu_->linear_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC);
    float* gout = up(std::vector<float>(N * OC));
    float* gdx = up(std::vector<float>(N * C));
    float* gdw = up(std::vector<float>(OC * C, 0.5f));
    float* gdb = up(std::vector<float>(OC, 0.25f));
    gpu_->linear_forward(gout, up(x), up(w), up(b), N, C, OC);
    gpu_->linear_backward(gdx, gdw, gdb, up(d), up(x), up(w), N, C, OC);
    // sum |a b| of the rounded operands (plus |bias|, |initial dweight|), in fp32 on the CPU.
    const auto ax = absolute(rounded(p, x)), aw = absolute(rounded(p, w)),
               ad = absolute(rounded(p, d)), ab = absolute(b);
    std::vector<float> m_out(N * OC), m_dx(N * C), m_dw(OC * C, 0.5f);
    linear_forward(m_out.data(), ax.data(), aw.data(), ab.data(), N, C, OC);
    linear_backward(m_dx.data(), m_dw.data(), nullptr, ad.data(), ax.data(), aw.data(), N, C, OC);
    check_gemm(name + ".forward", down(gout, out.size()), out, m_out, C);
    check_gemm(name + ".dinp", down(gdx, dx.size()), dx, m_dx, OC);
    check_gemm(name + ".dweight", down(gdw, dw.size()), dw, m_dw, N);
    check(name + ".dbias", down(gdb, db.size()), db, 1e-4, 1e-3);  // fp32 sums of fp32 dout
  }
}

TEST_F(CudaPrecision, Conv2dMatchesTheEmulation) {
  for (const Conv2dShape s :
       {Conv2dShape{4, 28, 28, 1, 32, 3, 1}, Conv2dShape{3, 14, 14, 32, 64, 3, 1}}) {
    const size_t in_n = size_t(s.B) * s.H * s.W * s.C, out_n = size_t(s.col_rows()) * s.OC;
    auto x = random_vector(in_n, 5), w = random_vector(size_t(s.OC) * s.col_cols(), 6);
    auto b = random_vector(s.OC, 7), d = random_vector(out_n, 8);
    std::vector<float> col(cpu_->conv2d_scratch_floats(s));
    for (Precision p : kRoundedPrecisions) {
      set(p);
      const std::string name = std::string(precision_name(p)) + ".C" + std::to_string(s.C);
      std::vector<float> out(out_n), dx(in_n), dw(w.size(), 0.0f), db(s.OC, 0.0f);
      cpu_->conv2d_forward(out.data(), col.data(), x.data(), w.data(), b.data(), s);
      cpu_->conv2d_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), col.data(),
                            w.data(), s);
      float* gout = up(std::vector<float>(out_n));
      float* gcol = up(std::vector<float>(gpu_->conv2d_scratch_floats(s)));
      float* gdx = up(std::vector<float>(in_n));
      float* gdw = up(std::vector<float>(w.size(), 0.0f));
      float* gdb = up(std::vector<float>(s.OC, 0.0f));
      float* gx = up(x);
      float* gw = up(w);
      gpu_->conv2d_forward(gout, gcol, gx, gw, up(b), s);
      gpu_->conv2d_backward(gdx, gdw, gdb, up(d), gx, gcol, gw, s);
      const auto ax = absolute(rounded(p, x)), aw = absolute(rounded(p, w)),
                 ad = absolute(rounded(p, d)), ab = absolute(b);
      std::vector<float> m_out(out_n), m_dx(in_n), m_dw(w.size(), 0.0f);
      conv2d_forward(m_out.data(), col.data(), ax.data(), aw.data(), ab.data(), s);
      conv2d_backward(m_dx.data(), m_dw.data(), nullptr, ad.data(), ax.data(), col.data(),
                      aw.data(), s);
      check_gemm(name + ".forward", down(gout, out_n), out, m_out, s.col_cols());
      // col2im adds up to K*K products of OC terms each.
      check_gemm(name + ".dinp", down(gdx, in_n), dx, m_dx, s.OC + s.K * s.K);
      check_gemm(name + ".dweight", down(gdw, dw.size()), dw, m_dw, s.col_rows());
      check(name + ".dbias", down(gdb, db.size()), db, 1e-3, 1e-3);
    }
  }
}

// Attention. Forward: the GPU's output against the products of ITS OWN probabilities, rounded on
// the host (tight: the GPU must round them as the CPU does), and against the emulation's output
// (near: the probabilities are computed on each device). Backward, from the CPU's probabilities
// on both devices: dv (the given probabilities times the output gradient) tight; dq and dk
// through the score gradient, computed on each device, near, with magnitudes from a double
// reference.
TEST_F(CudaPrecision, AttentionMatchesTheEmulation) {
  for (const int T : {7, 64, 128}) {
    const int B = 3, C = 64, NH = 4, hs = C / NH;
    auto qkv = random_vector(size_t(B) * T * 3 * C, 19, -1, 1),
         d = random_vector(size_t(B) * T * C, 20);
    const size_t n = size_t(B) * T * C;
    // Element (b, t, h, e) of a (B, T, C) tensor, and of q, k, v in qkv.
    auto at = [&](int b, int t, int h, int e) { return (size_t(b) * T + t) * C + h * hs + e; };
    auto in = [&](int part, int b, int t, int h, int e) {
      return (size_t(b) * T + t) * 3 * C + part * C + h * hs + e;
    };
    for (Precision p : kRoundedPrecisions) {
      set(p);
      const double u = unit_roundoff(p);
      const std::string name = std::string(precision_name(p)) + ".T" + std::to_string(T);
      std::vector<float> out(n), att(size_t(B) * NH * T * T), dqkv(qkv.size());
      std::vector<float> scratch(cpu_->attention_scratch_floats(B, T, NH));
      cpu_->attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
      cpu_->attention_backward(dqkv.data(), scratch.data(), d.data(), qkv.data(), att.data(), B, T,
                               C, NH);
      float* gout = up(std::vector<float>(n));
      float* gatt = up(std::vector<float>(att.size()));
      float* gdqkv = up(std::vector<float>(qkv.size()));
      float* gscratch = up(std::vector<float>(gpu_->attention_scratch_floats(B, T, NH)));
      float* gqkv = up(qkv);
      gpu_->attention_forward(gout, gatt, gqkv, B, T, C, NH);
      gpu_->attention_backward(gdqkv, gscratch, up(d), gqkv, up(att), B, T, C, NH);
      const auto g_out = down(gout, n), g_att = down(gatt, att.size()),
                 g = down(gdqkv, dqkv.size());
      check(name + ".att", g_att, att, 1e-6, 1e-4);

      const auto qr = rounded(p, qkv), dr = rounded(p, d), ar = rounded(p, att),
                 gar = rounded(p, g_att);
      const double scale = 1.0 / std::sqrt(double(hs));
      std::vector<float> own(n), m_own(n), m_out(n), m_dv(n), m_dq(n), m_dk(n);
      std::vector<double> dpre(size_t(T) * T);
      for (int b = 0; b < B; ++b) {
        for (int h = 0; h < NH; ++h) {
          const float* ga = &gar[(size_t(b) * NH + h) * T * T];
          const float* ca = &ar[(size_t(b) * NH + h) * T * T];
          const float* a32 = &att[(size_t(b) * NH + h) * T * T];
          // The score gradient in double: att * (d v^T - sum_k att d v^T) * scale.
          for (int t = 0; t < T; ++t) {
            std::vector<double> dv_t(T, 0.0);
            double dot = 0;
            for (int j = 0; j <= t; ++j) {
              for (int e = 0; e < hs; ++e)
                dv_t[j] += double(dr[at(b, t, h, e)]) * qr[in(2, b, j, h, e)];
              dot += double(a32[t * T + j]) * dv_t[j];
            }
            for (int j = 0; j < T; ++j) {
              dpre[size_t(t) * T + j] = j <= t ? a32[t * T + j] * (dv_t[j] - dot) * scale : 0.0;
            }
          }
          for (int t = 0; t < T; ++t) {
            for (int e = 0; e < hs; ++e) {
              double y = 0, my = 0, mo = 0, mv = 0, mq = 0, mk = 0;
              for (int j = 0; j < T; ++j) {
                const double v = qr[in(2, b, j, h, e)];
                y += double(ga[t * T + j]) * v;
                my += std::fabs(ga[t * T + j] * v);
                mo += std::fabs(ca[t * T + j] * v);
                mv += std::fabs(ca[j * T + t] * double(dr[at(b, j, h, e)]));
                mq += std::fabs(dpre[size_t(t) * T + j] * qr[in(1, b, j, h, e)]);
                mk += std::fabs(dpre[size_t(j) * T + t] * qr[in(0, b, j, h, e)]);
              }
              const size_t i = at(b, t, h, e);
              own[i] = float(y), m_own[i] = float(my), m_out[i] = float(mo);
              m_dv[i] = float(mv), m_dq[i] = float(mq), m_dk[i] = float(mk);
            }
          }
        }
      }
      check_gemm(name + ".forward_own", g_out, own, m_own, T);
      check_near(name + ".forward", g_out, out, m_out, T, u);
      std::vector<float> gq, cq, gk, ck, gv, cv;
      for (size_t r = 0; r < size_t(B) * T; ++r) {
        for (int c = 0; c < C; ++c) {
          gq.push_back(g[r * 3 * C + c]), cq.push_back(dqkv[r * 3 * C + c]);
          gk.push_back(g[r * 3 * C + C + c]), ck.push_back(dqkv[r * 3 * C + C + c]);
          gv.push_back(g[r * 3 * C + 2 * C + c]), cv.push_back(dqkv[r * 3 * C + 2 * C + c]);
        }
      }
      check_gemm(name + ".dv", gv, cv, m_dv, T);
      check_near(name + ".dq", gq, cq, m_dq, T, u);
      check_near(name + ".dk", gk, ck, m_dk, T, u);
    }
  }
}

// The GPT at step 0 in each precision: the loss within 2 u_p, the gradients within 4 u_p of the
// emulation's in norm (a few operands one unit of the format apart move a few gradients by u_p).
TEST_F(CudaPrecision, GptMatchesTheEmulation) {
  const GptConfig cfg{256, 64, 2, 4, 64};
  const int B = 4, T = 64;
  std::vector<int32_t> x(B * T), y(B * T);
  for (int i = 0; i < B * T; ++i) x[i] = (i * 31) % 256, y[i] = (i * 17 + 3) % 256;
  for (Precision p : kRoundedPrecisions) {
    set(p);
    const std::string name = precision_name(p);
    Gpt cm(*cpu_, cfg, B), gm(*gpu_, cfg, B);
    cm.init(2);
    gm.init(2);
    const float lc = cm.forward(x.data(), y.data(), B, T);
    const float lg = gm.forward(up(x), up(y), B, T);
    EXPECT_NEAR(lg, lc, 2 * unit_roundoff(p) * lc) << name;
    cm.zero_grad();
    gm.zero_grad();
    cm.backward();
    gm.backward();
    const std::vector<float> gc(cm.grads(), cm.grads() + cm.num_params());
    const auto gg = down(gm.grads(), gm.num_params());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < gc.size(); ++i) {
      diff += (double(gg[i]) - gc[i]) * (double(gg[i]) - gc[i]);
      norm += double(gc[i]) * gc[i];
    }
    const double rel = std::sqrt(diff / norm);
    EXPECT_LT(rel, 4 * unit_roundoff(p)) << name;
    record(name + ".gpt.grads_rel", rel);
  }
}

class CudaTrainer : public testing::TrainerTest {
 protected:
  void SetUp() override {
    COHORT_SKIP_UNLESS_GPU(cuda_device_available());
    testing::TrainerTest::SetUp();
  }
};

TEST_F(CudaTrainer, FmnistStepsMatchTheCpu) {
  COHORT_SKIP_UNLESS_GPU_INPUT(have_fmnist(),
                               "no Fashion-MNIST in " + fmnist_dir() + " (set COHORT_FMNIST_DIR)");
  FmnistOptions o;
  o.data_dir = fmnist_dir();
  o.max_steps = 20;
  o.train_limit = 4096;
  o.test_limit = 1000;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  o.precision = Precision::kFp32;  // the GPU's default is bf16
  auto cpu = make_cpu_device(1);
  auto gpu = make_cuda_device(0);
  Comm single;
  const FmnistResult c = train_fmnist(o, *cpu, single);
  const FmnistResult g = train_fmnist(o, *gpu, single);
  // 20 steps of SGD let float differences grow (ReLU and pooling choices flip): a loose band.
  EXPECT_NEAR(g.last_loss, c.last_loss, 1e-2 * c.last_loss);
  EXPECT_NEAR(g.test_accuracy, c.test_accuracy, 0.02);
}

TEST_F(CudaTrainer, GptStepsMatchTheCpu) {
  GptOptions o;
  o.data = write_corpus(200000);
  o.model = GptConfig{256, 64, 2, 4, 64};
  o.batch_size = 8;
  o.total_batch_tokens = 8 * 64 * 2;
  o.max_steps = 10;
  o.warmup_steps = 2;
  o.eval_interval = 0;
  o.eval_batches = 4;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  o.precision = Precision::kFp32;  // the GPU's default is bf16
  auto cpu = make_cpu_device(1);
  auto gpu = make_cuda_device(0);
  Comm single;
  const GptResult c = train_gpt(o, *cpu, single);
  const GptResult g = train_gpt(o, *gpu, single);
  EXPECT_NEAR(g.last_loss, c.last_loss, 5e-3 * c.last_loss);
  EXPECT_NEAR(g.val_loss, c.val_loss, 5e-3 * c.val_loss);
}

// The GPT on the GPU gives the same bits run after run, in the GPU's default precision (bf16; no
// float atomics anywhere: the embedding backward adds in a fixed order, cuBLASLt's reductions keep
// theirs), and a run stopped after step 6 as a killed worker stops, then
// resumed from its checkpoint, ends where an uninterrupted one does (a run of max_steps 6 would
// have ended its cosine schedule early). CPU twin: Training.GptResumeIsBitwiseIdentical...
TEST_F(CudaTrainer, GptIsBitwiseReproducibleAndResumesExactly) {
  GptOptions o;
  o.data = write_corpus(100000);
  o.model = GptConfig{256, 64, 2, 4, 64};
  o.batch_size = 8;
  o.total_batch_tokens = 8 * 64 * 2;
  o.max_steps = 10;
  o.warmup_steps = 2;
  o.eval_interval = 4;
  o.eval_batches = 4;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  auto gpu = make_cuda_device(0);
  Comm single;
  o.checkpoint_dir = path("first");
  const GptResult first = train_gpt(o, *gpu, single);
  o.checkpoint_dir = path("second");
  const GptResult second = train_gpt(o, *gpu, single);
  EXPECT_EQ(first.params_crc, second.params_crc) << "two identical runs differ";
  EXPECT_EQ(first.val_loss, second.val_loss);
  o.checkpoint_dir = path("resumed");
  o.checkpoint_every = 3;
  o.on_step = testing::stop_after(6);
  EXPECT_THROW(train_gpt(o, *gpu, single), testing::StoppedForTest);
  o.on_step = nullptr;
  const GptResult resumed = train_gpt(o, *gpu, single);
  EXPECT_EQ(resumed.start_step, 6);
  EXPECT_EQ(resumed.params_crc, first.params_crc) << "the resumed run ended elsewhere";
  EXPECT_EQ(resumed.last_loss, first.last_loss);
  EXPECT_EQ(resumed.val_loss, first.val_loss);
}

// Ten GPT steps on the GPU in each precision end within 2% of the CPU's emulation (the two
// runs start equal and drift apart by rounding as training amplifies it; fp32 stays within 0.5%).
TEST_F(CudaTrainer, GptTrainsInEveryPrecisionAsTheEmulationDoes) {
  GptOptions o;
  o.data = write_corpus(200000);
  o.model = GptConfig{256, 64, 2, 4, 64};
  o.batch_size = 8;
  o.total_batch_tokens = 8 * 64 * 2;
  o.max_steps = 10;
  o.warmup_steps = 2;
  o.eval_interval = 0;
  o.eval_batches = 4;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  auto cpu = make_cpu_device(1);
  auto gpu = make_cuda_device(0);
  Comm single;
  for (Precision p : kRoundedPrecisions) {
    o.precision = p;
    const GptResult c = train_gpt(o, *cpu, single);
    const GptResult g = train_gpt(o, *gpu, single);
    EXPECT_EQ(g.precision, p);
    EXPECT_NEAR(g.last_loss, c.last_loss, 2e-2 * c.last_loss) << precision_name(p);
    EXPECT_NEAR(g.val_loss, c.val_loss, 2e-2 * c.val_loss) << precision_name(p);
    RecordProperty(std::string(precision_name(p)) + ".val_loss_gpu_cpu",
                   std::to_string(g.val_loss) + " " + std::to_string(c.val_loss));
  }
}

// fp16 from a loss scale of 2^30: the GPU skips the same overflowing steps as the CPU's
// emulation (each halving is a factor of 2 on the gradients: no overflow is near its edge) and
// ends at the same scale.
TEST_F(CudaTrainer, Fp16SkipsTheSameOverflowsAsTheEmulation) {
  GptOptions o;
  o.data = write_corpus(100000);
  o.model = GptConfig{256, 32, 2, 2, 64};
  o.batch_size = 8;
  o.total_batch_tokens = 8 * 32 * 2;
  o.max_steps = 12;
  o.warmup_steps = 2;
  o.eval_interval = 0;
  o.eval_batches = 2;
  o.metrics_path = std::string("-");
  o.out = nullptr;
  o.precision = Precision::kFp16;
  o.loss_scaler.init_scale = std::ldexp(1.0f, 30);
  o.loss_scaler.growth_interval = 3;
  auto cpu = make_cpu_device(1);
  auto gpu = make_cuda_device(0);
  Comm single;
  const GptResult c = train_gpt(o, *cpu, single);
  const GptResult g = train_gpt(o, *gpu, single);
  EXPECT_GE(c.skipped_steps, 1);
  EXPECT_EQ(g.skipped_steps, c.skipped_steps);
  EXPECT_EQ(g.loss_scale, c.loss_scale);
  EXPECT_NEAR(g.last_loss, c.last_loss, 2e-2 * c.last_loss);
}

// Kernel launches and GEMMs per optimiser step (Device::launches()): the same at batch 4 and 8
// and at 2 and 8 heads (attention runs all heads of all sequences in one batched GEMM per
// product), at most 50 per layer and 40 besides in bf16. Recorded for gpu_check.
TEST_F(CudaTrainer, LaunchesPerStepDoNotGrowWithTheBatchOrTheHeads) {
  auto gpu = make_cuda_device(0);
  Comm single;
  auto launches = [&](int batch, int heads, Precision p) {
    GptOptions o;
    o.data = write_corpus(100000);
    o.model = GptConfig{256, 64, 2, heads, 64};
    o.batch_size = batch;
    o.total_batch_tokens = batch * 64;
    o.max_steps = 3;
    o.eval_interval = 0;
    o.eval_batches = 1;
    o.metrics_path = std::string("-");
    o.out = nullptr;
    o.precision = p;
    return train_gpt(o, *gpu, single).launches_per_step;
  };
  for (Precision p : {Precision::kFp32, Precision::kBf16}) {
    const double base = launches(4, 2, p);
    EXPECT_GT(base, 0);
    EXPECT_LE(base, 50 * 2 + 40) << precision_name(p);
    EXPECT_EQ(launches(8, 2, p), base) << precision_name(p);
    EXPECT_EQ(launches(4, 8, p), base) << precision_name(p);
    RecordProperty(std::string("launches_per_step.") + precision_name(p) + ".2_layers",
                   std::to_string(base));
  }
}

TEST(CudaDevice, RefusesAGpuThatIsNotVisible) {
  COHORT_SKIP_UNLESS_GPU(cuda_device_available());
  const int count = cuda_device_count();
  try {
    make_cuda_device(count);
    ADD_FAILURE() << "cuda:" << count << " was accepted with " << count << " GPU(s) visible";
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("not a visible GPU"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_cuda_device(-1), CudaError);
}

TEST(CudaDevice, KnowsItsIndexAndPciBusId) {
  COHORT_SKIP_UNLESS_GPU(cuda_device_available());
  auto gpu = make_cuda_device(0);
  EXPECT_EQ(gpu->cuda_index(), 0);
  char bus[32] = {};
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
  std::string lower = bus;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_EQ(gpu->pci_bus_id(), lower);
  EXPECT_EQ(gpu_identity(*gpu), machine_id() + "/" + lower);
}

#ifdef COHORT_TRAIN_HAVE_RUNTIME
// Workers of a world of `world` as threads of this process over one MemoryStore, each with
// `device`; fn(rank, worker) runs in each. Rethrows the first exception.
void run_workers(int world, const std::string& device,
                 const std::function<void(int, Worker&)>& fn) {
  auto store = std::make_shared<MemoryStore>(std::chrono::seconds(60));
  static int calls = 0;  // a fresh run id per call: shared-memory segments are named after it
  const std::string run_id =
      "cuda_test_" + std::to_string(::getpid()) + "_" + std::to_string(++calls);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        WorkerIdentity id;
        id.rank = id.local_rank = r;
        id.world_size = id.local_world_size = world;
        id.run_id = run_id;
        id.timeout = std::chrono::seconds(60);
        WorkerOptions o;
        o.device = device;
        o.threads = 1;
        auto w = Worker::start(o, Context::from_store(id, store));
        fn(r, *w);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// One rank on the GPU takes NCCL on the model's device and stream; its gradients are summed in
// place. The worker is torn down twice in a row (the group before the stream it was given) and
// the GPU stays usable.
TEST(CudaWorker, OneRankUsesNcclOnItsOwnDevice) {
  COHORT_SKIP_UNLESS_GPU(cuda_device_available());
  for (int round = 0; round < 2; ++round) {
    run_workers(1, "cuda", [](int, Worker& w) {
      EXPECT_EQ(w.gradient_path(), "NCCL: 1 rank, each on a GPU of its own");
      EXPECT_STREQ(w.comm().describe(), "NCCL");
      int current = -1;
      ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
      EXPECT_EQ(current, w.device().cuda_index()) << "the group left another device current";
      DeviceBuffer<float> g(w.device(), 1000);
      std::vector<float> host(1000, 0.5f);
      w.device().upload(g.get(), host.data(), host.size() * sizeof(float));
      w.comm().allreduce_sum(g.get(), host.size());
      double loss = 2.5;
      w.comm().allreduce_sum(&loss, 1);  // a host value through the device
      EXPECT_EQ(loss, 2.5);
      std::vector<float> back(1000);
      w.device().download(back.data(), g.get(), back.size() * sizeof(float));
      EXPECT_EQ(back, host);
    });
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "round " << round;
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "round " << round;
  }
}

// Two ranks on the machine's one GPU (--device cuda wraps around the visible GPUs; cuda:0 puts
// every rank there): they see the same PCI bus id and take the CPU group together, and their
// gradients still add up.
TEST(CudaWorker, TwoRanksOnOneGpuAgreeOnTheCpuGroup) {
  COHORT_SKIP_UNLESS_GPU(cuda_device_available());
  for (const std::string device : {"cuda:0", "cuda"}) {
    if (device == "cuda" && cuda_device_count() > 1) continue;  // each rank has its own GPU there
    std::vector<std::string> why(2);
    std::vector<float> sums(2);
    run_workers(2, device, [&](int r, Worker& w) {
      why[r] = w.gradient_path();
      EXPECT_STREQ(w.comm().describe(), "CPU group, staged through host memory");
      DeviceBuffer<float> g(w.device(), 3);
      std::vector<float> host(3, static_cast<float>(r + 1));
      w.device().upload(g.get(), host.data(), sizeof(float) * 3);
      w.comm().allreduce_sum(g.get(), 3);
      w.device().download(host.data(), g.get(), sizeof(float) * 3);
      sums[r] = host[2];
    });
    auto gpu = make_cuda_device(0);
    EXPECT_EQ(why[0], why[1]) << device;
    EXPECT_NE(why[0].find("ranks 0 and 1 share GPU " + gpu_identity(*gpu)), std::string::npos)
        << device << ": " << why[0];
    EXPECT_EQ(sums[0], 3.0f) << device;
    EXPECT_EQ(sums[1], 3.0f) << device;
  }
}
#endif

}  // namespace
}  // namespace cohort::train

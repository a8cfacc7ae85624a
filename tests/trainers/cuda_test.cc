// Every CUDA layer against its CPU reference (forward and backward), the models and a few trainer
// steps on the GPU against the CPU. Label `gpu`; skipped when no CUDA device is visible.
// Tolerances: element-wise kernels 1e-6 abs / 1e-5 rel; anything with a GEMM or a reduction
// (summation order differs from OpenBLAS) 1e-5 abs / 1e-4 rel forward, 1e-4 / 1e-3 backward.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "cohort/train/cnn.h"
#include "cohort/train/device.h"
#include "cohort/train/fmnist_trainer.h"
#include "cohort/train/gpt.h"
#include "cohort/train/gpt_trainer.h"
#include "test_util.h"
#include "trainer_fixture.h"

namespace cohort::train {
namespace {

using testing::expect_close;
using testing::random_vector;

class CudaVsCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    cpu_ = make_cpu_device(1);
    gpu_ = make_cuda_device(0);
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
    EXPECT_TRUE(expect_close(down(gout, out.size()), out, 1e-5, 1e-4));
    EXPECT_TRUE(expect_close(down(gdx, dx.size()), dx, 1e-4, 1e-3));
    EXPECT_TRUE(expect_close(down(gdw, dw.size()), dw, 1e-4, 1e-3));
    EXPECT_TRUE(expect_close(down(gdb, db.size()), db, 1e-4, 1e-3));
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
    EXPECT_TRUE(expect_close(down(gout, out_n), out, 1e-5, 1e-4));
    gpu_->conv2d_backward(gdx, gdw, gdb, up(d), gx, gcol, gw, s);
    EXPECT_TRUE(expect_close(down(gdx, in_n), dx, 1e-4, 1e-3));
    EXPECT_TRUE(expect_close(down(gdw, dw.size()), dw, 1e-3, 1e-3));
    EXPECT_TRUE(expect_close(down(gdb, db.size()), db, 1e-3, 1e-3));
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
  EXPECT_TRUE(expect_close(down(gout, on), out, 0, 0));
  EXPECT_TRUE(expect_close(down(gdx, n), dx, 0, 0));

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
  EXPECT_TRUE(expect_close(down(t1, n), r, 0, 0));
  EXPECT_TRUE(expect_close(down(t2, n), dr, 0, 0));
  gpu_->gelu_forward(t1, gx, n);
  gpu_->gelu_backward(t2, gx, gdn, n);
  EXPECT_TRUE(expect_close(down(t1, n), g, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(t2, n), dg, 1e-6, 1e-5));
  gpu_->residual_forward(t1, gx, gdn, n);
  EXPECT_TRUE(expect_close(down(t1, n), s, 0, 0));
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
  EXPECT_TRUE(expect_close(down(gout, out.size()), out, 1e-5, 1e-4));
  EXPECT_TRUE(expect_close(down(gmean, N), mean, 1e-6, 1e-4));
  EXPECT_TRUE(expect_close(down(grstd, N), rstd, 1e-6, 1e-4));
  EXPECT_TRUE(expect_close(down(gdx, dx.size()), dx, 1e-4, 1e-3));
  EXPECT_TRUE(expect_close(down(gdw, C), dw, 1e-4, 1e-3));
  EXPECT_TRUE(expect_close(down(gdb, C), db, 1e-4, 1e-3));
}

TEST_F(CudaVsCpu, Embedding) {
  const int B = 4, T = 32, C = 64, V = 256;
  std::vector<int32_t> tok(B * T);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = static_cast<int32_t>((i * 37) % 11);  // repeats
  auto wte = random_vector(V * C, 16), wpe = random_vector(T * C, 17),
       d = random_vector(B * T * C, 18);
  std::vector<float> out(B * T * C), dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  cpu_->embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C);
  cpu_->embedding_backward(dwte.data(), dwpe.data(), d.data(), tok.data(), B, T, C);
  float* gout = up(std::vector<float>(out.size()));
  float* gdwte = up(std::vector<float>(V * C, 0.0f));
  float* gdwpe = up(std::vector<float>(T * C, 0.0f));
  int32_t* gtok = up(tok);
  gpu_->embedding_forward(gout, gtok, up(wte), up(wpe), B, T, C);
  gpu_->embedding_backward(gdwte, gdwpe, up(d), gtok, B, T, C);
  EXPECT_TRUE(expect_close(down(gout, out.size()), out, 0, 0));
  EXPECT_TRUE(expect_close(down(gdwte, dwte.size()), dwte, 1e-5, 1e-5));
  EXPECT_TRUE(expect_close(down(gdwpe, dwpe.size()), dwpe, 1e-5, 1e-5));
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
    EXPECT_TRUE(expect_close(down(gout, out.size()), out, 1e-5, 1e-4)) << "T=" << T;
    EXPECT_TRUE(expect_close(down(gatt, att.size()), att, 1e-6, 1e-4)) << "T=" << T;
    EXPECT_TRUE(expect_close(down(gdqkv, dqkv.size()), dqkv, 1e-4, 1e-3)) << "T=" << T;
  }
}

TEST_F(CudaVsCpu, SoftmaxXent) {
  for (const int V : {10, 256}) {
    const int N = 333;
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
    EXPECT_TRUE(expect_close(down(gloss, N), loss, 1e-5, 1e-5)) << "V=" << V;
    EXPECT_TRUE(expect_close(down(gz, z.size()), probs, 1e-6, 1e-5)) << "V=" << V;
    gpu_->softmax_xent_backward(gz, gz, gy, 1.0f / N, N, V);
    EXPECT_TRUE(expect_close(down(gz, z.size()), dz, 1e-7, 1e-5)) << "V=" << V;
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
  EXPECT_TRUE(expect_close(down(gp1, n), p1, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(gbuf, n), buf, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(gp3, n), p3, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(gbuf3, n), buf3, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(gp2, n), p2, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(down(gm, n), m, 1e-7, 1e-5));
  EXPECT_TRUE(expect_close(down(gv, n), v, 1e-7, 1e-5));
  const double ref = sum_squares(g.data(), n);
  EXPECT_NEAR(gpu_->sum_squares(gg, n), ref, 1e-5 * ref);
  std::vector<float> avg = p;
  ema_update(avg.data(), g.data(), n, 0.98f);
  float* gavg = up(p);
  gpu_->ema_update(gavg, gg, n, 0.98f);
  EXPECT_TRUE(expect_close(down(gavg, n), avg, 1e-7, 1e-6));
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
    cm.zero_grad();
    gm.zero_grad();
    cm.backward();
    gm.backward();
    std::vector<float> gc(cm.grads(), cm.grads() + cm.num_params());
    EXPECT_TRUE(expect_close(down(gm.grads(), gm.num_params()), gc, 1e-5, 1e-3));
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
    EXPECT_TRUE(expect_close(down(gm.grads(), gm.num_params()), gc, 1e-5, 1e-3));
  }
}

class CudaTrainer : public testing::TrainerTest {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
    testing::TrainerTest::SetUp();
  }
};

TEST_F(CudaTrainer, FmnistStepsMatchTheCpu) {
  if (!have_fmnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  FmnistOptions o;
  o.max_steps = 20;
  o.train_limit = 4096;
  o.test_limit = 1000;
  o.metrics_path = std::string("-");
  o.out = nullptr;
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
  auto cpu = make_cpu_device(1);
  auto gpu = make_cuda_device(0);
  Comm single;
  const GptResult c = train_gpt(o, *cpu, single);
  const GptResult g = train_gpt(o, *gpu, single);
  EXPECT_NEAR(g.last_loss, c.last_loss, 5e-3 * c.last_loss);
  EXPECT_NEAR(g.val_loss, c.val_loss, 5e-3 * c.val_loss);
}

}  // namespace
}  // namespace cohort::train

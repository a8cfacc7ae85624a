// Every CPU layer: forward against a naive double-precision loop, backward against central
// finite differences of L = sum(out * w) for a random w, and parameter gradients accumulating.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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
#include "cuda/embedding_grad.h"
#include "test_util.h"

namespace cohort::train {
namespace {

using testing::dot;
using testing::expect_close;
using testing::numeric_grad;
using testing::pick;
using testing::random_vector;
using testing::sample_indices;

constexpr float kH = 1e-2f;    // finite-difference step
constexpr double kAbs = 2e-3;  // tolerances of gradients against finite differences
constexpr double kRel = 2e-2;

TEST(Linear, ForwardMatchesNaiveLoop) {
  const int N = 5, C = 7, OC = 4;
  auto inp = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3);
  std::vector<float> out(N * OC), ref(N * OC);
  linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int c = 0; c < C; ++c) s += double(inp[n * C + c]) * w[o * C + c];
      ref[n * OC + o] = static_cast<float>(s);
    }
  }
  EXPECT_TRUE(expect_close(out, ref, 1e-5, 1e-5));
  linear_forward(out.data(), inp.data(), w.data(), nullptr, N, C, OC);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < OC; ++o) ref[n * OC + o] -= b[o];
  }
  EXPECT_TRUE(expect_close(out, ref, 1e-5, 1e-5));
}

TEST(Linear, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const int N = 6, C = 5, OC = 3;
  auto inp = random_vector(N * C, 4), w = random_vector(OC * C, 5), b = random_vector(OC, 6);
  auto wout = random_vector(N * OC, 7);
  std::vector<float> out(N * OC);
  auto loss = [&] {
    linear_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, wout);
  };
  std::vector<float> dinp(N * C, 99.0f), dw(OC * C, 0.0f), db(OC, 0.0f);
  linear_backward(dinp.data(), dw.data(), db.data(), wout.data(), inp.data(), w.data(), N, C, OC);
  auto all = [](size_t n) { return sample_indices(n, n, 0); };
  EXPECT_TRUE(expect_close(dinp, numeric_grad(loss, inp.data(), all(inp.size()), kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(dw, numeric_grad(loss, w.data(), all(w.size()), kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(db, numeric_grad(loss, b.data(), all(b.size()), kH), kAbs, kRel));
  // A second backward adds the same amounts again.
  std::vector<float> dw2 = dw, db2 = db;
  linear_backward(nullptr, dw2.data(), db2.data(), wout.data(), inp.data(), w.data(), N, C, OC);
  for (auto& x : dw) x *= 2;
  for (auto& x : db) x *= 2;
  EXPECT_TRUE(expect_close(dw2, dw, 1e-6, 1e-5));
  EXPECT_TRUE(expect_close(db2, db, 1e-6, 1e-5));
}

// Direct convolution in double, NHWC with weight (OC, K, K, C).
std::vector<float> naive_conv(const std::vector<float>& inp, const std::vector<float>& w,
                              const std::vector<float>& b, const Conv2dShape& s) {
  std::vector<float> out(static_cast<size_t>(s.B) * s.OH() * s.OW() * s.OC);
  for (int n = 0; n < s.B; ++n)
    for (int oh = 0; oh < s.OH(); ++oh)
      for (int ow = 0; ow < s.OW(); ++ow)
        for (int o = 0; o < s.OC; ++o) {
          double acc = b[o];
          for (int kh = 0; kh < s.K; ++kh)
            for (int kw = 0; kw < s.K; ++kw)
              for (int c = 0; c < s.C; ++c) {
                const int ih = oh + kh - s.pad, iw = ow + kw - s.pad;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += double(inp[((n * s.H + ih) * s.W + iw) * s.C + c]) *
                       w[((o * s.K + kh) * s.K + kw) * s.C + c];
              }
          out[((n * s.OH() + oh) * s.OW() + ow) * s.OC + o] = static_cast<float>(acc);
        }
  return out;
}

class Conv2dTest : public ::testing::TestWithParam<Conv2dShape> {};

TEST_P(Conv2dTest, ForwardMatchesDirectConvolution) {
  const Conv2dShape s = GetParam();
  auto inp = random_vector(size_t(s.B) * s.H * s.W * s.C, 11);
  auto w = random_vector(size_t(s.OC) * s.col_cols(), 12), b = random_vector(s.OC, 13);
  std::vector<float> out(size_t(s.col_rows()) * s.OC), col(conv2d_scratch_floats(s));
  conv2d_forward(out.data(), col.data(), inp.data(), w.data(), b.data(), s);
  EXPECT_TRUE(expect_close(out, naive_conv(inp, w, b, s), 1e-5, 1e-5));
}

TEST_P(Conv2dTest, BackwardMatchesFiniteDifferences) {
  const Conv2dShape s = GetParam();
  auto inp = random_vector(size_t(s.B) * s.H * s.W * s.C, 14);
  auto w = random_vector(size_t(s.OC) * s.col_cols(), 15), b = random_vector(s.OC, 16);
  auto wout = random_vector(size_t(s.col_rows()) * s.OC, 17);
  std::vector<float> out(size_t(s.col_rows()) * s.OC), col(conv2d_scratch_floats(s));
  auto loss = [&] {
    conv2d_forward(out.data(), col.data(), inp.data(), w.data(), b.data(), s);
    return dot(out, wout);
  };
  loss();
  std::vector<float> dinp(inp.size(), 7.0f), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  conv2d_backward(dinp.data(), dw.data(), db.data(), wout.data(), inp.data(), col.data(), w.data(),
                  s);
  const auto ii = sample_indices(inp.size(), 60, 1), wi = sample_indices(w.size(), 60, 2);
  EXPECT_TRUE(expect_close(pick(dinp, ii), numeric_grad(loss, inp.data(), ii, kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(pick(dw, wi), numeric_grad(loss, w.data(), wi, kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(db, numeric_grad(loss, b.data(), sample_indices(b.size(), 99, 3), kH),
                           kAbs, kRel));
  // Without an input gradient (the first layer) the weight gradients are the same; one-channel
  // inputs take the direct path there.
  std::vector<float> dw2(w.size(), 0.0f), db2(b.size(), 0.0f);
  conv2d_backward(nullptr, dw2.data(), db2.data(), wout.data(), inp.data(), col.data(), w.data(),
                  s);
  EXPECT_TRUE(expect_close(dw2, dw, 1e-5, 1e-4));
  EXPECT_TRUE(expect_close(db2, db, 1e-5, 1e-4));
}

INSTANTIATE_TEST_SUITE_P(Shapes, Conv2dTest,
                         ::testing::Values(Conv2dShape{2, 5, 6, 3, 4, 3, 1},   // padded
                                           Conv2dShape{1, 6, 5, 1, 3, 3, 1},   // one channel
                                           Conv2dShape{2, 7, 6, 1, 32, 3, 1},  // ... 32 out
                                           Conv2dShape{2, 6, 6, 1, 5, 3, 0},   // ... unpadded
                                           Conv2dShape{2, 5, 5, 2, 3, 3, 0},   // no padding
                                           Conv2dShape{1, 4, 4, 5, 2, 1, 0},   // 1x1
                                           // Fashion-MNIST's conv2 on 9 images: several chunks,
                                           // the last one short.
                                           Conv2dShape{9, 14, 14, 32, 4, 3, 1}),
                         [](const auto& info) {
                           const Conv2dShape& s = info.param;
                           char name[96];
                           std::snprintf(name, sizeof name, "B%dH%dW%dC%dOC%dK%dP%d", s.B, s.H, s.W,
                                         s.C, s.OC, s.K, s.pad);
                           return std::string(name);
                         });

// Values spaced by >= 0.05 in random order, so no 2x2 window has a near-tie a step of kH could
// flip.
std::vector<float> spread_values(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = -1.0f + 0.05f * static_cast<float>(i % 41);
  Rng rng(seed);
  for (size_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.next_u64() % i]);
  for (size_t i = 0; i < n; ++i) v[i] += 0.001f * static_cast<float>(i % 7);
  return v;
}

TEST(Conv2d, ChunksKeepTheColMatrixSmall) {
  const Conv2dShape conv2{64, 14, 14, 32, 64, 3, 1};
  EXPECT_EQ(conv2d_chunk_images(conv2), 4);  // 4 x 196 x 288 floats = 0.86 MiB
  EXPECT_EQ(conv2d_scratch_floats(conv2), 4u * 196 * 288);
  const Conv2dShape tiny{3, 4, 4, 1, 2, 3, 1};
  EXPECT_EQ(conv2d_chunk_images(tiny), 3);  // never more than the batch
}

TEST(MaxPool, ForwardPicksTheFirstMaximum) {
  // One window per channel layout (B=1, H=2, W=2, C=2): channel 0 has a tie at positions 1 and 3.
  const std::vector<float> inp = {0.0f, 5.0f, 2.0f, 1.0f, -1.0f, 0.5f, 2.0f, 4.0f};
  std::vector<float> out(2);
  std::vector<uint8_t> arg(2);
  maxpool2x2_forward(out.data(), arg.data(), inp.data(), 1, 2, 2, 2);
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(arg[0], 1);
  EXPECT_EQ(out[1], 5.0f);
  EXPECT_EQ(arg[1], 0);
}

TEST(MaxPool, MatchesNaiveLoopAndFiniteDifferences) {
  for (int H : {4, 5}) {  // even and odd (floor mode drops the last row and column)
    const int B = 2, W = H + 1, C = 3, OH = H / 2, OW = W / 2;
    auto inp = spread_values(size_t(B) * H * W * C, 21);
    std::vector<float> out(size_t(B) * OH * OW * C), ref(out.size());
    std::vector<uint8_t> arg(out.size());
    maxpool2x2_forward(out.data(), arg.data(), inp.data(), B, H, W, C);
    for (int n = 0; n < B; ++n)
      for (int oh = 0; oh < OH; ++oh)
        for (int ow = 0; ow < OW; ++ow)
          for (int c = 0; c < C; ++c) {
            float m = -1e30f;
            for (int dh = 0; dh < 2; ++dh)
              for (int dw = 0; dw < 2; ++dw)
                m = std::max(m, inp[((n * H + 2 * oh + dh) * W + 2 * ow + dw) * C + c]);
            ref[((n * OH + oh) * OW + ow) * C + c] = m;
          }
    EXPECT_TRUE(expect_close(out, ref, 0, 0)) << "H=" << H;
    auto wout = random_vector(out.size(), 22);
    auto loss = [&] {
      maxpool2x2_forward(out.data(), arg.data(), inp.data(), B, H, W, C);
      return dot(out, wout);
    };
    loss();
    std::vector<float> dinp(inp.size(), 3.0f);
    maxpool2x2_backward(dinp.data(), wout.data(), arg.data(), B, H, W, C);
    const auto all = sample_indices(inp.size(), inp.size(), 0);
    EXPECT_TRUE(expect_close(dinp, numeric_grad(loss, inp.data(), all, 1e-3f), kAbs, kRel))
        << "H=" << H;
  }
}

TEST(Relu, ForwardAndBackward) {
  auto inp = spread_values(64, 31);
  std::vector<float> out(64);
  relu_forward(out.data(), inp.data(), 64);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(out[i], inp[i] > 0 ? inp[i] : 0.0f);
  auto wout = random_vector(64, 32);
  auto loss = [&] {
    relu_forward(out.data(), inp.data(), 64);
    return dot(out, wout);
  };
  loss();
  std::vector<float> dinp(64);
  relu_backward(dinp.data(), wout.data(), out.data(), 64);
  EXPECT_TRUE(expect_close(dinp, numeric_grad(loss, inp.data(), sample_indices(64, 64, 0), 1e-3f),
                           kAbs, kRel));
  // In place.
  std::vector<float> g = wout;
  relu_backward(g.data(), g.data(), out.data(), 64);
  EXPECT_TRUE(expect_close(g, dinp, 0, 0));
}

TEST(Gelu, ForwardMatchesTanhFormulaAndBackwardMatchesFiniteDifferences) {
  const size_t n = 257;  // not a multiple of any vector width
  auto inp = random_vector(n, 41, -6.0f, 6.0f);
  std::vector<float> out(n), ref(n);
  gelu_forward(out.data(), inp.data(), n);
  for (size_t i = 0; i < n; ++i) {
    const double x = inp[i];
    ref[i] = static_cast<float>(0.5 * x *
                                (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))));
  }
  EXPECT_TRUE(expect_close(out, ref, 1e-6, 1e-6));
  auto wout = random_vector(n, 42);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), n);
    return dot(out, wout);
  };
  std::vector<float> dinp(n);
  gelu_backward(dinp.data(), inp.data(), wout.data(), n);
  EXPECT_TRUE(
      expect_close(dinp, numeric_grad(loss, inp.data(), sample_indices(n, n, 0), kH), kAbs, kRel));
}

TEST(LayerNorm, ForwardAndBackward) {
  const int N = 4, C = 19;
  auto inp = random_vector(N * C, 51, -2.0f, 2.0f), w = random_vector(C, 52, 0.5f, 1.5f);
  auto b = random_vector(C, 53);
  std::vector<float> out(N * C), mean(N), rstd(N), ref(N * C);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int i = 0; i < C; ++i) m += inp[n * C + i];
    m /= C;
    for (int i = 0; i < C; ++i) v += (inp[n * C + i] - m) * (inp[n * C + i] - m);
    v /= C;
    for (int i = 0; i < C; ++i) {
      ref[n * C + i] = static_cast<float>((inp[n * C + i] - m) / std::sqrt(v + 1e-5) * w[i] + b[i]);
    }
  }
  EXPECT_TRUE(expect_close(out, ref, 1e-5, 1e-5));
  auto wout = random_vector(N * C, 54);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(out, wout);
  };
  loss();
  // The input gradient accumulates: start from a known value and subtract it afterwards.
  std::vector<float> dinp(N * C, 0.5f), dw(C, 0.0f), db(C, 0.0f);
  layernorm_backward(dinp.data(), dw.data(), db.data(), wout.data(), inp.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  for (auto& x : dinp) x -= 0.5f;
  const auto all = [](size_t n) { return sample_indices(n, n, 0); };
  EXPECT_TRUE(expect_close(dinp, numeric_grad(loss, inp.data(), all(inp.size()), kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(dw, numeric_grad(loss, w.data(), all(C), kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(db, numeric_grad(loss, b.data(), all(C), kH), kAbs, kRel));
}

TEST(Embedding, ForwardAndBackwardWithRepeatedTokens) {
  const int B = 2, T = 4, C = 3, V = 5;
  const std::vector<int32_t> tokens = {1, 3, 1, 0, 4, 1, 2, 1};
  auto wte = random_vector(V * C, 61), wpe = random_vector(T * C, 62);
  std::vector<float> out(B * T * C);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        EXPECT_FLOAT_EQ(out[(b * T + t) * C + c], wte[tokens[b * T + t] * C + c] + wpe[t * C + c]);
  auto wout = random_vector(out.size(), 63);
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, wout);
  };
  std::vector<float> dwte(V * C, 0.0f), dwpe(T * C, 0.0f);
  embedding_backward(dwte.data(), dwpe.data(), wout.data(), tokens.data(), B, T, C, V);
  const auto all = [](size_t n) { return sample_indices(n, n, 0); };
  EXPECT_TRUE(expect_close(dwte, numeric_grad(loss, wte.data(), all(wte.size()), kH), kAbs, kRel));
  EXPECT_TRUE(expect_close(dwpe, numeric_grad(loss, wpe.data(), all(wpe.size()), kH), kAbs, kRel));
}

// The CUDA embedding backward adds each element's terms with the functions of
// cuda/embedding_grad.h (compiled here for the host): they must give bitwise what the CPU
// reference gives, so that the GPU result is the CPU's and the same on every run. The data make
// the order matter (magnitudes from 1e-4 to 1e4, a few tokens repeated many times, non-zero
// starting gradients): adding in reverse order gives other bits, which the test checks too, so a
// kernel that summed in another order would fail here.
TEST(Embedding, CudaSumOrderIsTheCpuOrderBitwise) {
  const int B = 4, T = 64, C = 24, V = 7;
  std::vector<int32_t> tokens(B * T);
  Rng rng(64);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.next_u64() % V);
  std::vector<float> dout = random_vector(size_t(B) * T * C, 65);
  for (auto& d : dout) d *= std::pow(10.0f, static_cast<float>(rng.next_u64() % 9) - 4.0f);
  const std::vector<float> dwte0 = random_vector(V * C, 66), dwpe0 = random_vector(T * C, 67);
  std::vector<float> dwte = dwte0, dwpe = dwpe0;
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, V);

  size_t wte_differ = 0, wpe_differ = 0, reversed_differ = 0;
  for (int v = 0; v < V; ++v) {
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(v) * C + c;
      const float e =
          cuda::embedding_wte_grad_element(dwte0[i], dout.data(), tokens.data(), B * T, C, v, c);
      wte_differ += std::memcmp(&e, &dwte[i], sizeof e) != 0;
      float r = dwte0[i];
      for (int k = B * T - 1; k >= 0; --k) {
        if (tokens[k] == v) r += dout[size_t(k) * C + c];
      }
      reversed_differ += std::memcmp(&r, &dwte[i], sizeof r) != 0;
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int c = 0; c < C; ++c) {
      const size_t i = size_t(t) * C + c;
      const float e = cuda::embedding_wpe_grad_element(dwpe0[i], dout.data(), B, T, C, t, c);
      wpe_differ += std::memcmp(&e, &dwpe[i], sizeof e) != 0;
    }
  }
  EXPECT_EQ(wte_differ, 0u) << "of " << V * C << " dwte elements";
  EXPECT_EQ(wpe_differ, 0u) << "of " << T * C << " dwpe elements";
  EXPECT_GT(reversed_differ, size_t(V * C) / 4) << "the data do not make the order matter";
}

// Causal attention in double, straight from the definition.
std::vector<float> naive_attention(const std::vector<float>& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  std::vector<float> out(size_t(B) * T * C);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int i = 0; i < hs; ++i)
            d += double(qkv[(b * T + t) * 3 * C + h * hs + i]) *
                 qkv[(b * T + j) * 3 * C + C + h * hs + i];
          s[j] = d / std::sqrt(double(hs));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& x : s) z += (x = std::exp(x - mx));
        for (int i = 0; i < hs; ++i) {
          double acc = 0;
          for (int j = 0; j <= t; ++j)
            acc += s[j] / z * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = static_cast<float>(acc);
        }
      }
  return out;
}

TEST(Attention, ForwardMatchesDefinitionAndBackwardMatchesFiniteDifferences) {
  const int B = 2, T = 5, C = 8, NH = 2;
  auto qkv = random_vector(size_t(B) * T * 3 * C, 71, -1.5f, 1.5f);
  std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(expect_close(out, naive_attention(qkv, B, T, C, NH), 1e-5, 1e-4));
  for (int bh = 0; bh < B * NH; ++bh)
    for (int t = 0; t < T; ++t) {
      double row = 0;
      for (int j = 0; j < T; ++j) {
        const float a = att[(size_t(bh) * T + t) * T + j];
        if (j > t) {
          EXPECT_EQ(a, 0.0f);
        }
        row += a;
      }
      EXPECT_NEAR(row, 1.0, 1e-5);
    }
  auto wout = random_vector(out.size(), 72);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return dot(out, wout);
  };
  loss();
  std::vector<float> dqkv(qkv.size(), 5.0f), scratch(size_t(T) * T);
  attention_backward(dqkv.data(), scratch.data(), wout.data(), qkv.data(), att.data(), B, T, C, NH);
  const auto all = sample_indices(qkv.size(), qkv.size(), 0);
  EXPECT_TRUE(expect_close(dqkv, numeric_grad(loss, qkv.data(), all, kH), kAbs, kRel));
}

TEST(SoftmaxXent, LossProbsAndGradient) {
  const int N = 4, V = 6;
  auto logits = random_vector(N * V, 81, -3.0f, 3.0f);
  const std::vector<int32_t> targets = {0, 5, 2, 2};
  std::vector<float> losses(N), probs(N * V);
  softmax_xent_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
  for (int n = 0; n < N; ++n) {
    double z = 0;
    for (int i = 0; i < V; ++i) z += std::exp(double(logits[n * V + i]));
    EXPECT_NEAR(losses[n], std::log(z) - logits[n * V + targets[n]], 1e-5);
    for (int i = 0; i < V; ++i)
      EXPECT_NEAR(probs[n * V + i], std::exp(logits[n * V + i]) / z, 1e-6);
  }
  // In place (probs over logits) gives the same.
  std::vector<float> inplace = logits, losses2(N);
  softmax_xent_forward(losses2.data(), inplace.data(), inplace.data(), targets.data(), N, V);
  EXPECT_TRUE(expect_close(inplace, probs, 0, 0));
  EXPECT_TRUE(expect_close(losses2, losses, 0, 0));
  // d(mean loss)/dlogits.
  auto loss = [&] {
    softmax_xent_forward(losses.data(), probs.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (float l : losses) s += l;
    return s / N;
  };
  loss();
  std::vector<float> dlogits(N * V);
  softmax_xent_backward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V);
  const auto all = sample_indices(logits.size(), logits.size(), 0);
  EXPECT_TRUE(expect_close(dlogits, numeric_grad(loss, logits.data(), all, kH), 1e-4, kRel));
}

TEST(SoftmaxXent, LargeLogitsStayFinite) {
  const std::vector<float> logits = {1000.0f, -1000.0f, 999.0f};
  const std::vector<int32_t> target = {1};
  std::vector<float> loss(1), probs(3);
  softmax_xent_forward(loss.data(), probs.data(), logits.data(), target.data(), 1, 3);
  EXPECT_NEAR(loss[0], 2000.0 + std::log1p(std::exp(-1.0)), 1e-2);
  EXPECT_NEAR(probs[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(Residual, Adds) {
  const std::vector<float> a = {1, 2, 3}, b = {0.5f, -2, 4};
  std::vector<float> out(3);
  residual_forward(out.data(), a.data(), b.data(), 3);
  EXPECT_TRUE(expect_close(out, {1.5f, 0.0f, 7.0f}, 0, 0));
}

}  // namespace
}  // namespace cohort::train

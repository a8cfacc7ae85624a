// Mixed precision on the CPU: the rounding to tf32, bfloat16 and binary16 bit for bit (known
// encodings, numpy's and PyTorch's among them, and an independent rounding in double over a sweep
// of fp32 values), the loss scaler as torch.cuda.amp.GradScaler behaves, and the layers' GEMMs in
// each precision against fp32 GEMMs of rounded operands.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "cohort/error.h"
#include "cohort/train/layers/attention.h"
#include "cohort/train/layers/conv2d.h"
#include "cohort/train/layers/linear.h"
#include "cohort/train/loss_scaler.h"
#include "cohort/train/precision.h"
#include "test_util.h"

namespace cohort::train {
namespace {

using testing::expect_close;
using testing::random_vector;

float f(uint32_t bits) {
  return std::bit_cast<float>(bits);
}
uint32_t bits(float x) {
  return std::bit_cast<uint32_t>(x);
}

constexpr Precision kRounded[] = {Precision::kTf32, Precision::kBf16, Precision::kFp16};

TEST(Precision, NamesParseAndBadNamesAreRefused) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  }
  try {
    parse_precision("bf32");
    ADD_FAILURE() << "bf32 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("fp32, tf32, bf16 or fp16"), std::string::npos);
  }
  EXPECT_EQ(unit_roundoff(Precision::kBf16), 1.0 / 256);
  EXPECT_EQ(unit_roundoff(Precision::kFp16), 1.0 / 2048);
}

TEST(Precision, Bf16EncodingsAreKnownValues) {
  // numpy / PyTorch: torch.tensor(x).to(torch.bfloat16)
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(3.14159265f), 0x4049);  // 0x40490fdb
  EXPECT_EQ(bf16_bits(0.1f), 0x3dcd);
  EXPECT_EQ(bf16_bits(1e-5f), 0x3728);
  EXPECT_EQ(bf16_bits(1.0f / 3), 0x3eab);
  EXPECT_EQ(bf16_bits(65504.0f), 0x4780);
  // Ties go to the even mantissa: 1 + 2^-8 is half-way between 1 and 1 + 2^-7.
  EXPECT_EQ(bf16_bits(f(0x3f808000)), 0x3f80);
  EXPECT_EQ(bf16_bits(f(0x3f818000)), 0x3f82);
  EXPECT_EQ(bf16_bits(f(0x3f808001)), 0x3f81);
  EXPECT_EQ(bf16_bits(f(0x3f807fff)), 0x3f80);
  // Signs, zeros, subnormals, overflow, infinities and NaN.
  EXPECT_EQ(bf16_bits(-3.14159265f), 0xc049);
  EXPECT_EQ(bf16_bits(-0.0f), 0x8000);
  EXPECT_EQ(bf16_bits(f(0x00000001)), 0x0000);
  EXPECT_EQ(bf16_bits(f(0x00018000)), 0x0002);
  EXPECT_EQ(bf16_bits(f(0x7f7f7fff)), 0x7f7f);
  EXPECT_EQ(bf16_bits(FLT_MAX), 0x7f80);  // past the largest bf16 by more than half an ulp
  EXPECT_EQ(bf16_bits(-INFINITY), 0xff80);
  EXPECT_EQ(bf16_bits(f(0x7fc00000)), 0x7fc0);
  EXPECT_TRUE(std::isnan(round_to(Precision::kBf16, f(0x7f800001))));  // signalling: stays NaN
  EXPECT_EQ(round_to(Precision::kBf16, 3.14159265f), 3.140625f);
}

TEST(Precision, Fp16EncodingsAreKnownValues) {
  // numpy: np.float32(x).astype(np.float16)
  EXPECT_EQ(fp16_bits(1.0f), 0x3c00);
  EXPECT_EQ(fp16_bits(3.14159265f), 0x4248);
  EXPECT_EQ(fp16_bits(0.1f), 0x2e66);
  EXPECT_EQ(fp16_bits(1e-5f), 0x00a8);  // a subnormal
  EXPECT_EQ(fp16_bits(1.0f / 3), 0x3555);
  EXPECT_EQ(fp16_bits(65504.0f), 0x7bff);
  EXPECT_EQ(fp16_bits(f(0x477feffd)), 0x7bff);  // 65519.99
  EXPECT_EQ(fp16_bits(65520.0f), 0x7c00);       // the tie above 65504 goes to infinity
  EXPECT_EQ(fp16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(fp16_bits(1e6f), 0x7c00);
  // Ties to even: 1 + 2^-11; subnormals 1.5 and 2.5 x 2^-24.
  EXPECT_EQ(fp16_bits(f(0x3f801000)), 0x3c00);
  EXPECT_EQ(fp16_bits(f(0x3f803000)), 0x3c02);
  EXPECT_EQ(fp16_bits(f(0x33c00000)), 0x0002);
  EXPECT_EQ(fp16_bits(f(0x34200000)), 0x0002);
  // The subnormal range and its edges.
  EXPECT_EQ(fp16_bits(f(0x38800000)), 0x0400);  // 2^-14, the smallest normal
  EXPECT_EQ(fp16_bits(f(0x387fffff)), 0x0400);  // rounds up into it
  EXPECT_EQ(fp16_bits(f(0x33800000)), 0x0001);  // 2^-24, the smallest subnormal
  EXPECT_EQ(fp16_bits(f(0x33000000)), 0x0000);  // 2^-25: a tie, to even zero
  EXPECT_EQ(fp16_bits(f(0x33000001)), 0x0001);
  EXPECT_EQ(fp16_bits(f(0x32ffffff)), 0x0000);
  EXPECT_EQ(fp16_bits(-1e-9f), 0x8000);
  EXPECT_EQ(fp16_bits(f(0x00000001)), 0x0000);
  EXPECT_EQ(fp16_bits(INFINITY), 0x7c00);
  EXPECT_EQ(fp16_bits(f(0x7fc00000)), 0x7e00);
  EXPECT_TRUE(std::isnan(round_to(Precision::kFp16, f(0x7f800001))));
  EXPECT_EQ(from_fp16_bits(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(from_fp16_bits(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(from_fp16_bits(0x7bff), 65504.0f);
  EXPECT_EQ(from_fp16_bits(0xc248), -3.140625f);
}

TEST(Precision, Tf32KeepsTenMantissaBitsRoundingToEven) {
  EXPECT_EQ(bits(round_to(Precision::kTf32, f(0x40490fdb))), 0x40490000u);  // pi
  EXPECT_EQ(bits(round_to(Precision::kTf32, f(0x3f801000))), 0x3f800000u);  // tie, even
  EXPECT_EQ(bits(round_to(Precision::kTf32, f(0x3f803000))), 0x3f804000u);  // tie, up to even
  EXPECT_EQ(bits(round_to(Precision::kTf32, f(0x3f801001))), 0x3f802000u);
  EXPECT_EQ(bits(round_to(Precision::kTf32, f(0xbf803000))), 0xbf804000u);
  EXPECT_EQ(round_to(Precision::kTf32, FLT_MAX), INFINITY);
  EXPECT_EQ(round_to(Precision::kTf32, 65520.0f), 65536.0f);  // a tie; fp32's range: finite
  EXPECT_EQ(round_to(Precision::kTf32, 1e38f), f(0x7e968000));
  EXPECT_EQ(round_to(Precision::kFp32, 0.1f), 0.1f);
}

// Encoding and decoding every binary16 and bfloat16 gives it back (NaNs stay NaNs).
TEST(Precision, EverySixteenBitValueRoundTrips) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float fh = from_fp16_bits(h), fb = from_bf16_bits(h);
    if (std::isnan(fh)) {
      EXPECT_TRUE(std::isnan(from_fp16_bits(fp16_bits(fh)))) << std::hex << b;
    } else {
      ASSERT_EQ(fp16_bits(fh), h) << std::hex << b;
    }
    if (std::isnan(fb)) {
      EXPECT_TRUE(std::isnan(from_bf16_bits(bf16_bits(fb)))) << std::hex << b;
    } else {
      ASSERT_EQ(bf16_bits(fb), h) << std::hex << b;
    }
  }
}

// An independent rounding: x / ulp in double (exact), to the nearest integer with ties to even
// (std::nearbyint in the default rounding mode), times ulp; the format's largest finite value
// and infinity above it.
float reference_round(Precision p, float x) {
  if (!std::isfinite(x) || x == 0) return x;
  const int mantissa = p == Precision::kBf16 ? 7 : 10;
  const int min_exp = p == Precision::kFp16 ? -14 : -126;
  const double max =
      p == Precision::kFp16 ? 65504.0 : std::ldexp(2.0 - std::ldexp(1.0, -mantissa), 127);
  const int e = std::max(std::ilogb(x), min_exp);
  const double ulp = std::ldexp(1.0, e - mantissa);
  const double r = std::nearbyint(static_cast<double>(x) / ulp) * ulp;
  if (std::fabs(r) > max) return std::copysign(INFINITY, x);
  return static_cast<float>(r);
}

TEST(Precision, RoundingMatchesAnIndependentReferenceOverASweep) {
  std::vector<uint32_t> patterns;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    patterns.push_back(static_cast<uint32_t>(b));
  // Around every tie point of [1, 2) and of a subnormal binade of fp16 (2^-20): the tie, and one
  // fp32 ulp either side of it.
  for (uint32_t top = 0; top < 1024; ++top) {
    for (uint32_t base : {0x3f800000u, 0x35800000u}) {
      for (int drop : {13, 16}) {
        const uint32_t tie = base + (top << drop) + (1u << (drop - 1));
        for (uint32_t b : {tie - 1, tie, tie + 1}) patterns.push_back(b);
      }
    }
  }
  for (Precision p : kRounded) {
    size_t bad = 0;
    for (uint32_t b : patterns) {
      const float x = f(b);
      if (std::isnan(x)) continue;
      const float got = round_to(p, x), want = reference_round(p, x);
      if (bits(got) != bits(want) && bad++ < 5) {
        ADD_FAILURE() << precision_name(p) << " of " << std::hex << b << ": " << bits(got)
                      << ", reference " << bits(want);
      }
    }
    EXPECT_EQ(bad, 0u) << precision_name(p) << " over " << patterns.size() << " values";
  }
}

// ---- the loss scaler (GradScaler's defaults: 2^16, x2 after 2000 clean steps, x0.5 on overflow)

TEST(LossScaler, SkipsAnOverflowAndBacksOff) {
  LossScaler s = LossScaler::for_precision(Precision::kFp16);
  ASSERT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.growth_tracker(), 1);
  EXPECT_FALSE(s.update(true));  // skip the step
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 16384.0f);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScaler, GrowsAfterTheIntervalOfCleanSteps) {
  LossScalerOptions o;
  o.init_scale = 8;
  o.growth_interval = 3;
  LossScaler s(true, o);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_TRUE(s.update(false));  // the third clean step in a row
  EXPECT_EQ(s.scale(), 16.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  // An overflow restarts the count.
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 8.0f);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 8.0f);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 16.0f);
}

TEST(LossScaler, DoesNotGrowPastTheFloatRange) {
  LossScalerOptions o;
  o.init_scale = std::ldexp(1.0f, 127);
  o.growth_interval = 1;
  LossScaler s(true, o);
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), std::ldexp(1.0f, 127));
}

TEST(LossScaler, StateRoundTripsThroughACheckpoint) {
  LossScalerOptions o;
  o.growth_interval = 5;
  LossScaler a(true, o);
  a.update(true);
  a.update(false);
  a.update(false);
  LossScaler b(true, o);
  b.restore(nlohmann::json::parse(a.state().dump()));
  EXPECT_EQ(b.scale(), a.scale());
  EXPECT_EQ(b.growth_tracker(), 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a.update(false), b.update(false));
  EXPECT_EQ(b.scale(), 65536.0f);
  // A state of a run without scaling (another precision) leaves a scaler as it starts.
  LossScaler c(true, o);
  c.restore(LossScaler::for_precision(Precision::kBf16).state());
  EXPECT_EQ(c.scale(), 65536.0f);
}

TEST(LossScaler, DisabledForEveryOtherPrecision) {
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16}) {
    LossScaler s = LossScaler::for_precision(p);
    EXPECT_FALSE(s.enabled());
    EXPECT_EQ(s.scale(), 1.0f);
    EXPECT_FALSE(s.update(true));  // a NaN gradient is still not applied
    EXPECT_TRUE(s.update(false));
    EXPECT_EQ(s.scale(), 1.0f);
  }
}

TEST(LossScaler, RefusesOptionsGradScalerRefuses) {
  for (auto bad : {LossScalerOptions{0.0f, 2, 0.5f, 10}, LossScalerOptions{INFINITY, 2, 0.5f, 10},
                   LossScalerOptions{1, 1.0f, 0.5f, 10}, LossScalerOptions{1, 2, 1.0f, 10},
                   LossScalerOptions{1, 2, 0.0f, 10}, LossScalerOptions{1, 2, 0.5f, 0}}) {
    EXPECT_THROW(LossScaler(true, bad), UsageError);
  }
  EXPECT_NO_THROW(LossScaler(false, LossScalerOptions{0.0f, 0, 0, 0}));
}

// ---- the layers' GEMMs: operands rounded, fp32 sums -------------------------------------------

std::vector<float> rounded(Precision p, std::vector<float> v) {
  round_array(p, v.data(), v.data(), v.size());
  return v;
}

TEST(PrecisionLayers, LinearIsTheFp32LinearOfRoundedOperands) {
  const int N = 37, C = 29, OC = 13;
  const auto x = random_vector(N * C, 1), w = random_vector(OC * C, 2), b = random_vector(OC, 3),
             d = random_vector(N * OC, 4);
  for (Precision p : kRounded) {
    std::vector<float> out(N * OC), dx(N * C), dw(OC * C, 0.5f), db(OC, 0.25f);
    linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC, p);
    linear_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), w.data(), N, C, OC, p);
    const auto xr = rounded(p, x), wr = rounded(p, w), dr = rounded(p, d);
    std::vector<float> out2(N * OC), dx2(N * C), dw2(OC * C, 0.5f), db2(OC, 0.25f);
    linear_forward(out2.data(), xr.data(), wr.data(), b.data(), N, C, OC);
    linear_backward(dx2.data(), dw2.data(), nullptr, dr.data(), xr.data(), wr.data(), N, C, OC);
    linear_backward(nullptr, std::vector<float>(OC * C).data(), db2.data(), d.data(), x.data(),
                    w.data(), N, C, OC);  // the bias gradient sums the fp32 output gradient
    EXPECT_EQ(out, out2) << precision_name(p);
    EXPECT_EQ(dx, dx2) << precision_name(p);
    EXPECT_EQ(dw, dw2) << precision_name(p);
    EXPECT_EQ(db, db2) << precision_name(p);
    std::vector<float> fp32(N * OC);
    linear_forward(fp32.data(), x.data(), w.data(), b.data(), N, C, OC);
    EXPECT_NE(out, fp32) << precision_name(p) << ": no rounding happened";
  }
}

TEST(PrecisionLayers, Conv2dIsTheFp32ConvolutionOfRoundedOperands) {
  // One input channel takes the direct path, three the im2col GEMMs.
  for (const Conv2dShape s :
       {Conv2dShape{3, 10, 9, 1, 8, 3, 1}, Conv2dShape{2, 7, 6, 3, 5, 3, 1}}) {
    const size_t in_n = size_t(s.B) * s.H * s.W * s.C, out_n = size_t(s.col_rows()) * s.OC;
    const auto x = random_vector(in_n, 5), w = random_vector(size_t(s.OC) * s.col_cols(), 6),
               b = random_vector(s.OC, 7), d = random_vector(out_n, 8);
    std::vector<float> col(conv2d_scratch_floats(s));
    for (Precision p : kRounded) {
      std::vector<float> out(out_n), dx(in_n), dw(w.size(), 0.0f), db(s.OC, 0.0f);
      conv2d_forward(out.data(), col.data(), x.data(), w.data(), b.data(), s, p);
      conv2d_backward(dx.data(), dw.data(), db.data(), d.data(), x.data(), col.data(), w.data(), s,
                      p);
      const auto xr = rounded(p, x), wr = rounded(p, w), dr = rounded(p, d);
      std::vector<float> out2(out_n), dx2(in_n), dw2(w.size(), 0.0f), db2(s.OC, 0.0f);
      conv2d_forward(out2.data(), col.data(), xr.data(), wr.data(), b.data(), s);
      conv2d_backward(dx2.data(), dw2.data(), nullptr, dr.data(), xr.data(), col.data(), wr.data(),
                      s);
      std::vector<float> dw_fp32(w.size(), 0.0f);
      conv2d_backward(nullptr, dw_fp32.data(), db2.data(), d.data(), x.data(), col.data(), w.data(),
                      s);
      EXPECT_EQ(out, out2) << precision_name(p) << " C=" << s.C;
      EXPECT_EQ(dx, dx2) << precision_name(p) << " C=" << s.C;
      EXPECT_EQ(dw, dw2) << precision_name(p) << " C=" << s.C;
      EXPECT_EQ(db, db2) << precision_name(p) << " C=" << s.C;
      if (s.C == 1) {  // the first layer's path: no input gradient
        std::vector<float> dw3(w.size(), 0.0f), db3(s.OC, 0.0f);
        conv2d_backward(nullptr, dw3.data(), db3.data(), d.data(), x.data(), col.data(), w.data(),
                        s, p);
        std::vector<float> dw4(w.size(), 0.0f);
        conv2d_backward(nullptr, dw4.data(), nullptr, dr.data(), xr.data(), col.data(), wr.data(),
                        s);
        EXPECT_EQ(dw3, dw4) << precision_name(p);
        EXPECT_EQ(db3, db2) << precision_name(p);
      }
    }
  }
}

// Attention's products: q k^T and att v forward from rounded q, k, v and the rounded fp32
// probabilities; the probabilities themselves are the fp32 softmax of the scores. Checked against
// loops in double over the layer's own probabilities (the fp32 sums differ from double's by float
// rounding); backward, whose softmax gradient is rounded before its two products, against the
// fp32 backward within the precision's rounding.
TEST(PrecisionLayers, AttentionRoundsTheOperandsOfItsProducts) {
  const int B = 2, T = 9, C = 16, NH = 2, hs = C / NH;
  const auto qkv = random_vector(size_t(B) * T * 3 * C, 19, -2, 2),
             d = random_vector(size_t(B) * T * C, 20);
  for (Precision p : kRounded) {
    std::vector<float> out(size_t(B) * T * C), att(size_t(B) * NH * T * T), dqkv(qkv.size()),
        scratch(size_t(T) * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, p);
    const auto qr = rounded(p, qkv);
    std::vector<float> want_out(out.size()), want_att(att.size());
    const double scale = 1.0 / std::sqrt(double(hs));
    for (int b = 0; b < B; ++b) {
      for (int h = 0; h < NH; ++h) {
        for (int t = 0; t < T; ++t) {
          const float* q = &qr[(size_t(b) * T + t) * 3 * C + h * hs];
          std::vector<double> s(t + 1);
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= t; ++j) {
            const float* k = &qr[(size_t(b) * T + j) * 3 * C + C + h * hs];
            double acc = 0;
            for (int i = 0; i < hs; ++i) acc += double(q[i]) * k[i];
            s[j] = acc * scale;
            mx = std::max(mx, s[j]);
          }
          for (int j = 0; j <= t; ++j) sum += std::exp(s[j] - mx);
          const float* a = &att[((size_t(b) * NH + h) * T + t) * T];
          for (int j = 0; j <= t; ++j)
            want_att[((size_t(b) * NH + h) * T + t) * T + j] = float(std::exp(s[j] - mx) / sum);
          for (int i = 0; i < hs; ++i) {
            double acc = 0;
            for (int j = 0; j <= t; ++j) {
              acc +=
                  double(round_to(p, a[j])) * qr[(size_t(b) * T + j) * 3 * C + 2 * C + h * hs + i];
            }
            want_out[(size_t(b) * T + t) * C + h * hs + i] = float(acc);
          }
        }
      }
    }
    EXPECT_TRUE(expect_close(att, want_att, 1e-6, 1e-5)) << precision_name(p);
    EXPECT_TRUE(expect_close(out, want_out, 1e-6, 1e-5)) << precision_name(p);

    attention_backward(dqkv.data(), scratch.data(), d.data(), qkv.data(), att.data(), B, T, C, NH,
                       p);
    std::vector<float> fp32(qkv.size()), fp32_out(out.size()), fp32_att(att.size());
    attention_forward(fp32_out.data(), fp32_att.data(), qkv.data(), B, T, C, NH);
    attention_backward(fp32.data(), scratch.data(), d.data(), qkv.data(), fp32_att.data(), B, T, C,
                       NH);
    const double u = unit_roundoff(p);
    EXPECT_TRUE(expect_close(dqkv, fp32, 16 * u, 16 * u)) << precision_name(p);
    EXPECT_FALSE(expect_close(dqkv, fp32, 1e-7, 1e-6)) << precision_name(p) << ": no rounding";
  }
}

}  // namespace
}  // namespace cohort::train

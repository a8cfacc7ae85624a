// The reduction kernels: every source folded in every type, bfloat16 accumulated in float,
// bitwise OR and the average's division.
#include "cpu/reduce_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace cohort::detail {
namespace {

TEST(ReduceKernels, FoldsManySourcesInEveryType) {
  for (int nsrc = 1; nsrc <= 5; ++nsrc) {
    std::vector<std::vector<int64_t>> src(nsrc, std::vector<int64_t>(5000));
    std::vector<const void*> ptrs;
    for (int k = 0; k < nsrc; ++k) {
      for (size_t i = 0; i < 5000; ++i)
        src[k][i] = static_cast<int64_t>((i * 31 + k * 7) % 23) - 11;
      ptrs.push_back(src[k].data());
    }
    std::vector<int64_t> sum(5000), mn(5000), mx(5000);
    reduce(sum.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kSum);
    reduce(mn.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kMin);
    reduce(mx.data(), ptrs.data(), nsrc, 5000, DataType::kInt64, Op::kMax);
    for (size_t i = 0; i < 5000; ++i) {
      int64_t s = 0, lo = src[0][i], hi = src[0][i];
      for (int k = 0; k < nsrc; ++k) {
        s += src[k][i];
        lo = std::min(lo, src[k][i]);
        hi = std::max(hi, src[k][i]);
      }
      ASSERT_EQ(sum[i], s);
      ASSERT_EQ(mn[i], lo);
      ASSERT_EQ(mx[i], hi);
    }
  }
}

TEST(ReduceKernels, BFloat16AccumulatesInFloatAndRoundsOnce) {
  // 256 + 1 + 1 is 258 exactly in float but 256 when rounded after every step.
  std::vector<uint16_t> a(3, BFloat16::from_float(256).bits), b(3, BFloat16::from_float(1).bits);
  const void* srcs[3] = {a.data(), b.data(), b.data()};
  std::vector<uint16_t> out(3);
  reduce(out.data(), srcs, 3, 3, DataType::kBFloat16, Op::kSum);
  EXPECT_EQ(BFloat16{out[0]}.to_float(), 258.0f);
}

TEST(ReduceKernels, BitOrAndDivide) {
  std::vector<float> a{1.5f, 0, 0}, b{0, -2.0f, 0};
  std::vector<float> out(3);
  const void* srcs[2] = {a.data(), b.data()};
  reduce(out.data(), srcs, 2, 3, DataType::kFloat32, Op::kBitOr);
  EXPECT_EQ(out, (std::vector<float>{1.5f, -2.0f, 0}));
  std::vector<int32_t> v{7, -7, 8};
  divide(v.data(), 3, DataType::kInt32, 2);
  EXPECT_EQ(v, (std::vector<int32_t>{3, -3, 4}));
}

}  // namespace
}  // namespace cohort::detail

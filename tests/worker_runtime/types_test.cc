// libcohort's data types: bfloat16 rounding, and the names of types and reductions.
#include "cohort/types.h"

#include <gtest/gtest.h>

#include <cmath>

namespace cohort::detail {
namespace {

TEST(BFloat16, RoundsToNearestEven) {
  EXPECT_EQ(BFloat16::from_float(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16::from_float(1.0f + 1.0f / 256).bits, 0x3F80);  // tie, even stays
  EXPECT_EQ(BFloat16::from_float(1.0f + 3.0f / 256).bits, 0x3F82);  // tie, odd rounds up
  EXPECT_EQ(BFloat16::from_float(-2.5f).to_float(), -2.5f);
  EXPECT_TRUE(std::isnan(BFloat16::from_float(NAN).to_float()));
  EXPECT_EQ(dtype_name(DataType::kBFloat16), "bfloat16");
  EXPECT_EQ(reduce_op_name(ReduceOp::kAvg), "avg");
}

}  // namespace
}  // namespace cohort::detail

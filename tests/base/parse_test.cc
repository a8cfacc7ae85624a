// Strict number parsing: the whole text is the number, in range, or nothing.
#include "cohort/base/parse.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

using namespace std::chrono_literals;

TEST(Parse, Int64IsTheWholeTextInRange) {
  EXPECT_EQ(parse_int64("0"), 0);
  EXPECT_EQ(parse_int64("-12"), -12);
  EXPECT_EQ(parse_int64("+12"), 12);
  EXPECT_EQ(parse_int64("9223372036854775807"), INT64_MAX);
  EXPECT_EQ(parse_int64("-9223372036854775808"), INT64_MIN);
  for (const char* bad : {"", "+", "-", " 1", "1 ", "12abc", "1.0", "0x10", "9223372036854775808",
                          "++1", "+-1", "+-0"})
    EXPECT_FALSE(parse_int64(bad)) << "'" << bad << "'";
}

TEST(Parse, IntWithinItsBounds) {
  EXPECT_EQ(parse_int("5", 1, 5), 5);
  EXPECT_EQ(parse_int("1", 1, 5), 1);
  EXPECT_FALSE(parse_int("6", 1, 5));
  EXPECT_FALSE(parse_int("0", 1, 5));
  EXPECT_FALSE(parse_int("4294967297", INT32_MIN, INT32_MAX));  // would wrap to 1 as an int
}

TEST(Parse, DoubleIsFinite) {
  EXPECT_EQ(parse_double("0.25"), 0.25);
  EXPECT_EQ(parse_double("+1e3"), 1000.0);
  EXPECT_EQ(parse_double("-2.5"), -2.5);
  EXPECT_EQ(parse_double("5"), 5.0);
  for (const char* bad :
       {"", "nan", "inf", "-inf", "1e400", "1.5s", " 1", "1,5", "+", "+-1", "++1"})
    EXPECT_FALSE(parse_double(bad)) << "'" << bad << "'";
}

TEST(Parse, SecondsAreMillisecondsRoundedAndNeverNegative) {
  EXPECT_EQ(parse_seconds("30"), 30000ms);
  EXPECT_EQ(parse_seconds("0.5"), 500ms);
  EXPECT_EQ(parse_seconds("0.0004"), 0ms);
  EXPECT_EQ(parse_seconds("0.0006"), 1ms);
  EXPECT_EQ(parse_seconds("0"), 0ms);
  EXPECT_EQ(parse_seconds("1e12"), std::chrono::milliseconds(1000000000000000LL));
  EXPECT_FALSE(parse_seconds("-1"));
  EXPECT_FALSE(parse_seconds("1e13"));  // past what fits once in milliseconds
  EXPECT_FALSE(parse_seconds("soon"));
}

}  // namespace
}  // namespace cohort

// Whole numbers from outside JSON (cohort/base/json_number.h): read only when they are whole
// numbers within the type, never converted with static_cast (undefined for a double out of range).
#include "cohort/base/json_number.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace cohort::json_number {
namespace {

using nlohmann::json;

TEST(JsonNumber, AWholeNumberWithinTheTypeIsRead) {
  EXPECT_EQ(whole<int>(json(42)), 42);
  EXPECT_EQ(whole<int>(json(-7)), -7);
  EXPECT_EQ(whole<int>(json(2147483647)), 2147483647);
  EXPECT_EQ(whole<int>(json(-2147483648LL)), INT32_MIN);
  EXPECT_EQ(whole<int64_t>(json(INT64_MAX)), INT64_MAX);
  EXPECT_EQ(whole<uint32_t>(json(4294967295ULL)), 4294967295U);
}

TEST(JsonNumber, AnythingElseIsNotANumberOfTheType) {
  for (const json& v : {json(2.5), json(1e300), json(-1e300), json(2147483648LL),
                        json(-2147483649LL), json(18446744073709551615ULL), json("3"), json(true),
                        json(nullptr), json::array({1}), json::object()}) {
    EXPECT_FALSE(whole<int>(v).has_value()) << v.dump();
  }
  EXPECT_FALSE(whole<uint32_t>(json(-1)).has_value());
  EXPECT_FALSE(whole<int64_t>(json(18446744073709551615ULL)).has_value());
  // A whole number written as a fraction (3.0) is still a fraction's type: JSON writers that mean
  // an integer write one.
  EXPECT_FALSE(whole<int>(json(3.0)).has_value());
}

TEST(JsonNumber, AFieldIsItsFallbackWhenAbsentAndMalformedByNameWhenWrong) {
  const json j = json::parse(R"({"pid": 4242, "rank": 1e300, "none": null, "round": 2.5})");
  EXPECT_EQ(field<int>(j, "pid", 0), 4242);
  EXPECT_EQ(field<int>(j, "missing", -1), -1);
  EXPECT_EQ(field<int>(j, "none", 7), 7);
  try {
    field<int>(j, "rank", 0);
    ADD_FAILURE() << "1e300 read as an int";
  } catch (const ProtocolError& e) {
    EXPECT_STREQ(e.what(), "'rank' is 1e+300, not a whole number in -2147483648..2147483647");
  }
  EXPECT_THROW(field<int>(j, "round", 0), ProtocolError);
  EXPECT_EQ(required<int>(j, "pid"), 4242);
  try {
    required<int>(j, "missing");
    ADD_FAILURE() << "a missing field read";
  } catch (const ProtocolError& e) {
    EXPECT_STREQ(e.what(), "'missing' is missing");
  }
  EXPECT_THROW(required<int>(json::array(), "pid"), ProtocolError);
}

}  // namespace
}  // namespace cohort::json_number

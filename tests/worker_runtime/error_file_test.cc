// The error file libcohort writes for a dying worker, in torchrun's shape.
#include "cohort/error_file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace cohort::detail {
namespace {

TEST(ErrorFileJson, HasTorchrunsShape) {
  const auto j = nlohmann::json::parse(error_file_json("ValueError: \"x\"\n", "a\nb", 1700000000));
  EXPECT_EQ(j["message"]["message"], "ValueError: \"x\"\n");
  EXPECT_EQ(j["message"]["extraInfo"]["py_callstack"], "a\nb");
  EXPECT_EQ(j["message"]["extraInfo"]["timestamp"], "1700000000");
  EXPECT_NE(current_stack_trace().find("#0"), std::string::npos);
}

}  // namespace
}  // namespace cohort::detail

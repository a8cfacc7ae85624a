// The process environment as a map, and back to "KEY=VALUE" entries for execve.
#include "cohort/base/environment.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace cohort {
namespace {

TEST(Environment, TheProcessEnvironmentAsAMap) {
  ::setenv("COHORT_ENVIRONMENT_TEST", "a=b=c", 1);
  ::setenv("COHORT_ENVIRONMENT_EMPTY", "", 1);
  const EnvMap env = current_env();
  EXPECT_EQ(env.at("COHORT_ENVIRONMENT_TEST"), "a=b=c");  // split at the first '='
  EXPECT_EQ(env.at("COHORT_ENVIRONMENT_EMPTY"), "");
  ::unsetenv("COHORT_ENVIRONMENT_TEST");
  EXPECT_FALSE(current_env().contains("COHORT_ENVIRONMENT_TEST"));
  ::unsetenv("COHORT_ENVIRONMENT_EMPTY");
}

TEST(Environment, EntriesInKeyOrder) {
  EXPECT_EQ(env_entries({{"PATH", "/bin"}, {"A", ""}, {"B", "x=y"}}),
            (std::vector<std::string>{"A=", "B=x=y", "PATH=/bin"}));
  EXPECT_TRUE(env_entries({}).empty());
}

}  // namespace
}  // namespace cohort

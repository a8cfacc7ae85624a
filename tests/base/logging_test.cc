// Component loggers: the level from COHORT_LOG_LEVEL, else LOGLEVEL (torchrun's names), else the
// default, and one line format.
#include "cohort/base/logging.h"

#include <gtest/gtest.h>
#include <spdlog/logger.h>
#include <spdlog/sinks/ostream_sink.h>
#include <stdlib.h>

#include <regex>
#include <sstream>

namespace cohort {
namespace {

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"COHORT_LOG_LEVEL", "LOGLEVEL"}) {
      if (const char* old = std::getenv(v)) saved_[v] = old;
      ::unsetenv(v);
    }
  }
  void TearDown() override {
    for (const char* v : {"COHORT_LOG_LEVEL", "LOGLEVEL"}) {
      if (saved_.contains(v))
        ::setenv(v, saved_[v].c_str(), 1);
      else
        ::unsetenv(v);
    }
  }
  // What a logger made now writes of a debug, an info and a warning line.
  std::string lines(const std::string& default_level = "info") {
    std::ostringstream out;
    auto log = private_logger("agent", std::make_shared<spdlog::sinks::ostream_sink_mt>(out),
                              default_level);
    log->debug("d");
    log->info("i");
    log->warn("w");
    log->flush();
    return out.str();
  }
  // The levels of those lines, in order ("debug info warning").
  std::string levels(const std::string& default_level = "info") {
    std::string text = lines(default_level), out;
    static const std::regex level(R"(\[agent\] \[(\w+)\] )");
    for (std::sregex_iterator it(text.begin(), text.end(), level), end; it != end; ++it)
      out += (out.empty() ? "" : " ") + (*it)[1].str();
    return out;
  }
  std::map<std::string, std::string> saved_;
};

TEST_F(LoggingTest, OneLineFormatNamingTheComponent) {
  const std::string text = lines();
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[agent\] \[info\] i\n)")))
      << text;
}

TEST_F(LoggingTest, TheLevelComesFromTheEnvironmentOrTheDefault) {
  EXPECT_EQ(levels(), "info warning");
  EXPECT_EQ(levels("warning"), "warning");
  ::setenv("LOGLEVEL", "DEBUG", 1);  // torchrun's variable
  EXPECT_EQ(levels("warning"), "debug info warning");
  ::setenv("COHORT_LOG_LEVEL", "warn", 1);  // cohort's wins, in any case
  EXPECT_EQ(levels(), "warning");
  ::setenv("COHORT_LOG_LEVEL", "", 1);  // empty: not set
  EXPECT_EQ(levels(), "debug info warning");
  ::setenv("LOGLEVEL", "CRITICAL", 1);
  EXPECT_EQ(levels(), "");
  ::setenv("LOGLEVEL", "chatty", 1);  // unknown: info
  EXPECT_EQ(levels(), "info warning");
}

TEST_F(LoggingTest, AComponentLoggerIsMadeOnce) {
  auto a = component_logger("logging-test-component");
  auto b = component_logger("logging-test-component", "error");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->name(), "logging-test-component");
}

}  // namespace
}  // namespace cohort

// cohortd's command line: where its metrics are served unless told otherwise.
#include "cohort/rdzv/cohortd.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cohort {
namespace {

TEST(MetricsAddress, CohortdServesItsMetricsOnLoopbackUnlessToldOtherwise) {
  auto parsed = [](std::vector<std::string> args) {
    args.insert(args.begin(), "cohortd");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    rdzv::CohortdConfig config;
    EXPECT_EQ(rdzv::parse_cohortd_args(static_cast<int>(argv.size()), argv.data(), &config), -1);
    return rdzv::cohortd_metrics_address(config);
  };
  // The store on every interface (--host's default), its metrics on loopback only.
  auto a = parsed({"--metrics-port", "9400"});
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 9400);
  EXPECT_EQ(parsed({"--host", "10.0.0.1", "--metrics-port", "0"}).host, "127.0.0.1");
  EXPECT_EQ(parsed({"--metrics-addr", "0.0.0.0:9400"}).host, "0.0.0.0");  // as told
  EXPECT_FALSE(parsed({}).enabled());
}

}  // namespace
}  // namespace cohort

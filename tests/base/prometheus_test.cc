// Prometheus' text exposition format: histograms' cumulative buckets, escaped labels, numbers.
#include "cohort/base/prometheus.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(PrometheusText, HistogramBucketsAreCumulativeAndLabelsEscaped) {
  const double bounds[] = {0.001, 0.01};
  prom::Histogram h(bounds);
  h.observe(0.0005);
  h.observe(0.001);  // on a bound: counted in that bucket (le)
  h.observe(0.005);
  h.observe(3);
  prom::Exposition out;
  out.family("x_seconds", "histogram", "Test");
  out.histogram("x_seconds", {{"op", "a\"b\\c\nd"}}, h);
  EXPECT_EQ(out.text(),
            "# HELP x_seconds Test\n# TYPE x_seconds histogram\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"0.001\"} 2\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"0.01\"} 3\n"
            "x_seconds_bucket{op=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 4\n"
            "x_seconds_sum{op=\"a\\\"b\\\\c\\nd\"} 3.0065\n"
            "x_seconds_count{op=\"a\\\"b\\\\c\\nd\"} 4\n");
  EXPECT_EQ(prom::number(1e15), "1000000000000000");
  EXPECT_EQ(prom::number(0.25), "0.25");
}

}  // namespace
}  // namespace cohort

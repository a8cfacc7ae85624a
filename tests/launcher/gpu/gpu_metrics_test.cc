// The GPU metrics' Prometheus text, as promtool (Debian's prometheus package) parses it.
#include "gpu/gpu_metrics.h"

#include "../../common/subprocess.h"
#include "gpu_health_fixture.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

// promtool (Debian's prometheus package) lints the text as Prometheus would parse it.
TEST_F(GpuHealth, PromtoolAcceptsTheMetricsText) {
  if (::access("/usr/bin/promtool", X_OK) != 0)
    GTEST_SKIP() << "no /usr/bin/promtool (scripts/setup.sh installs Debian's prometheus)";
  script(device(0, R"("temperature": 91, "throttle": 72, "ecc": {"uncorrected": 2, "corrected": 7},
    "processes": [{"pid": 4242, "memory": 1024}], "xids": [79])") +
         "," + device(1, R"("name": "odd \"name\" \\ here")") + "," + device(2, R"("lost": true)") +
         R"(, {"uuid": "GPU-bare"})");
  auto m = monitor();
  const std::string text = m->metrics_text();
  const std::string u0 = "gpu=\"0\",uuid=\"GPU-00000000-aaaa-bbbb-cccc-dddddddddddd\"";
  for (const std::string& line :
       {"cohort_gpu_temperature_celsius{" + u0 + "} 91\n",
        "cohort_gpu_utilization_ratio{" + u0 + "} 0.97\n",
        "cohort_gpu_memory_total_bytes{" + u0 + "} 150754820096\n",
        "cohort_gpu_power_watts{" + u0 + "} 500\n",
        "cohort_gpu_sm_clock_hertz{" + u0 + "} 1980000000\n",
        "cohort_gpu_clock_throttle{" + u0 + ",reason=\"hw_thermal_slowdown\"} 1\n",
        "cohort_gpu_clock_throttle{" + u0 + ",reason=\"sw_power_cap\"} 0\n",
        "cohort_gpu_ecc_errors_total{" + u0 + ",error=\"uncorrected\"} 2\n",
        "cohort_gpu_compute_processes{" + u0 + "} 1\n", "cohort_gpu_last_xid{" + u0 + "} 79\n",
        std::string("cohort_gpu_info{gpu=\"1\",uuid=\"GPU-00000001-aaaa-bbbb-cccc-dddddddddddd\","
                    "name=\"odd \\\"name\\\" \\\\ here\"} 1\n"),
        std::string("cohort_gpu_up{gpu=\"2\",uuid=\"\"} 0\n"),
        std::string("# TYPE cohort_gpu_ecc_errors_total counter\n")}) {
    EXPECT_NE(text.find(line), std::string::npos) << "missing: " << line << "in:\n" << text;
  }
  // The bare device (uuid only) has no temperature series.
  EXPECT_EQ(text.find("cohort_gpu_temperature_celsius{gpu=\"3\""), std::string::npos);

  const std::string file = dir_ + "/metrics.prom";
  std::ofstream(file) << text;
  testing::Subprocess p({"/bin/sh", "-c", "/usr/bin/promtool check metrics < " + file}, {},
                        /*merge_stderr=*/true);
  const std::string out = p.read_all_stdout(20s);
  auto status = p.wait(20s);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out << "\n" << text;
  EXPECT_EQ(out, "") << text;  // no lint findings either
}

}  // namespace
}  // namespace cohort::launch

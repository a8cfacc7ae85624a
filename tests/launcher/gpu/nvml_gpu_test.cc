// The real NVML (libnvidia-ml.so.1 of the machine's driver), read through cohort's wrapper: every
// GPU it sees gives sane readings, the metrics text passes promtool when the machine has it (and
// a check of its shape when not), and the pre-flight finds nothing wrong with an idle machine.
// Skipped without NVML, failed instead under COHORT_REQUIRE_GPU=1 (scripts/gpu_check.sh). With
// COHORT_NVML_REPORT set, what was read goes there as JSON, for gpu_check's report.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "../../common/require_gpu.h"
#include "../../common/subprocess.h"
#include "cohort/base/environment.h"
#include "cohort/base/logging.h"
#include "gpu/gpu_monitor.h"
#include "gpu/gpu_preflight.h"
#include "gpu/gpu_text.h"
#include "gpu/nvml_library.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

class RealNvml : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = private_logger("nvml-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_),
                          "info");
    log_->set_level(spdlog::level::info);  // whatever LOGLEVEL says: the test reads these lines
    const EnvMap env = current_env();
    GpuMonitorOptions o = GpuMonitorOptions::from_env(env, "gpu", 1, true);
    monitor_ = std::make_unique<GpuMonitor>(o, log_);
    const bool on = monitor_->start();
    COHORT_SKIP_UNLESS_GPU_INPUT(on, "NVML is off: " << monitor_->off_reason());
    gpus_ = monitor_->snapshot();
    COHORT_SKIP_UNLESS_GPU_INPUT(!gpus_.empty(), "NVML sees no GPU");
  }

  std::shared_ptr<spdlog::logger> log_;
  std::ostringstream lines_;
  std::unique_ptr<GpuMonitor> monitor_;
  std::vector<GpuState> gpus_;
};

TEST_F(RealNvml, EveryGpuGivesSaneReadings) {
  using nlohmann::json;
  json report = json::array();
  for (const auto& g : gpus_) {
    SCOPED_TRACE(gpu_label(g));
    EXPECT_EQ(g.error, "");
    EXPECT_FALSE(g.name.empty());
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u) << g.uuid;
    ASSERT_TRUE(g.memory_total_bytes);
    EXPECT_GT(*g.memory_total_bytes, 1ull << 30);
    ASSERT_TRUE(g.memory_used_bytes);
    EXPECT_LE(*g.memory_used_bytes, *g.memory_total_bytes);
    ASSERT_TRUE(g.temperature_c);
    EXPECT_GE(*g.temperature_c, 5u);
    EXPECT_LE(*g.temperature_c, 110u);
    if (g.power_w) {
      EXPECT_GT(*g.power_w, 1.0);
      EXPECT_LT(*g.power_w, 2000.0);
    }
    if (g.power_limit_w && g.power_w) {
      EXPECT_LE(*g.power_w, *g.power_limit_w * 1.5);
    }
    if (g.sm_clock_mhz) {
      EXPECT_LT(*g.sm_clock_mhz, 5000u);
    }
    if (g.utilization_percent) {
      EXPECT_LE(*g.utilization_percent, 100u);
    }
    EXPECT_TRUE(g.throttle_reasons) << "no clocks-event reasons";
    EXPECT_TRUE(g.processes_known) << "NVML could not list the compute processes";
    json j{{"index", g.index},
           {"uuid", g.uuid},
           {"name", g.name},
           {"memory_total_bytes", *g.memory_total_bytes},
           {"memory_used_bytes", *g.memory_used_bytes},
           {"temperature_c", *g.temperature_c},
           {"xid_watched", g.xid_watched},
           {"processes", g.processes.size()},
           {"condition", describe_condition(g)}};
    if (g.power_w) j["power_w"] = *g.power_w;
    if (g.power_limit_w) j["power_limit_w"] = *g.power_limit_w;
    if (g.sm_clock_mhz) j["sm_clock_mhz"] = *g.sm_clock_mhz;
    if (g.memory_clock_mhz) j["memory_clock_mhz"] = *g.memory_clock_mhz;
    if (g.utilization_percent) j["utilization_percent"] = *g.utilization_percent;
    if (g.throttle_reasons) j["throttle_reasons"] = throttle_reason_words(*g.throttle_reasons);
    if (g.ecc_uncorrected) j["ecc_uncorrected"] = *g.ecc_uncorrected;
    if (g.ecc_corrected) j["ecc_corrected"] = *g.ecc_corrected;
    if (g.remapped_rows_uncorrectable) j["remap_pending"] = g.remap_pending;
    report.push_back(j);
  }
  if (const char* path = std::getenv("COHORT_NVML_REPORT"); path && *path) {
    json doc{{"gpus", report},
             {"metrics_bytes", monitor_->metrics_text().size()},
             {"preflight_problems", json::array()}};
    for (const auto& p : preflight_problems(monitor_->node_gpus(), gpus_))
      doc["preflight_problems"].push_back(p.gpu + ": " + p.reason);
    std::ofstream(path) << doc.dump() << "\n";
  }
}

TEST_F(RealNvml, TheMetricsTextPassesPromtool) {
  const std::string text = monitor_->metrics_text();
  for (const auto& g : gpus_) {
    const std::string series =
        "cohort_gpu_memory_total_bytes{gpu=\"" + std::to_string(g.index) + "\",uuid=\"" + g.uuid;
    EXPECT_NE(text.find(series), std::string::npos) << text;
  }
  // The format's shape, checked here too (a bare GPU machine has no promtool): comments, or
  // name{labels} value.
  const std::regex line(
      R"(# (HELP|TYPE) cohort_gpu_[a-z_]+ .+|cohort_gpu_[a-z_]+\{[^}]*\} -?[0-9][0-9.e+-]*)");
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);)
    EXPECT_TRUE(std::regex_match(l, line)) << "not a line of the text format: " << l;
  std::string promtool;
  for (const char* p : {"/usr/bin/promtool", "/usr/local/bin/promtool"})
    if (::access(p, X_OK) == 0) promtool = p;
  RecordProperty("promtool", promtool.empty() ? "absent" : "ran");
  if (promtool.empty()) return;
  char file[] = "/tmp/cohort_nvml_metrics_XXXXXX";
  const int fd = ::mkstemp(file);
  ASSERT_GE(fd, 0);
  ::close(fd);
  std::ofstream(file) << text;
  cohort::testing::Subprocess p({"/bin/sh", "-c", promtool + " check metrics < " + file}, {}, true);
  const std::string out = p.read_all_stdout(20s);
  auto status = p.wait(20s);
  ::unlink(file);
  ASSERT_TRUE(status);
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << out;
  EXPECT_EQ(out, "") << text;
}

TEST_F(RealNvml, ThePreflightPassesOnAnIdleMachine) {
  // Nothing of this test's uses the GPU: a process holding memory is another program's, and a
  // pending error is the machine's. Either is worth failing for.
  const auto problems = preflight_problems(monitor_->node_gpus(), gpus_);
  for (const auto& p : problems) ADD_FAILURE() << p.gpu << ": " << p.reason;
  EXPECT_NO_THROW(run_gpu_preflight(*monitor_, "this machine", *log_));
  log_->flush();
  EXPECT_NE(lines_.str().find("GPU pre-flight passed on this machine: GPU 0"), std::string::npos)
      << lines_.str();
  EXPECT_NE(lines_.str().find("GPU health: NVML (driver "), std::string::npos) << lines_.str();
}

}  // namespace
}  // namespace cohort::launch

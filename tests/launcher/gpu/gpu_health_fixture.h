// GPU health in-process, through the stand-in NVML (tests/launcher/gpu/fake_nvml): a healthy
// device's script, and a fixture that writes the script, opens a GpuMonitor on the stand-in and
// keeps its log lines.
#pragma once

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "cohort/base/logging.h"
#include "gpu/gpu_monitor.h"

namespace cohort::launch {

inline const std::string kFakeNvml = std::string(FAKE_NVML_DIR) + "/libnvidia-ml.so.1";

// A healthy H200-like device; tests change what they need.
inline std::string device(int i, const std::string& extra = "") {
  return R"({"uuid": "GPU-0000000)" + std::to_string(i) +
         R"(-aaaa-bbbb-cccc-dddddddddddd", "name": "NVIDIA H200",
    "utilization": {"gpu": 97, "memory": 40}, "memory": {"used": 1073741824, "total": 150754820096},
    "temperature": 60, "power_mw": 500000, "power_limit_mw": 700000,
    "clocks_mhz": {"sm": 1980, "mem": 2619}, "throttle": 0,
    "ecc": {"uncorrected": 0, "corrected": 0}, "processes": [],
    "remapped_rows": {"corrected": 0, "uncorrected": 0, "pending": false, "failure": false},
    "retired_pages_pending": false)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

class GpuHealth : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cohort_gpu_health_test_XXXXXX";
    dir_ = ::mkdtemp(templ);
    script_ = dir_ + "/nvml.json";
    ::setenv("COHORT_FAKE_NVML_SCRIPT", script_.c_str(), 1);
    ::unsetenv("COHORT_FAKE_NVML_LOG");
    log_ = private_logger("gpu-test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines_),
                          "info");
    log_->set_level(spdlog::level::info);
  }
  void TearDown() override {
    ::unsetenv("COHORT_FAKE_NVML_SCRIPT");
    ::unsetenv("COHORT_FAKE_NVML_LOG");
    std::error_code ec;
    if (!HasFailure()) std::filesystem::remove_all(dir_, ec);
  }
  void script(const std::string& devices, const std::string& top = "") {
    std::ofstream(script_) << "{" << top << (top.empty() ? "" : ", ") << "\"devices\": [" << devices
                           << "]}";
  }
  std::unique_ptr<GpuMonitor> monitor(std::optional<std::string> visible = std::nullopt,
                                      int nproc = 1, std::string spec = "1") {
    GpuMonitorOptions o;
    o.library = kFakeNvml;
    o.cuda_visible_devices = std::move(visible);
    o.nproc = nproc;
    o.nproc_spec = std::move(spec);
    auto m = std::make_unique<GpuMonitor>(o, log_);
    m->start();
    return m;
  }
  std::string log_text() {
    log_->flush();
    return lines_.str();
  }

  std::string dir_, script_;
  std::ostringstream lines_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace cohort::launch

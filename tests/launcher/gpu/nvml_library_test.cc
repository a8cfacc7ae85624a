// The NVML wrapper reads every value the stand-in library is scripted with, leaves unsupported
// readings empty, stops at a lost GPU, and names a missing library or a failed init.
#include "gpu/nvml_library.h"

#include "cohort/error.h"
#include "gpu/gpu_text.h"
#include "gpu/nvml_api.h"
#include "gpu_health_fixture.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST_F(GpuHealth, TheWrapperReadsEveryScriptedValue) {
  script(device(0, R"("throttle": 72, "temperature": 91, "ecc": {"uncorrected": 2, "corrected": 5},
    "processes": [{"pid": 4242, "memory": 2147483648}, {"pid": 4243}],
    "remapped_rows": {"corrected": 1, "uncorrected": 3, "pending": true, "failure": true},
    "retired_pages_pending": true)"),
         R"("driver": "550.54.15")");
  auto lib = NvmlLibrary::open(kFakeNvml);
  EXPECT_EQ(lib->driver_version(), "550.54.15");
  ASSERT_EQ(lib->device_count(), 1);
  GpuState s = lib->read_device(0);
  EXPECT_EQ(s.error, "");
  EXPECT_EQ(s.uuid, "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd");
  EXPECT_EQ(s.name, "NVIDIA H200");
  EXPECT_EQ(s.utilization_percent, 97u);
  EXPECT_EQ(s.memory_utilization_percent, 40u);
  EXPECT_EQ(s.memory_used_bytes, 1073741824u);
  EXPECT_EQ(s.memory_total_bytes, 150754820096u);
  EXPECT_EQ(s.temperature_c, 91u);
  EXPECT_EQ(s.power_w, 500.0);
  EXPECT_EQ(s.power_limit_w, 700.0);
  EXPECT_EQ(s.sm_clock_mhz, 1980u);
  EXPECT_EQ(s.memory_clock_mhz, 2619u);
  EXPECT_EQ(s.throttle_reasons, nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown);
  EXPECT_EQ(s.ecc_uncorrected, 2u);
  EXPECT_EQ(s.ecc_corrected, 5u);
  ASSERT_TRUE(s.processes_known);
  ASSERT_EQ(s.processes.size(), 2u);
  EXPECT_EQ(s.processes[0].pid, 4242);
  EXPECT_EQ(s.processes[0].memory_bytes, 2147483648u);
  EXPECT_EQ(s.processes[1].memory_bytes, std::nullopt);  // NVML_VALUE_NOT_AVAILABLE
  EXPECT_EQ(s.remapped_rows_uncorrectable, 3u);
  EXPECT_TRUE(s.remap_pending);
  EXPECT_TRUE(s.remap_failed);
  EXPECT_TRUE(s.retired_pages_pending);
}

TEST_F(GpuHealth, ReadingsNvmlDoesNotSupportStayEmpty) {
  script(R"({"uuid": "GPU-x", "name": "old board", "temperature": 40})");
  auto lib = NvmlLibrary::open(kFakeNvml);
  GpuState s = lib->read_device(0);
  EXPECT_EQ(s.temperature_c, 40u);
  EXPECT_FALSE(s.power_w || s.utilization_percent || s.ecc_uncorrected || s.throttle_reasons);
  EXPECT_FALSE(s.processes_known);
  EXPECT_EQ(describe_condition(s), "");
  EXPECT_EQ(failure_note(s, {}), "");
}

TEST_F(GpuHealth, ALostGpuIsSaidAndNotReadFurther) {
  script(device(0) + "," + device(1, R"("lost": true)"));
  auto lib = NvmlLibrary::open(kFakeNvml);
  GpuState s = lib->read_device(1);
  EXPECT_NE(s.error.find("GPU is lost"), std::string::npos) << s.error;
  EXPECT_FALSE(s.temperature_c || s.memory_total_bytes);
  EXPECT_EQ(describe_condition(s), "GPU is lost");
  EXPECT_EQ(lib->read_device(0).error, "");
}

TEST_F(GpuHealth, AMissingLibraryIsAnNvmlErrorNamingIt) {
  try {
    NvmlLibrary::open(dir_ + "/nowhere/libnvidia-ml.so.1");
    FAIL() << "opened a library that does not exist";
  } catch (const NvmlError& e) {
    EXPECT_EQ(e.code(), -1);
    EXPECT_NE(std::string(e.what()).find(dir_ + "/nowhere/libnvidia-ml.so.1"), std::string::npos)
        << e.what();
  }
}

TEST_F(GpuHealth, AFailedInitIsAnNvmlErrorInNvmlsWords) {
  script("", R"("init": 9)");
  try {
    NvmlLibrary::open(kFakeNvml);
    FAIL() << "nvmlInit_v2 failed, yet the library opened";
  } catch (const NvmlError& e) {
    EXPECT_EQ(e.code(), nvml::kErrorDriverNotLoaded);
    EXPECT_NE(std::string(e.what()).find("nvmlInit_v2 failed: Driver Not Loaded (9)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cohort::launch

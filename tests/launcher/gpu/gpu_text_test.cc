// GPU conditions in words: throttle reasons, Xids, a condition in a few words, a failure note.
#include "gpu/gpu_text.h"

#include "gpu/nvml_api.h"
#include "gpu_health_fixture.h"

namespace cohort::launch {
namespace {

using namespace std::chrono_literals;

TEST_F(GpuHealth, ThrottleReasonsAndXidsInWords) {
  EXPECT_EQ(throttle_reason_words(nvml::kReasonGpuIdle | nvml::kReasonHwThermalSlowdown |
                                  nvml::kReasonSwPowerCap),
            (std::vector<std::string>{"HW thermal slowdown", "SW power cap", "idle"}));
  EXPECT_TRUE(throttle_reason_words(0).empty());
  EXPECT_EQ(describe_xid(79), "Xid 79 (GPU has fallen off the bus)");
  EXPECT_EQ(describe_xid(48), "Xid 48 (double-bit ECC error)");
  EXPECT_EQ(describe_xid(12345), "Xid 12345");
}

TEST_F(GpuHealth, AConditionInAFewWords) {
  GpuState g;
  g.index = 3;
  g.temperature_c = 91;
  g.power_limit_w = 700;
  g.throttle_reasons = nvml::kReasonHwThermalSlowdown | nvml::kReasonHwSlowdown;
  EXPECT_EQ(describe_condition(g), "thermal throttle at 91 C");
  g.throttle_reasons = nvml::kReasonSwPowerCap;
  EXPECT_EQ(describe_condition(g), "power cap at 700 W");
  g.throttle_reasons = nvml::kReasonHwSlowdown;
  EXPECT_EQ(describe_condition(g), "HW slowdown");
  g.throttle_reasons = nvml::kReasonGpuIdle | nvml::kReasonApplicationsClocksSetting;
  EXPECT_EQ(describe_condition(g), "");  // nothing that slows work
  g.ecc_uncorrected = 1;
  g.xids.push_back({3, 63, 0});
  EXPECT_EQ(describe_condition(g),
            "1 uncorrected ECC error, after Xid 63 (ECC page retirement or row remapping "
            "recorded)");
}

TEST_F(GpuHealth, AFailureNoteNamesWhatBearsOnAFailureOnly) {
  GpuState g;
  g.index = 0;
  g.uuid = "GPU-abc";
  g.name = "NVIDIA H200";
  g.temperature_c = 95;
  g.power_limit_w = 700;
  g.throttle_reasons = nvml::kReasonSwPowerCap;  // slows, does not kill
  EXPECT_EQ(failure_note(g, {}), "");
  g.throttle_reasons = nvml::kReasonSwThermalSlowdown;
  g.ecc_uncorrected = 2;
  g.remap_pending = true;
  EXPECT_EQ(failure_note(g, {{0, 79, 1}, {0, 79, 2}, {0, 48, 3}}),
            "GPU 0 (GPU-abc, NVIDIA H200): Xid 79 (GPU has fallen off the bus); Xid 48 "
            "(double-bit ECC error); 2 uncorrected ECC errors since the driver loaded; a row "
            "remap is pending (reset the GPU); thermal throttle at 95 C");
}

}  // namespace
}  // namespace cohort::launch

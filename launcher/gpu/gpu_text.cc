#include "gpu/gpu_text.h"

#include <set>

#include "gpu/nvml_api.h"

namespace cohort::launch {

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

namespace {

constexpr uint64_t kThermal = nvml::kReasonHwThermalSlowdown | nvml::kReasonSwThermalSlowdown;

// The throttle words that describe_condition and failure_note share. `with_power_cap`: the SW
// power cap (common under full load: it slows, it does not endanger) counts too.
void slowdown_words(const GpuState& g, bool with_power_cap, std::vector<std::string>* parts) {
  if (!g.throttle_reasons) return;
  const uint64_t r = *g.throttle_reasons;
  if (r & kThermal) {
    parts->push_back(g.temperature_c
                         ? "thermal throttle at " + std::to_string(*g.temperature_c) + " C"
                         : std::string("thermal throttle"));
  }
  if (r & nvml::kReasonHwPowerBrakeSlowdown) parts->push_back("HW power brake");
  // HW slowdown accompanies the two above; alone it is its own cause.
  if ((r & nvml::kReasonHwSlowdown) && !(r & (kThermal | nvml::kReasonHwPowerBrakeSlowdown)))
    parts->push_back("HW slowdown");
  if (with_power_cap && (r & nvml::kReasonSwPowerCap)) {
    const auto& w = g.power_limit_w ? g.power_limit_w : g.power_w;
    parts->push_back(w ? "power cap at " + std::to_string(static_cast<int>(*w + 0.5)) + " W"
                       : std::string("power cap"));
  }
}

std::string plural(uint64_t n, const std::string& one) {
  return std::to_string(n) + " " + one + (n == 1 ? "" : "s");
}

}  // namespace

std::string gpu_label(const GpuState& g) {
  std::string extra = g.uuid;
  if (!g.name.empty()) extra += (extra.empty() ? "" : ", ") + g.name;
  return "GPU " + std::to_string(g.index) + (extra.empty() ? "" : " (" + extra + ")");
}

const std::vector<ThrottleReason>& throttle_reasons() {
  static const std::vector<ThrottleReason> kReasons = {
      {nvml::kReasonHwThermalSlowdown, "hw_thermal_slowdown", "HW thermal slowdown"},
      {nvml::kReasonHwPowerBrakeSlowdown, "hw_power_brake", "HW power brake"},
      {nvml::kReasonHwSlowdown, "hw_slowdown", "HW slowdown"},
      {nvml::kReasonSwThermalSlowdown, "sw_thermal_slowdown", "SW thermal slowdown"},
      {nvml::kReasonSwPowerCap, "sw_power_cap", "SW power cap"},
      {nvml::kReasonSyncBoost, "sync_boost", "sync boost"},
      {nvml::kReasonApplicationsClocksSetting, "applications_clocks_setting",
       "applications clocks setting"},
      {nvml::kReasonDisplayClockSetting, "display_clock_setting", "display clock setting"},
      {nvml::kReasonGpuIdle, "gpu_idle", "idle"},
  };
  return kReasons;
}

std::vector<std::string> throttle_reason_words(uint64_t bits) {
  std::vector<std::string> out;
  for (const auto& r : throttle_reasons())
    if (bits & r.bit) out.push_back(r.words);
  return out;
}

std::string xid_meaning(uint64_t xid) {
  switch (xid) {
    case 13:
      return "graphics engine exception";
    case 31:
      return "GPU memory page fault";
    case 32:
      return "invalid or corrupted push buffer stream";
    case 43:
      return "GPU stopped processing";
    case 45:
      return "preemptive cleanup, due to previous errors";
    case 48:
      return "double-bit ECC error";
    case 61:
      return "internal micro-controller breakpoint/warning";
    case 62:
      return "internal micro-controller halt";
    case 63:
      return "ECC page retirement or row remapping recorded";
    case 64:
      return "ECC page retirement or row remapping failed";
    case 74:
      return "NVLink error";
    case 79:
      return "GPU has fallen off the bus";
    case 92:
      return "high single-bit ECC error rate";
    case 94:
      return "contained ECC error";
    case 95:
      return "uncontained ECC error";
    case 109:
      return "context switch timeout";
    case 119:
      return "GSP RPC timeout";
    case 120:
      return "GSP error";
    case 140:
      return "unrecovered ECC error";
    case 999:
      return "an Xid NVML could not name";
    default:
      return {};
  }
}

std::string describe_xid(uint64_t xid) {
  const std::string m = xid_meaning(xid);
  return "Xid " + std::to_string(xid) + (m.empty() ? "" : " (" + m + ")");
}

std::string describe_condition(const GpuState& g) {
  if (!g.error.empty()) return "GPU is lost";
  std::vector<std::string> parts;
  slowdown_words(g, true, &parts);
  if (g.ecc_uncorrected && *g.ecc_uncorrected > 0)
    parts.push_back(plural(*g.ecc_uncorrected, "uncorrected ECC error"));
  if (!g.xids.empty()) parts.push_back("after " + describe_xid(g.xids.back().xid));
  return join(parts, ", ");
}

std::string failure_note(const GpuState& g, const std::vector<XidEvent>& xids) {
  if (!g.error.empty()) return gpu_label(g) + ": " + g.error;
  std::vector<std::string> parts;
  std::set<uint64_t> said;
  for (const auto& x : xids)
    if (said.insert(x.xid).second) parts.push_back(describe_xid(x.xid));
  if (g.ecc_uncorrected && *g.ecc_uncorrected > 0)
    parts.push_back(plural(*g.ecc_uncorrected, "uncorrected ECC error") +
                    " since the driver loaded");
  if (g.remap_failed) parts.push_back("row remapping failed (the GPU needs service)");
  if (g.remap_pending) parts.push_back("a row remap is pending (reset the GPU)");
  if (g.retired_pages_pending) parts.push_back("page retirement pending (reset the GPU)");
  slowdown_words(g, false, &parts);
  if (parts.empty()) return {};
  return gpu_label(g) + ": " + join(parts, "; ");
}

}  // namespace cohort::launch

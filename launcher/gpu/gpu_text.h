// A GPU's condition in words, from what NVML said (GpuState, gpu_state.h): for the straggler
// line, the failure summary and the pre-flight check. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/gpu_state.h"

namespace cohort::launch {

// "GPU 0 (GPU-5fd3a1c2-..., NVIDIA H200)": how the messages name a GPU (index, UUID, model;
// the parts NVML did not give are left out).
std::string gpu_label(const GpuState& gpu);

// `parts` joined with `sep` between them ("" for none).
std::string join(const std::vector<std::string>& parts, const char* sep);

// The clocks-event (throttle) reasons set in `bits`, in words, most serious first:
// "HW thermal slowdown", "HW power brake", "HW slowdown", "SW thermal slowdown", "SW power cap",
// "sync boost", "applications clocks setting", "display clock setting", "idle".
std::vector<std::string> throttle_reason_words(uint64_t bits);

// One reason as a metric label: {bit, "hw_thermal_slowdown"}, ... for every reason NVML defines.
struct ThrottleReason {
  uint64_t bit;
  const char* label;
  const char* words;
};
const std::vector<ThrottleReason>& throttle_reasons();

// What Xid `xid` means, in a few words, from NVIDIA's "Xid Errors" document
// (https://docs.nvidia.com/deploy/xid-errors/): "GPU has fallen off the bus" for 79. "" for an
// Xid cohort has no words for.
std::string xid_meaning(uint64_t xid);
// "Xid 79 (GPU has fallen off the bus)", or "Xid 12" when it has no words.
std::string describe_xid(uint64_t xid);

// A GPU's condition in a few words, when NVML says something that slows or endangers work:
// "thermal throttle at 91 C", "power cap at 700 W", "HW slowdown", "2 uncorrected ECC errors",
// "after Xid 63 (...)", "GPU is lost"; several joined by ", ". "" when nothing is notable (idle
// clocks and application clock settings are not).
std::string describe_condition(const GpuState& gpu);

// What bears on a worker's death: a lost GPU, the Xids in `xids`, uncorrected ECC errors, a
// failed or pending row remap, retired pages pending, a thermal or hardware slowdown. Prefixed
// with gpu_label(); "" when there is nothing of the kind.
std::string failure_note(const GpuState& gpu, const std::vector<XidEvent>& xids);

}  // namespace cohort::launch

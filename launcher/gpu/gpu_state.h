// What NVML said about one GPU at one moment: plain values, filled by NvmlLibrary::read_device
// (nvml_library.h) and read by the pure functions that turn them into words and metrics
// (gpu_text.h) and into a pre-flight verdict (gpu_preflight.h). A reading NVML does not support
// on a GPU (power on some boards, ECC on GPUs without it) is left empty, never guessed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cohort::launch {

// A compute process holding memory on a GPU.
struct GpuProcess {
  int pid = 0;
  std::optional<uint64_t> memory_bytes;  // empty when NVML cannot tell (no permission, MIG)
};

// An Xid event: the driver's report of a GPU error (NVIDIA's "Xid Errors" document).
struct XidEvent {
  int gpu = 0;           // NVML index
  uint64_t xid = 0;      // 999: an Xid NVML could not name
  double wall_time = 0;  // seconds since the epoch, when cohortrun read it
};

struct GpuState {
  int index = 0;  // NVML's index (PCI bus order)
  std::string uuid;
  std::string name;
  // Set when the GPU cannot be read at all ("GPU is lost": fallen off the bus); the readings
  // below are then empty.
  std::string error;

  std::optional<unsigned> utilization_percent;         // a kernel was running
  std::optional<unsigned> memory_utilization_percent;  // memory was read or written
  std::optional<uint64_t> memory_used_bytes;
  std::optional<uint64_t> memory_total_bytes;
  std::optional<unsigned> temperature_c;
  std::optional<double> power_w;
  std::optional<double> power_limit_w;  // the enforced limit
  std::optional<unsigned> sm_clock_mhz;
  std::optional<unsigned> memory_clock_mhz;
  // nvmlClocksEventReasons bits (nvml_api.h): why the clocks are low now.
  std::optional<uint64_t> throttle_reasons;
  std::optional<uint64_t> ecc_uncorrected;  // volatile: since the driver last loaded
  std::optional<uint64_t> ecc_corrected;
  std::vector<GpuProcess> processes;  // compute processes
  bool processes_known = false;       // false: NVML could not list them
  // Row remapping (A100 and later) and page retirement (earlier GPUs): a remap or retirement
  // waits for a GPU reset; a failed remap means the GPU needs service.
  std::optional<unsigned> remapped_rows_uncorrectable;
  bool remap_pending = false;
  bool remap_failed = false;
  bool retired_pages_pending = false;
  // Xid events read since cohortrun began watching (the last few), and how many in all.
  std::vector<XidEvent> xids;
  uint64_t xid_count = 0;
  bool xid_watched = false;  // false: NVML could not register for this GPU's Xid events
};

}  // namespace cohort::launch

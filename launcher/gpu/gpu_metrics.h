// GPU health in Prometheus' text exposition format (version 0.0.4): one family per reading, each
// with its HELP and TYPE lines, every series labelled with the GPU's NVML index (`gpu`) and UUID
// (`uuid`). A metrics endpoint appends this text to its own. Pure; thread-safe.
//
//   cohort_gpu_info{gpu,uuid,name}           1 per GPU NVML sees
//   cohort_gpu_up                            1 when NVML can read the GPU, 0 when it is lost
//   cohort_gpu_utilization_ratio             share of the last sample period a kernel ran
//   cohort_gpu_memory_utilization_ratio      share of it memory was read or written
//   cohort_gpu_memory_used_bytes, cohort_gpu_memory_total_bytes
//   cohort_gpu_temperature_celsius
//   cohort_gpu_power_watts, cohort_gpu_power_limit_watts
//   cohort_gpu_sm_clock_hertz, cohort_gpu_memory_clock_hertz
//   cohort_gpu_clock_throttle{reason}        1 while that clocks-event reason is active, else 0
//   cohort_gpu_ecc_errors_total{error}       volatile ECC errors (corrected, uncorrected)
//   cohort_gpu_xid_events_total              Xid events read since cohortrun began watching
//   cohort_gpu_last_xid                      the last of them (0: none)
//   cohort_gpu_compute_processes             processes holding memory on the GPU
//   cohort_gpu_row_remap_pending, cohort_gpu_row_remap_failed   (GPUs that remap rows: A100 on)
//
// A reading NVML does not give for a GPU has no series for that GPU; a family no GPU has is left
// out whole.
#pragma once

#include <string>
#include <vector>

#include "gpu/gpu_state.h"

namespace cohort::launch {

// The text for `gpus` (every line ends in '\n'); "" when `gpus` is empty.
std::string gpu_metrics_text(const std::vector<GpuState>& gpus);

}  // namespace cohort::launch

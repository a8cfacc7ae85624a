// What this node offers: CPU cores (this process's affinity) and GPUs (counted without linking
// CUDA), and --nproc-per-node resolved against them.
#pragma once

#include <map>
#include <string>

namespace cohort::launch {

// CPUs this process may run on (sched_getaffinity), at least 1.
int cpu_count();

// GPUs visible to workers: CUDA_VISIBLE_DEVICES when set, else /proc/driver/nvidia/gpus, else the
// CUDA driver (dlopen'd, never linked). 0 when there is none.
int gpu_count(const std::map<std::string, std::string>& env);

// Intel GPUs (torch.xpu's devices): ZE_AFFINITY_MASK's entries when set, else the data-center
// GPUs among the DRM render nodes under `sysfs` (vendor 0x8086, class 0x0380). 0 when none.
int xpu_count(const std::map<std::string, std::string>& env, const std::string& sysfs = "/sys");

// Resolves "N", "cpu", "gpu", "xpu" or "auto" (CUDA GPUs if any, else Intel GPUs, else CPUs), as
// torchrun's determine_local_world_size does. Throws UsageError with a message for the user.
int resolve_nproc_per_node(const std::string& spec, const std::map<std::string, std::string>& env);

}  // namespace cohort::launch

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

// Resolves "N", "cpu", "gpu" or "auto" (GPUs if any, else CPUs). Throws std::invalid_argument
// with a message for the user.
int resolve_nproc_per_node(const std::string& spec, const std::map<std::string, std::string>& env);

}  // namespace cohort::launch

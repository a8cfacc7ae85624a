// --gpu-preflight: before a node joins a job, every GPU its workers will use (GpuMonitor's
// node_gpus: CUDA_VISIBLE_DEVICES, --devices, --nproc-per-node) must be
//   - visible to NVML,
//   - free: no other process holding memory on it,
//   - without pending errors: no uncorrected ECC error since the driver loaded, no Xid event
//     since cohortrun began watching, no failed or pending row remap, no page retirement pending.
// A GPU that fails is named with every reason; the node then does not join the round: cohortrun
// exits 1 with the summary. Without NVML, the check says once that GPU health is off (GpuMonitor)
// and the node goes on.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cohort/error.h"
#include "gpu/gpu_state.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class GpuMonitor;

// A GPU failed the pre-flight; what() is the whole summary (one line per GPU).
class GpuPreflightError : public virtual Error {
 public:
  explicit GpuPreflightError(const std::string& what) : Error(what) {}
};

struct GpuProblem {
  std::string gpu;     // "GPU 1 (GPU-8f2a..., NVIDIA H200)", or the name CUDA gives it
  std::string reason;  // every reason, joined by "; "
};

// The command name of process `pid` (/proc/<pid>/comm), "" when it cannot be read.
std::string process_name(int pid);

// What is wrong with the GPUs CUDA calls `names` (node_gpu_names, gpu_monitor.h), given NVML's
// reading of every GPU (`gpus`, GpuMonitor::snapshot). `name_of` names a process holding memory.
// Empty when every check passes. Pure apart from `name_of`.
std::vector<GpuProblem> preflight_problems(
    const std::vector<std::string>& names, const std::vector<GpuState>& gpus,
    const std::function<std::string(int pid)>& name_of = process_name);

// The pre-flight on this node (`host` names it). Throws GpuPreflightError with the summary when
// a GPU fails; logs one line when all pass. Returns at once when GPU health is off. REQUIRES:
// monitor.start() was called.
void run_gpu_preflight(GpuMonitor& monitor, const std::string& host, spdlog::logger& log);

}  // namespace cohort::launch

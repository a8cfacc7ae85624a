// GpuMonitor: what cohortrun's node agent knows about its GPUs, through NVML. The GPU features
// use it: the metrics endpoint (metrics_text), the straggler line (condition_of_rank), the
// failure summary (failure_note), and --gpu-preflight (gpu_preflight.h).
//
// start() opens NVML (nvml_library.h) and begins watching Xid events. Without NVML (no
// libnvidia-ml.so.1, or nvmlInit failing: a machine without the NVIDIA driver), it logs ONE line
// saying that GPU health is off and why; every method then answers "nothing" (an empty text, no
// note), and nothing else about the job changes.
//
// Local ranks map to GPUs as CUDA numbers them for the workers: local rank i uses the i-th GPU of
// CUDA_VISIBLE_DEVICES (which --devices sets), else GPU i; with more workers than GPUs, they
// share them in turn (i modulo their number). Indices in CUDA_VISIBLE_DEVICES are taken as NVML's
// (PCI bus order: CUDA's too under CUDA_DEVICE_ORDER=PCI_BUS_ID, and on nodes of one GPU model);
// UUIDs (GPU-...) are matched by prefix, as CUDA matches them.
//
// Thread safety: every method may be called from any thread (one mutex; an NVML read of a GPU
// takes a few milliseconds at most).
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cohort/base/environment.h"
#include "gpu/gpu_state.h"

namespace spdlog {
class logger;
}

namespace cohort::launch {

class NvmlLibrary;

struct GpuMonitorOptions {
  // What dlopen opens: COHORT_NVML_LIBRARY when set (a path, for an NVML outside the loader's
  // search path), else libnvidia-ml.so.1.
  std::string library = "libnvidia-ml.so.1";
  std::optional<std::string> cuda_visible_devices;  // as the workers get it
  std::string nproc_spec = "1";                     // --nproc-per-node as given: N, gpu, auto...
  int nproc = 1;                                    // workers on this node
  // A GPU feature was asked for (--gpu-preflight, a metrics endpoint): the line saying that GPU
  // health is off is a warning, not information.
  bool requested = false;

  // The options for a node agent with environment `env` (library and CUDA_VISIBLE_DEVICES).
  static GpuMonitorOptions from_env(const EnvMap& env, std::string nproc_spec, int nproc,
                                    bool requested);
};

// The GPUs the node's workers use, in local-rank order, as CUDA names them ("0", "GPU-8f2a..."):
// CUDA_VISIBLE_DEVICES's entries when it is set (up to the first invalid one, as CUDA reads it),
// else the first `nproc` of the `nvml_count` GPUs, all of them for --nproc-per-node gpu or auto.
std::vector<std::string> node_gpu_names(const std::optional<std::string>& cuda_visible_devices,
                                        const std::string& nproc_spec, int nproc, int nvml_count);

// The NVML index of the GPU CUDA calls `name` (an index, or a UUID or its prefix) among `gpus`;
// nullopt when NVML sees no such GPU.
std::optional<int> nvml_index_of(const std::string& name, const std::vector<GpuState>& gpus);

class GpuMonitor {
 public:
  // Nothing is opened before start(). `log` gets the line saying whether GPU health is on.
  GpuMonitor(GpuMonitorOptions options, std::shared_ptr<spdlog::logger> log);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Opens NVML and watches Xid events (once; later calls do nothing). Returns available().
  bool start();
  // NVML is open (after start()).
  bool available() const;
  // Why GPU health is off ("" while it is on, or before start()).
  std::string off_reason() const;

  // Every GPU NVML sees, read now, with the Xid events read so far. Empty when off.
  std::vector<GpuState> snapshot();
  // snapshot() in Prometheus' text format (gpu_metrics.h); "" when off.
  std::string metrics_text();
  // The GPUs of this node's workers, in local-rank order, as CUDA names them (node_gpu_names).
  std::vector<std::string> node_gpus() const;

  // The GPU of local rank `local_rank`, read now; nullopt when off or when NVML does not see it.
  std::optional<GpuState> state_of_rank(int local_rank);
  // That GPU's condition in a few words ("thermal throttle at 91 C"), for a straggler line; ""
  // when off or when nothing is notable (gpu_text.h, describe_condition).
  std::string condition_of_rank(int local_rank);

  // The workers of a round start now: failure notes name only the Xids read after this.
  void workers_started();
  // What NVML says about the GPU of a worker that failed (gpu_text.h, failure_note): "" when off
  // or when it says nothing that bears on a failure.
  std::string failure_note(int local_rank);

 private:
  // REQUIRES: mu_ held, nvml_ set. Reads pending Xid events into xids_.
  void poll_locked();
  // REQUIRES: mu_ held. The GPU of `local_rank` (nullopt when unknown), with its Xids.
  std::optional<GpuState> rank_state_locked(int local_rank);
  std::vector<GpuState> snapshot_locked();
  // REQUIRES: mu_ held, nvml_ set. GPU `index` read now, with its Xids.
  GpuState read_locked(int index);

  const GpuMonitorOptions options_;
  std::shared_ptr<spdlog::logger> log_;

  mutable std::mutex mu_;
  bool started_ = false;                // guarded by mu_
  std::string off_reason_;              // guarded by mu_
  std::unique_ptr<NvmlLibrary> nvml_;   // guarded by mu_
  std::vector<std::string> node_gpus_;  // guarded by mu_; set by start()
  std::vector<int> watched_;            // guarded by mu_: GPUs whose Xids are watched
  std::vector<XidEvent> xids_;          // guarded by mu_: the last few per GPU, oldest first
  std::vector<uint64_t> xid_counts_;    // guarded by mu_: by NVML index
  double round_start_ = 0;              // guarded by mu_: wall clock of workers_started()
};

}  // namespace cohort::launch

#include "gpu/gpu_metrics.h"

#include <functional>
#include <optional>

#include "cohort/base/prometheus.h"
#include "gpu/gpu_text.h"

namespace cohort::launch {
namespace {

using prom::escape_label;
using prom::number;

std::string labels(const GpuState& g, const std::string& extra = {}) {
  return "{gpu=\"" + std::to_string(g.index) + "\",uuid=\"" + escape_label(g.uuid) + "\"" +
         (extra.empty() ? "" : "," + extra) + "}";
}

// One family: the HELP and TYPE lines, then a series for every GPU `value` gives one.
void family(std::string* out, const std::vector<GpuState>& gpus, const char* name, const char* type,
            const char* help, const std::function<std::optional<double>(const GpuState&)>& value) {
  std::string series;
  for (const auto& g : gpus)
    if (auto v = value(g)) series += std::string(name) + labels(g) + " " + number(*v) + "\n";
  if (series.empty()) return;
  *out +=
      std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + series;
}

template <typename T>
std::optional<double> opt(const std::optional<T>& v, double scale = 1) {
  if (!v) return std::nullopt;
  return static_cast<double>(*v) * scale;
}

}  // namespace

std::string gpu_metrics_text(const std::vector<GpuState>& gpus) {
  if (gpus.empty()) return {};
  std::string out;
  out +=
      "# HELP cohort_gpu_info A GPU NVML sees on this node (value 1), with its model name.\n"
      "# TYPE cohort_gpu_info gauge\n";
  for (const auto& g : gpus)
    out += "cohort_gpu_info" + labels(g, "name=\"" + escape_label(g.name) + "\"") + " 1\n";
  family(&out, gpus, "cohort_gpu_up", "gauge",
         "1 when NVML can read the GPU, 0 when it cannot (a lost GPU).",
         [](const GpuState& g) { return g.error.empty() ? 1.0 : 0.0; });
  family(&out, gpus, "cohort_gpu_utilization_ratio", "gauge",
         "Share of NVML's last sample period during which a kernel ran on the GPU.",
         [](const GpuState& g) { return opt(g.utilization_percent, 0.01); });
  family(&out, gpus, "cohort_gpu_memory_utilization_ratio", "gauge",
         "Share of NVML's last sample period during which GPU memory was read or written.",
         [](const GpuState& g) { return opt(g.memory_utilization_percent, 0.01); });
  family(&out, gpus, "cohort_gpu_memory_used_bytes", "gauge", "GPU memory in use.",
         [](const GpuState& g) { return opt(g.memory_used_bytes); });
  family(&out, gpus, "cohort_gpu_memory_total_bytes", "gauge", "GPU memory in all.",
         [](const GpuState& g) { return opt(g.memory_total_bytes); });
  family(&out, gpus, "cohort_gpu_temperature_celsius", "gauge", "GPU core temperature.",
         [](const GpuState& g) { return opt(g.temperature_c); });
  family(&out, gpus, "cohort_gpu_power_watts", "gauge", "Power the GPU draws.",
         [](const GpuState& g) { return opt(g.power_w); });
  family(&out, gpus, "cohort_gpu_power_limit_watts", "gauge", "The GPU's enforced power limit.",
         [](const GpuState& g) { return opt(g.power_limit_w); });
  family(&out, gpus, "cohort_gpu_sm_clock_hertz", "gauge", "Current SM clock.",
         [](const GpuState& g) { return opt(g.sm_clock_mhz, 1e6); });
  family(&out, gpus, "cohort_gpu_memory_clock_hertz", "gauge", "Current memory clock.",
         [](const GpuState& g) { return opt(g.memory_clock_mhz, 1e6); });

  std::string throttle;
  for (const auto& g : gpus) {
    if (!g.throttle_reasons) continue;
    for (const auto& r : throttle_reasons()) {
      throttle += "cohort_gpu_clock_throttle" +
                  labels(g, std::string("reason=\"") + r.label + "\"") +
                  ((*g.throttle_reasons & r.bit) ? " 1\n" : " 0\n");
    }
  }
  if (!throttle.empty()) {
    out +=
        "# HELP cohort_gpu_clock_throttle 1 while NVML reports this reason for clocks below "
        "their maximum (nvmlClocksEventReasons).\n"
        "# TYPE cohort_gpu_clock_throttle gauge\n" +
        throttle;
  }

  std::string ecc;
  for (const auto& g : gpus) {
    if (g.ecc_corrected)
      ecc += "cohort_gpu_ecc_errors_total" + labels(g, "error=\"corrected\"") + " " +
             number(static_cast<double>(*g.ecc_corrected)) + "\n";
    if (g.ecc_uncorrected)
      ecc += "cohort_gpu_ecc_errors_total" + labels(g, "error=\"uncorrected\"") + " " +
             number(static_cast<double>(*g.ecc_uncorrected)) + "\n";
  }
  if (!ecc.empty()) {
    out +=
        "# HELP cohort_gpu_ecc_errors_total ECC errors since the driver last loaded (NVML's "
        "volatile counters).\n"
        "# TYPE cohort_gpu_ecc_errors_total counter\n" +
        ecc;
  }
  family(&out, gpus, "cohort_gpu_xid_events_total", "counter",
         "Xid events NVML reported since cohortrun began watching the GPU.",
         [](const GpuState& g) -> std::optional<double> {
           if (!g.xid_watched) return std::nullopt;
           return static_cast<double>(g.xid_count);
         });
  family(&out, gpus, "cohort_gpu_last_xid", "gauge",
         "The last Xid NVML reported for the GPU (0: none since cohortrun began watching).",
         [](const GpuState& g) -> std::optional<double> {
           if (!g.xid_watched) return std::nullopt;
           return g.xids.empty() ? 0.0 : static_cast<double>(g.xids.back().xid);
         });
  family(&out, gpus, "cohort_gpu_compute_processes", "gauge",
         "Compute processes holding memory on the GPU.",
         [](const GpuState& g) -> std::optional<double> {
           if (!g.processes_known) return std::nullopt;
           return static_cast<double>(g.processes.size());
         });
  family(&out, gpus, "cohort_gpu_row_remap_pending", "gauge",
         "1 when a row remap waits for a GPU reset.",
         [](const GpuState& g) -> std::optional<double> {
           if (!g.remapped_rows_uncorrectable) return std::nullopt;
           return g.remap_pending ? 1.0 : 0.0;
         });
  family(&out, gpus, "cohort_gpu_row_remap_failed", "gauge",
         "1 when a row remap failed (the GPU needs service).",
         [](const GpuState& g) -> std::optional<double> {
           if (!g.remapped_rows_uncorrectable) return std::nullopt;
           return g.remap_failed ? 1.0 : 0.0;
         });
  return out;
}

}  // namespace cohort::launch

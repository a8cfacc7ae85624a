#include "gpu/gpu_preflight.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <set>

#include "gpu/gpu_monitor.h"
#include "gpu/gpu_text.h"

namespace cohort::launch {
namespace {

std::string memory_words(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 30)) {
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  } else {
    std::snprintf(buf, sizeof buf, "%.0f MiB", static_cast<double>(bytes) / (1ull << 20));
  }
  return buf;
}

std::string process_words(const GpuProcess& p, const std::function<std::string(int)>& name_of) {
  std::string s = "pid " + std::to_string(p.pid);
  if (std::string n = name_of ? name_of(p.pid) : std::string(); !n.empty()) s += " (" + n + ")";
  if (p.memory_bytes) s += ", " + memory_words(*p.memory_bytes);
  return s;
}

// "2 GPUs: 0, 1" / "no GPU".
std::string what_nvml_sees(const std::vector<GpuState>& gpus) {
  if (gpus.empty()) return "NVML sees no GPU";
  std::vector<std::string> idx;
  for (const auto& g : gpus) idx.push_back(std::to_string(g.index));
  return "NVML sees " + std::to_string(gpus.size()) + " GPU" + (gpus.size() == 1 ? "" : "s") +
         ": " + join(idx, ", ");
}

std::vector<std::string> reasons_of(const GpuState& g,
                                    const std::function<std::string(int)>& name_of) {
  std::vector<std::string> r;
  if (!g.error.empty()) {
    r.push_back(g.error);
    return r;
  }
  if (!g.processes.empty()) {
    std::vector<std::string> ps;
    for (const auto& p : g.processes) ps.push_back(process_words(p, name_of));
    r.push_back(g.processes.size() == 1 ? "held by another process: " + ps.front()
                                        : "held by " + std::to_string(g.processes.size()) +
                                              " other processes: " + join(ps, "; "));
  }
  if (g.ecc_uncorrected && *g.ecc_uncorrected > 0) {
    r.push_back(std::to_string(*g.ecc_uncorrected) + " uncorrected ECC error" +
                (*g.ecc_uncorrected == 1 ? "" : "s") +
                " since the driver loaded (reset the GPU, or drain the node)");
  }
  std::set<uint64_t> said;
  for (const auto& x : g.xids)
    if (said.insert(x.xid).second) r.push_back(describe_xid(x.xid) + " reported");
  if (g.remap_failed) r.push_back("row remapping failed (the GPU needs service)");
  if (g.remap_pending) r.push_back("a row remap is pending (reset the GPU)");
  if (g.retired_pages_pending) r.push_back("page retirement pending (reset the GPU)");
  return r;
}

}  // namespace

std::string process_name(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/comm";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return {};
  std::string s(buf, static_cast<size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::vector<GpuProblem> preflight_problems(const std::vector<std::string>& names,
                                           const std::vector<GpuState>& gpus,
                                           const std::function<std::string(int pid)>& name_of) {
  std::vector<GpuProblem> out;
  if (names.empty()) {
    out.push_back({"this node", what_nvml_sees(gpus) + ", and CUDA_VISIBLE_DEVICES names none: "
                                                       "there is no GPU to check"});
    return out;
  }
  std::set<int> checked;
  for (const auto& name : names) {
    if (name.rfind("MIG-", 0) == 0) {
      out.push_back({name,
                     "a MIG instance: --gpu-preflight checks whole GPUs (name them by index or "
                     "GPU-UUID in CUDA_VISIBLE_DEVICES)"});
      continue;
    }
    auto index = nvml_index_of(name, gpus);
    if (!index) {
      out.push_back({"GPU " + name, "the node would use it, but " + what_nvml_sees(gpus)});
      continue;
    }
    if (!checked.insert(*index).second) continue;
    const GpuState& g = gpus[static_cast<size_t>(*index)];
    auto r = reasons_of(g, name_of);
    if (!r.empty()) out.push_back({gpu_label(g), join(r, "; ")});
  }
  return out;
}

void run_gpu_preflight(GpuMonitor& monitor, const std::string& host, spdlog::logger& log) {
  if (!monitor.available()) return;  // its one line said so
  const auto gpus = monitor.snapshot();
  const auto names = monitor.node_gpus();
  const auto problems = preflight_problems(names, gpus);
  if (problems.empty()) {
    std::vector<std::string> labels;
    for (const auto& n : names)
      if (auto i = nvml_index_of(n, gpus)) labels.push_back(gpu_label(gpus[*i]));
    log.info("GPU pre-flight passed on {}: {}", host, join(labels, ", "));
    return;
  }
  std::string text = "GPU pre-flight failed on " + host + "; this node does not join the job:";
  for (const auto& p : problems) text += "\n  " + p.gpu + ": " + p.reason;
  throw GpuPreflightError(text);
}

}  // namespace cohort::launch

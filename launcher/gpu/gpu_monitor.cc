#include "gpu/gpu_monitor.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <sstream>

#include "cohort/base/parse.h"
#include "gpu/gpu_metrics.h"
#include "gpu/gpu_text.h"
#include "gpu/nvml_library.h"

namespace cohort::launch {
namespace {

constexpr size_t kXidsKeptPerGpu = 16;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

GpuMonitorOptions GpuMonitorOptions::from_env(const EnvMap& env, std::string nproc_spec, int nproc,
                                              bool requested) {
  GpuMonitorOptions o;
  if (auto it = env.find("COHORT_NVML_LIBRARY"); it != env.end() && !it->second.empty())
    o.library = it->second;
  if (auto it = env.find("CUDA_VISIBLE_DEVICES"); it != env.end())
    o.cuda_visible_devices = it->second;
  o.nproc_spec = std::move(nproc_spec);
  o.nproc = nproc;
  o.requested = requested;
  return o;
}

std::vector<std::string> node_gpu_names(const std::optional<std::string>& cuda_visible_devices,
                                        const std::string& nproc_spec, int nproc, int nvml_count) {
  std::vector<std::string> names;
  if (cuda_visible_devices) {
    std::stringstream ss(*cuda_visible_devices);
    for (std::string item; std::getline(ss, item, ',');) {
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      // CUDA stops at the first entry that is no device: an empty one, or a negative index.
      if (item.empty() || item[0] == '-') break;
      names.push_back(item);
    }
    return names;
  }
  int n = nvml_count;
  if (nproc_spec != "gpu" && nproc_spec != "auto") n = std::min(nproc, nvml_count);
  for (int i = 0; i < n; ++i) names.push_back(std::to_string(i));
  return names;
}

std::optional<int> nvml_index_of(const std::string& name, const std::vector<GpuState>& gpus) {
  if (all_digits(name)) {
    auto i = parse_int(name, 0, 1 << 20);
    if (i && *i < static_cast<int>(gpus.size())) return *i;
    return std::nullopt;
  }
  // CUDA takes "GPU-<uuid>" or any unique prefix of it.
  std::optional<int> found;
  for (const auto& g : gpus) {
    if (!g.uuid.empty() && g.uuid.rfind(name, 0) == 0) {
      if (found) return std::nullopt;  // ambiguous: CUDA would refuse it too
      found = g.index;
    }
  }
  return found;
}

GpuMonitor::GpuMonitor(GpuMonitorOptions options, std::shared_ptr<spdlog::logger> log)
    : options_(std::move(options)), log_(std::move(log)) {}

GpuMonitor::~GpuMonitor() = default;

bool GpuMonitor::start() {
  std::lock_guard lock(mu_);
  if (started_) return nvml_ != nullptr;
  started_ = true;
  int count = 0;
  try {
    nvml_ = NvmlLibrary::open(options_.library);
    count = nvml_->device_count();
  } catch (const NvmlError& e) {
    nvml_.reset();
    off_reason_ = e.what();
  }
  if (!nvml_) {
    log_->log(options_.requested ? spdlog::level::warn : spdlog::level::info,
              "GPU health is off: {}. No GPU metrics, GPU pre-flight or GPU notes in failure "
              "summaries (COHORT_NVML_LIBRARY names NVML's library when it is elsewhere)",
              off_reason_);
    return false;
  }
  node_gpus_ =
      node_gpu_names(options_.cuda_visible_devices, options_.nproc_spec, options_.nproc, count);
  watched_ = nvml_->watch_xids();
  xid_counts_.assign(static_cast<size_t>(count), 0);
  const std::string driver = nvml_->driver_version();
  log_->info("GPU health: NVML{} sees {} GPU(s); Xid events watched on {} of them",
             driver.empty() ? "" : " (driver " + driver + ")", count, watched_.size());
  return true;
}

bool GpuMonitor::available() const {
  std::lock_guard lock(mu_);
  return nvml_ != nullptr;
}

std::string GpuMonitor::off_reason() const {
  std::lock_guard lock(mu_);
  return off_reason_;
}

std::vector<std::string> GpuMonitor::node_gpus() const {
  std::lock_guard lock(mu_);
  return node_gpus_;
}

void GpuMonitor::poll_locked() {
  for (const XidEvent& x : nvml_->poll_xids()) {
    if (x.gpu >= 0 && static_cast<size_t>(x.gpu) < xid_counts_.size()) ++xid_counts_[x.gpu];
    xids_.push_back(x);
    // Keep the last few of this GPU.
    size_t same = 0;
    for (const auto& y : xids_) same += y.gpu == x.gpu;
    if (same > kXidsKeptPerGpu) {
      auto first = std::find_if(xids_.begin(), xids_.end(),
                                [&](const XidEvent& y) { return y.gpu == x.gpu; });
      xids_.erase(first);
    }
  }
}

GpuState GpuMonitor::read_locked(int index) {
  GpuState s = nvml_->read_device(index);
  s.xid_watched = std::find(watched_.begin(), watched_.end(), index) != watched_.end();
  if (static_cast<size_t>(index) < xid_counts_.size()) s.xid_count = xid_counts_[index];
  for (const auto& x : xids_)
    if (x.gpu == index) s.xids.push_back(x);
  return s;
}

std::vector<GpuState> GpuMonitor::snapshot_locked() {
  std::vector<GpuState> out;
  if (!nvml_) return out;
  poll_locked();
  int count = 0;
  try {
    count = nvml_->device_count();
  } catch (const NvmlError& e) {
    log_->warn("GPU health: {}", e.what());
    return out;
  }
  for (int i = 0; i < count; ++i) out.push_back(read_locked(i));
  return out;
}

std::vector<GpuState> GpuMonitor::snapshot() {
  std::lock_guard lock(mu_);
  return snapshot_locked();
}

std::string GpuMonitor::metrics_text() {
  std::lock_guard lock(mu_);
  return gpu_metrics_text(snapshot_locked());
}

std::optional<GpuState> GpuMonitor::rank_state_locked(int local_rank) {
  if (!nvml_ || node_gpus_.empty() || local_rank < 0) return std::nullopt;
  const std::string& name = node_gpus_[static_cast<size_t>(local_rank) % node_gpus_.size()];
  if (!all_digits(name)) {
    // A UUID: every GPU's is needed to find it.
    std::vector<GpuState> all = snapshot_locked();
    auto index = nvml_index_of(name, all);
    if (!index) return std::nullopt;
    return all[static_cast<size_t>(*index)];
  }
  auto index = parse_int(name, 0, 1 << 20);
  int count = 0;
  try {
    count = nvml_->device_count();
  } catch (const NvmlError&) {
    return std::nullopt;
  }
  if (!index || *index >= count) return std::nullopt;
  poll_locked();
  return read_locked(*index);
}

std::optional<GpuState> GpuMonitor::state_of_rank(int local_rank) {
  std::lock_guard lock(mu_);
  return rank_state_locked(local_rank);
}

std::string GpuMonitor::condition_of_rank(int local_rank) {
  std::lock_guard lock(mu_);
  auto s = rank_state_locked(local_rank);
  return s ? describe_condition(*s) : std::string();
}

void GpuMonitor::workers_started() {
  std::lock_guard lock(mu_);
  if (!nvml_) return;
  poll_locked();
  round_start_ = now_seconds();
}

std::string GpuMonitor::failure_note(int local_rank) {
  std::lock_guard lock(mu_);
  auto s = rank_state_locked(local_rank);
  if (!s) return {};
  std::vector<XidEvent> recent;
  for (const auto& x : s->xids)
    if (x.wall_time >= round_start_) recent.push_back(x);
  return launch::failure_note(*s, recent);
}

}  // namespace cohort::launch

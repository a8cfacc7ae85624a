#include "gpu/nvml_library.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "gpu/nvml_api.h"

namespace cohort::launch {

struct NvmlLibrary::Api {
  nvml::InitFn init = nullptr;
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DeviceGetCountFn device_count = nullptr;
  nvml::DeviceGetHandleByIndexFn handle_by_index = nullptr;
  // Optional: a missing one leaves its reading empty.
  nvml::SystemGetDriverVersionFn driver_version = nullptr;
  nvml::DeviceGetStringFn uuid = nullptr;
  nvml::DeviceGetStringFn name = nullptr;
  nvml::DeviceGetUtilizationRatesFn utilization = nullptr;
  nvml::DeviceGetMemoryInfoFn memory = nullptr;
  nvml::DeviceGetTemperatureFn temperature = nullptr;
  nvml::DeviceGetUintFn power = nullptr;
  nvml::DeviceGetUintFn power_limit = nullptr;
  nvml::DeviceGetClockInfoFn clock = nullptr;
  nvml::DeviceGetReasonsFn reasons = nullptr;
  nvml::DeviceGetTotalEccErrorsFn ecc = nullptr;
  nvml::DeviceGetProcessesFn processes = nullptr;
  nvml::DeviceGetRemappedRowsFn remapped_rows = nullptr;
  nvml::DeviceGetRetiredPagesPendingFn retired_pending = nullptr;
  nvml::EventSetCreateFn event_set_create = nullptr;
  nvml::DeviceRegisterEventsFn register_events = nullptr;
  nvml::EventSetWaitFn event_set_wait = nullptr;
  nvml::EventSetFreeFn event_set_free = nullptr;

  std::string error(nvml::Return r) const {
    const char* s = error_string ? error_string(r) : nullptr;
    return (s && *s ? std::string(s) : "NVML error") + " (" + std::to_string(r) + ")";
  }
};

namespace {

// The first of `names` the library exports, as type T (nullptr when none).
template <typename T>
T resolve(void* handle, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (void* f = ::dlsym(handle, n)) return reinterpret_cast<T>(f);
  return nullptr;
}

// NVML opens the driver's device files (/dev/nvidiactl, /dev/nvidia0, ...); whether it marks them
// close-on-exec is the driver's business. cohortrun's workers must not inherit them (a worker
// would hold the device open after cohortrun closed NVML): mark every such descriptor.
void close_driver_fds_on_exec() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return;
  const int own = ::dirfd(d);
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int fd = std::atoi(e->d_name);
    if (fd == own) continue;
    char target[256];
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    if (std::strncmp(target, "/dev/nvidia", 11) != 0) continue;
    const int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  }
  ::closedir(d);
}

// A string query (UUID, name) into a std::string; "" when it fails.
std::string device_string(nvml::DeviceGetStringFn fn, nvml::Device d, unsigned size,
                          nvml::Return* rc) {
  if (fn == nullptr) return {};
  std::vector<char> buf(size + 1, '\0');
  *rc = fn(d, buf.data(), size);
  return *rc == nvml::kSuccess ? std::string(buf.data()) : std::string();
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::unique_ptr<NvmlLibrary> NvmlLibrary::open(const std::string& library) {
  ::dlerror();
  void* h = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = ::dlerror();
    throw NvmlError(why ? why : library + ": cannot be opened", -1);
  }
  auto api = std::make_unique<Api>();
  Api& a = *api;
  a.init = resolve<nvml::InitFn>(h, {"nvmlInit_v2"});
  a.shutdown = resolve<nvml::ShutdownFn>(h, {"nvmlShutdown"});
  a.error_string = resolve<nvml::ErrorStringFn>(h, {"nvmlErrorString"});
  a.device_count = resolve<nvml::DeviceGetCountFn>(h, {"nvmlDeviceGetCount_v2"});
  a.handle_by_index = resolve<nvml::DeviceGetHandleByIndexFn>(h, {"nvmlDeviceGetHandleByIndex_v2"});
  for (auto [fn, name] : {std::pair<bool, const char*>{a.init != nullptr, "nvmlInit_v2"},
                          {a.shutdown != nullptr, "nvmlShutdown"},
                          {a.device_count != nullptr, "nvmlDeviceGetCount_v2"},
                          {a.handle_by_index != nullptr, "nvmlDeviceGetHandleByIndex_v2"}}) {
    if (!fn) {
      ::dlclose(h);
      throw NvmlError(library + " has no " + name + " (an NVML older than cohort needs?)",
                      nvml::kErrorFunctionNotFound);
    }
  }
  a.driver_version = resolve<nvml::SystemGetDriverVersionFn>(h, {"nvmlSystemGetDriverVersion"});
  a.uuid = resolve<nvml::DeviceGetStringFn>(h, {"nvmlDeviceGetUUID"});
  a.name = resolve<nvml::DeviceGetStringFn>(h, {"nvmlDeviceGetName"});
  a.utilization = resolve<nvml::DeviceGetUtilizationRatesFn>(h, {"nvmlDeviceGetUtilizationRates"});
  a.memory = resolve<nvml::DeviceGetMemoryInfoFn>(h, {"nvmlDeviceGetMemoryInfo"});
  a.temperature = resolve<nvml::DeviceGetTemperatureFn>(h, {"nvmlDeviceGetTemperature"});
  a.power = resolve<nvml::DeviceGetUintFn>(h, {"nvmlDeviceGetPowerUsage"});
  a.power_limit = resolve<nvml::DeviceGetUintFn>(h, {"nvmlDeviceGetEnforcedPowerLimit"});
  a.clock = resolve<nvml::DeviceGetClockInfoFn>(h, {"nvmlDeviceGetClockInfo"});
  // Renamed in CUDA 12.2 (the old name stays as an alias in the library).
  a.reasons = resolve<nvml::DeviceGetReasonsFn>(
      h, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  a.ecc = resolve<nvml::DeviceGetTotalEccErrorsFn>(h, {"nvmlDeviceGetTotalEccErrors"});
  // _v3 and _v2 take the same four-field nvmlProcessInfo_t (nvml_api.h).
  a.processes = resolve<nvml::DeviceGetProcessesFn>(
      h, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"});
  a.remapped_rows = resolve<nvml::DeviceGetRemappedRowsFn>(h, {"nvmlDeviceGetRemappedRows"});
  a.retired_pending =
      resolve<nvml::DeviceGetRetiredPagesPendingFn>(h, {"nvmlDeviceGetRetiredPagesPendingStatus"});
  a.event_set_create = resolve<nvml::EventSetCreateFn>(h, {"nvmlEventSetCreate"});
  a.register_events = resolve<nvml::DeviceRegisterEventsFn>(h, {"nvmlDeviceRegisterEvents"});
  a.event_set_wait = resolve<nvml::EventSetWaitFn>(h, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  a.event_set_free = resolve<nvml::EventSetFreeFn>(h, {"nvmlEventSetFree"});

  const nvml::Return rc = a.init();
  if (rc != nvml::kSuccess) {
    const std::string why = a.error(rc);
    ::dlclose(h);
    throw NvmlError(library + ": nvmlInit_v2 failed: " + why, rc);
  }
  close_driver_fds_on_exec();
  return std::unique_ptr<NvmlLibrary>(new NvmlLibrary(h, std::move(api)));
}

NvmlLibrary::NvmlLibrary(void* handle, std::unique_ptr<Api> api)
    : handle_(handle), api_(std::move(api)) {}

NvmlLibrary::~NvmlLibrary() {
  if (events_ && api_->event_set_free) api_->event_set_free(static_cast<nvml::EventSet>(events_));
  api_->shutdown();
  ::dlclose(handle_);
}

std::string NvmlLibrary::driver_version() const {
  if (api_->driver_version == nullptr) return {};
  char buf[nvml::kDriverVersionBufferSize + 1] = {};
  if (api_->driver_version(buf, nvml::kDriverVersionBufferSize) != nvml::kSuccess) return {};
  return buf;
}

int NvmlLibrary::device_count() const {
  unsigned n = 0;
  const nvml::Return rc = api_->device_count(&n);
  if (rc != nvml::kSuccess) throw NvmlError("nvmlDeviceGetCount_v2 failed: " + api_->error(rc), rc);
  return static_cast<int>(n);
}

GpuState NvmlLibrary::read_device(int index) const {
  const Api& a = *api_;
  GpuState s;
  s.index = index;
  nvml::Device d = nullptr;
  nvml::Return rc = a.handle_by_index(static_cast<unsigned>(index), &d);
  if (rc != nvml::kSuccess) {
    s.error = "NVML cannot reach it: " + a.error(rc);
    return s;
  }
  // A lost GPU answers every call with GPU_IS_LOST: say so once and read nothing more.
  bool lost = false;
  auto ok = [&](nvml::Return r) {
    if (r == nvml::kErrorGpuIsLost) lost = true;
    return r == nvml::kSuccess;
  };
  s.uuid = device_string(a.uuid, d, nvml::kUuidBufferSize, &rc);
  if (rc == nvml::kErrorGpuIsLost) lost = true;
  s.name = device_string(a.name, d, nvml::kNameBufferSize, &rc);
  if (!lost && a.utilization) {
    nvml::Utilization u{};
    if (ok(a.utilization(d, &u))) {
      s.utilization_percent = u.gpu;
      s.memory_utilization_percent = u.memory;
    }
  }
  if (!lost && a.memory) {
    nvml::Memory m{};
    if (ok(a.memory(d, &m))) {
      s.memory_used_bytes = m.used;
      s.memory_total_bytes = m.total;
    }
  }
  unsigned v = 0;
  if (!lost && a.temperature && ok(a.temperature(d, nvml::kTemperatureGpu, &v)))
    s.temperature_c = v;
  if (!lost && a.power && ok(a.power(d, &v))) s.power_w = v / 1000.0;
  if (!lost && a.power_limit && ok(a.power_limit(d, &v))) s.power_limit_w = v / 1000.0;
  if (!lost && a.clock && ok(a.clock(d, nvml::kClockSm, &v))) s.sm_clock_mhz = v;
  if (!lost && a.clock && ok(a.clock(d, nvml::kClockMem, &v))) s.memory_clock_mhz = v;
  unsigned long long ull = 0;
  if (!lost && a.reasons && ok(a.reasons(d, &ull))) s.throttle_reasons = ull;
  if (!lost && a.ecc && ok(a.ecc(d, nvml::kMemoryErrorUncorrected, nvml::kVolatileEcc, &ull)))
    s.ecc_uncorrected = ull;
  if (!lost && a.ecc && ok(a.ecc(d, nvml::kMemoryErrorCorrected, nvml::kVolatileEcc, &ull)))
    s.ecc_corrected = ull;
  if (!lost && a.processes) {
    // Ask for the count, then the list; processes may start in between, so leave room, and
    // give the buffer twice the room NVML is told of (no header has ever made the entries
    // larger than 32 bytes; ProcessInfo is 24).
    unsigned count = 0;
    rc = a.processes(d, &count, nullptr);
    if (rc == nvml::kSuccess) {
      s.processes_known = true;
    } else if (rc == nvml::kErrorInsufficientSize) {
      for (int attempt = 0; attempt < 3 && !s.processes_known; ++attempt) {
        unsigned room = count + 8;
        std::vector<nvml::ProcessInfo> buf(2 * room);
        count = room;
        rc = a.processes(d, &count, buf.data());
        if (rc == nvml::kSuccess) {
          s.processes_known = true;
          for (unsigned i = 0; i < count && i < room; ++i) {
            GpuProcess p;
            p.pid = static_cast<int>(buf[i].pid);
            if (buf[i].used_gpu_memory != nvml::kValueNotAvailable)
              p.memory_bytes = buf[i].used_gpu_memory;
            s.processes.push_back(p);
          }
        } else if (rc != nvml::kErrorInsufficientSize) {
          ok(rc);
          break;
        }
      }
    } else {
      ok(rc);
    }
  }
  if (!lost && a.remapped_rows) {
    unsigned corr = 0, unc = 0, pending = 0, failure = 0;
    if (ok(a.remapped_rows(d, &corr, &unc, &pending, &failure))) {
      s.remapped_rows_uncorrectable = unc;
      s.remap_pending = pending != 0;
      s.remap_failed = failure != 0;
    }
  }
  if (!lost && a.retired_pending) {
    int pending = 0;
    if (ok(a.retired_pending(d, &pending)))
      s.retired_pages_pending = pending == nvml::kFeatureEnabled;
  }
  if (lost) {
    GpuState gone;
    gone.index = index;
    gone.uuid = s.uuid;
    gone.name = s.name;
    gone.error = "GPU is lost (NVML: GPU_IS_LOST; it fell off the bus or stopped answering)";
    return gone;
  }
  return s;
}

std::vector<int> NvmlLibrary::watch_xids() {
  if (watch_tried_) return watched_;
  watch_tried_ = true;
  const Api& a = *api_;
  if (!a.event_set_create || !a.register_events || !a.event_set_wait) return watched_;
  nvml::EventSet set = nullptr;
  if (a.event_set_create(&set) != nvml::kSuccess) return watched_;
  events_ = set;
  unsigned n = 0;
  if (a.device_count(&n) != nvml::kSuccess) n = 0;
  devices_.assign(n, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    nvml::Device d = nullptr;
    if (a.handle_by_index(i, &d) != nvml::kSuccess) continue;
    devices_[i] = d;
    if (a.register_events(d, nvml::kEventTypeXidCriticalError, set) == nvml::kSuccess)
      watched_.push_back(static_cast<int>(i));
  }
  close_driver_fds_on_exec();
  return watched_;
}

std::vector<XidEvent> NvmlLibrary::poll_xids() {
  std::vector<XidEvent> out;
  if (events_ == nullptr) return out;
  // A bound, so that a driver flooding events cannot hold the caller.
  for (int i = 0; i < 1024; ++i) {
    nvml::EventData e{};
    if (api_->event_set_wait(static_cast<nvml::EventSet>(events_), &e, 0) != nvml::kSuccess) break;
    if (!(e.event_type & nvml::kEventTypeXidCriticalError)) continue;
    XidEvent x;
    x.gpu = -1;
    for (size_t k = 0; k < devices_.size(); ++k)
      if (devices_[k] == static_cast<void*>(e.device)) x.gpu = static_cast<int>(k);
    x.xid = e.event_data;
    x.wall_time = now_seconds();
    out.push_back(x);
  }
  return out;
}

}  // namespace cohort::launch
